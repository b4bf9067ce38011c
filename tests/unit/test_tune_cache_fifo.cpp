// The plan-cache file is opened without blocking and used only when it is a regular file: a
// FIFO (or a directory) named as the cache is ignored with a warning instead of hanging.
#include "tune/cache_file.hpp"
#include "tune/plan_cache.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <vector>

using namespace halox::detail;

namespace {

std::string temp_path(char const* tag) {
  return "/tmp/halox_unit_" + std::string(tag) + "_" + std::to_string(getpid());
}

// A FIFO that is removed with the test.
struct fifo {
  std::string path;
  explicit fifo(char const* tag) : path(temp_path(tag)) {
    std::remove(path.c_str());
    EXPECT_EQ(mkfifo(path.c_str(), 0600), 0) << "mkfifo " << path;
  }
  ~fifo() { std::remove(path.c_str()); }
};

// Runs `f` on another thread and fails (instead of hanging the suite) when it has not returned
// within a few seconds; a reader or writer stuck on the FIFO is then released by opening the
// other end, so that the thread can finish.
template <class F> auto within_seconds(std::string const& path, F f) {
  auto done = std::async(std::launch::async, f);
  if (done.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    ADD_FAILURE() << "blocked on the FIFO " << path;
    // Open and close both ends until the stuck call returns (it sees a peer, then EOF).
    while (done.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      int const r = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
      int const w = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
      if (r >= 0) ::close(r);
      if (w >= 0) ::close(w);
    }
  }
  return done.get();
}

} // namespace

TEST(TuneCacheFile, FifoIsNotReadNorWritten) {
  fifo const f("fifo");
  auto const r = within_seconds(f.path, [&] { return read_cache_file(f.path); });
  EXPECT_EQ(r.status, cache_file_read::outcome::unsuitable);
  EXPECT_NE(r.problem.find("not a regular file"), std::string::npos) << r.problem;
  EXPECT_FALSE(within_seconds(f.path, [&] { return append_cache_file(f.path, "x\n"); }));
  struct stat st {};
  ASSERT_EQ(::stat(f.path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO must be left as it was";
}

TEST(TuneCacheFile, DirectoryIsUnsuitableAbsentFileIsAbsent) {
  auto const dir = read_cache_file("/tmp");
  EXPECT_EQ(dir.status, cache_file_read::outcome::unsuitable);
  auto const none = read_cache_file(temp_path("absent") + "/no/such/file");
  EXPECT_EQ(none.status, cache_file_read::outcome::absent);
  EXPECT_TRUE(none.problem.empty()) << none.problem;
}

TEST(TuneCacheFile, RegularFileRoundTrip) {
  std::string const path = temp_path("regular");
  std::remove(path.c_str());
  EXPECT_TRUE(append_cache_file(path, "first\n"));
  EXPECT_TRUE(append_cache_file(path, "second\n"));
  auto const r = read_cache_file(path);
  EXPECT_EQ(r.status, cache_file_read::outcome::ok);
  EXPECT_EQ(r.text, "first\nsecond\n");
  std::remove(path.c_str());
}

TEST(TuneCacheFile, FifoAsPlanCacheIsIgnoredWithAWarning) {
  fifo const f("plan_cache");
  std::vector<std::string> log;
  test_hooks().log = [&](std::string const& line) { log.push_back(line); };
  cache_key k;
  k.geometry = 0x1234;
  k.ranks = 2;
  cache_entry e;
  e.chosen = halox::backend::mpi_pack;
  e.candidates.push_back({halox::backend::mpi_pack, candidate_status::measured, 1e-5});
  auto const hit = within_seconds(f.path, [&] { return cache_lookup(k, f.path); });
  EXPECT_FALSE(hit.has_value());
  within_seconds(f.path, [&] {
    cache_store(k, e, f.path, true);
    return 0;
  });
  test_hooks().log = nullptr;
  ASSERT_EQ(log.size(), 1u) << "one warning, when the file is first named";
  EXPECT_NE(log[0].find("plan cache " + f.path + " ignored"), std::string::npos) << log[0];
  EXPECT_NE(log[0].find("not a regular file"), std::string::npos) << log[0];
  halox::clear_plan_cache();
}
