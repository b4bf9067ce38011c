// The plan cache's key and file format: formatting, round trips, and every way a file is
// rejected (foreign MPI library, halox version or format version; corrupt header or entry).
#include "tune/cache_file.hpp"

#include <gtest/gtest.h>

using namespace halox;
using namespace halox::detail;

namespace {

std::string const mpi = "MPICH Version: 4.2.0 Release date: Fri Feb  9 12:29:21 PM CST 2024";
std::string const version = "0.1.0";

cache_key sample_key() {
  cache_key k;
  k.geometry = 0x1234;
  k.schedule = 0xfedcba9876543210ull;
  k.ranks = 4;
  k.slots = 2;
  k.messages = 12;
  k.bytes = 4096;
  return k;
}

cache_entry sample_entry() {
  cache_entry e;
  e.chosen = backend::mpi_persistent;
  e.candidates = {{backend::mpi_pack, candidate_status::measured, 2.5e-5},
                  {backend::mpi_persistent, candidate_status::measured, 1.25e-5},
                  {backend::alltoallw, candidate_status::unavailable, 0.0},
                  {backend::alltoallv, candidate_status::skipped, 0.0}};
  return e;
}

std::string sample_file() {
  return cache_file_header(mpi, version) + format_entry(format_key(sample_key()), sample_entry());
}

TEST(TuneCache, KeyFormat) {
  EXPECT_EQ(format_key(sample_key()), "geom=0000000000001234 sched=fedcba9876543210 ranks=4 "
                                      "slots=2 msgs=12 bytes=4096 mem=host dev=host");
  cache_key d = sample_key();
  d.memory = memory_space::device;
  d.device = "NVIDIA H200 =x";
  EXPECT_EQ(format_key(d).substr(format_key(d).find("mem=")), "mem=device dev=NVIDIA_H200__x");
  EXPECT_NE(full_key(sample_key(), mpi, version),
            full_key(sample_key(), "Open MPI v4.1.5", version));
  EXPECT_NE(full_key(sample_key(), mpi, version), full_key(sample_key(), mpi, "0.2.0"));
}

TEST(TuneCache, KeyChangesWithEveryField) {
  std::string const base = format_key(sample_key());
  auto differs = [&](auto change) {
    cache_key k = sample_key();
    change(k);
    return format_key(k) != base;
  };
  EXPECT_TRUE(differs([](cache_key& k) { k.geometry++; }));
  EXPECT_TRUE(differs([](cache_key& k) { k.schedule++; }));
  EXPECT_TRUE(differs([](cache_key& k) { k.ranks++; }));
  EXPECT_TRUE(differs([](cache_key& k) { k.slots++; }));
  EXPECT_TRUE(differs([](cache_key& k) { k.messages++; }));
  EXPECT_TRUE(differs([](cache_key& k) { k.bytes++; }));
  EXPECT_TRUE(differs([](cache_key& k) { k.memory = memory_space::device; }));
  EXPECT_TRUE(differs([](cache_key& k) { k.device = "NVIDIA H100"; }));
}

TEST(TuneCache, RoundTrip) {
  auto const c = parse_cache_file(sample_file(), mpi, version);
  ASSERT_EQ(c.status, cache_file_contents::verdict::ok) << c.problem;
  ASSERT_EQ(c.entries.size(), 1u);
  EXPECT_EQ(c.entries[0].first, format_key(sample_key()));
  auto const& e = c.entries[0].second;
  EXPECT_EQ(e.chosen, backend::mpi_persistent);
  ASSERT_EQ(e.candidates.size(), 4u);
  EXPECT_EQ(e.candidates[0].b, backend::mpi_pack);
  EXPECT_DOUBLE_EQ(e.candidates[0].median, 2.5e-5);
  EXPECT_EQ(e.candidates[2].status, candidate_status::unavailable);
  EXPECT_EQ(e.candidates[3].status, candidate_status::skipped);
}

TEST(TuneCache, HeaderCarriesFormatMpiAndHaloxVersion) {
  std::string const h = cache_file_header(mpi, version);
  EXPECT_NE(h.find("halox-plan-cache 2\n"), std::string::npos);
  EXPECT_NE(h.find("mpi " + mpi + "\n"), std::string::npos);
  EXPECT_NE(h.find("halox 0.1.0\n"), std::string::npos);
}

TEST(TuneCache, EmptyAndCommentOnlyFilesAreEmpty) {
  EXPECT_EQ(parse_cache_file("", mpi, version).status, cache_file_contents::verdict::empty);
  EXPECT_EQ(parse_cache_file("# nothing yet\n\n", mpi, version).status,
            cache_file_contents::verdict::empty);
}

TEST(TuneCache, CommentsBlankLinesAndCrlfAreTolerated) {
  std::string text = "# a note\n\n" + sample_file() + "\n# trailing note\n";
  std::string crlf;
  for (char ch : text) crlf += ch == '\n' ? std::string("\r\n") : std::string(1, ch);
  EXPECT_EQ(parse_cache_file(text, mpi, version).status, cache_file_contents::verdict::ok);
  EXPECT_EQ(parse_cache_file(crlf, mpi, version).status, cache_file_contents::verdict::ok);
}

TEST(TuneCache, RepeatedHeaderIsCheckedAgain) {
  auto const twice = sample_file() + sample_file();
  auto const c = parse_cache_file(twice, mpi, version);
  EXPECT_EQ(c.status, cache_file_contents::verdict::ok) << c.problem;
  EXPECT_EQ(c.entries.size(), 2u);
  auto const mixed = sample_file() + cache_file_header("Open MPI v5.0.3", version);
  EXPECT_EQ(parse_cache_file(mixed, mpi, version).status, cache_file_contents::verdict::foreign);
}

TEST(TuneCache, ForeignFilesAreRejected) {
  auto other_mpi = parse_cache_file(sample_file(), "Open MPI v4.1.5", version);
  EXPECT_EQ(other_mpi.status, cache_file_contents::verdict::foreign);
  EXPECT_NE(other_mpi.problem.find("MPI library"), std::string::npos) << other_mpi.problem;
  EXPECT_TRUE(other_mpi.entries.empty());
  auto other_halox = parse_cache_file(sample_file(), mpi, "0.2.0");
  EXPECT_EQ(other_halox.status, cache_file_contents::verdict::foreign);
  EXPECT_NE(other_halox.problem.find("halox 0.1.0"), std::string::npos) << other_halox.problem;
  std::string v3 = sample_file();
  v3.replace(v3.find("halox-plan-cache 2"), 18, "halox-plan-cache 3");
  auto other_format = parse_cache_file(v3, mpi, version);
  EXPECT_EQ(other_format.status, cache_file_contents::verdict::foreign);
  EXPECT_NE(other_format.problem.find("format version 3"), std::string::npos);
}

TEST(TuneCache, IntervalsRoundTripAndVersionOneFilesStayReadable) {
  cache_entry e;
  e.chosen = backend::mpi_pack;
  e.candidates = {{backend::mpi_pack, candidate_status::measured, 2e-5, 1.9e-5, 2.1e-5, 17},
                  {backend::alltoallv, candidate_status::measured, 3e-5, 2.5e-5, 4e-5, 9}};
  std::string const line = format_entry(format_key(sample_key()), e);
  EXPECT_NE(line.find("mpi_pack=2e-05/1.9e-05/2.1e-05/17"), std::string::npos) << line;
  auto const c = parse_cache_file(cache_file_header(mpi, version) + line, mpi, version);
  ASSERT_EQ(c.status, cache_file_contents::verdict::ok) << c.problem;
  auto const& r = c.entries[0].second.candidates;
  ASSERT_EQ(r.size(), 2u);
  EXPECT_DOUBLE_EQ(r[1].lo, 2.5e-5);
  EXPECT_DOUBLE_EQ(r[1].hi, 4e-5);
  EXPECT_EQ(r[1].rounds, 9);
  // A version-1 file: medians only, read with an unknown interval (rounds 0).
  std::string v1 = cache_file_header(mpi, version);
  v1.replace(v1.find("halox-plan-cache 2"), 18, "halox-plan-cache 1");
  v1 += format_key(sample_key()) + " -> mpi_pack mpi_pack=2e-05 alltoallv=3e-05\n";
  auto const old = parse_cache_file(v1, mpi, version);
  ASSERT_EQ(old.status, cache_file_contents::verdict::ok) << old.problem;
  EXPECT_EQ(old.entries[0].second.candidates[0].rounds, 0);
  EXPECT_DOUBLE_EQ(old.entries[0].second.candidates[1].median, 3e-5);
  // Malformed intervals make the file corrupt.
  for (char const* bad : {"mpi_pack=2e-05/1e-05", "mpi_pack=2e-05/3e-05/1e-05/4",
                          "mpi_pack=2e-05/1e-05/3e-05/0", "mpi_pack=2e-05/1e-05/3e-05/4x"}) {
    std::string const t =
        cache_file_header(mpi, version) + format_key(sample_key()) + " -> mpi_pack " + bad + "\n";
    EXPECT_EQ(parse_cache_file(t, mpi, version).status, cache_file_contents::verdict::corrupt)
        << bad;
  }
}

TEST(TuneCache, CorruptFilesAreRejected) {
  using verdict = cache_file_contents::verdict;
  auto corrupt = [&](std::string const& text) {
    auto const c = parse_cache_file(text, mpi, version);
    EXPECT_TRUE(c.entries.empty());
    return c.status == verdict::corrupt && !c.problem.empty();
  };
  std::string const header = cache_file_header(mpi, version);
  std::string const key = format_key(sample_key());
  EXPECT_TRUE(corrupt("\x7f"
                      "ELF binary junk\n"));
  EXPECT_TRUE(corrupt("halox-plan-cache 1\nhalox 0.1.0\n"));             // mpi line missing
  EXPECT_TRUE(corrupt("halox-plan-cache 1\nmpi " + mpi + "\n"));         // truncated header
  EXPECT_TRUE(corrupt(header + "garbage\n"));                            // no arrow
  EXPECT_TRUE(corrupt(header + key + " -> warp_drive mpi_pack=1e-5\n")); // unknown backend
  EXPECT_TRUE(corrupt(header + key + " -> auto mpi_pack=1e-5\n"));       // not a backend
  EXPECT_TRUE(corrupt(header + key + " -> mpi_pack\n"));                 // no times
  EXPECT_TRUE(corrupt(header + key + " -> mpi_pack mpi_pack=-1\n"));     // negative time
  EXPECT_TRUE(corrupt(header + key + " -> mpi_pack mpi_pack=1e-5x\n"));  // trailing junk
  EXPECT_TRUE(corrupt(header + key + " -> mpi_pack mpi_pack=nan\n"));
  EXPECT_TRUE(corrupt(header + key + " -> mpi_pack alltoallv=1e-5\n")); // winner not measured
  EXPECT_TRUE(corrupt(header + key + " -> mpi_pack mpi_pack=unavailable\n"));
  EXPECT_TRUE(corrupt(header + "geom=1 sched=2 -> mpi_pack mpi_pack=1e-5\n")); // short key
  // One bad line poisons the whole file, good entries included.
  EXPECT_TRUE(corrupt(sample_file() + "geom=oops\n"));
}

} // namespace
