#include "oracle.hpp"
#include "sections.hpp"

#include <cstdio>

namespace halox::verify {

namespace {
// Combines the verdicts of several checks over all ranks in one all-reduce; prints the first
// mismatch of each failing rank. Returns, per check, whether it passed everywhere.
std::vector<bool> agree(std::vector<case_result const*> const& rs,
                        std::vector<std::string> const& what, bool quiet) {
  std::vector<unsigned long long> local(rs.size()), global(rs.size());
  for (std::size_t i = 0; i < rs.size(); ++i) local[i] = rs[i]->mismatches;
  MPI_Allreduce(local.data(), global.data(), static_cast<int>(rs.size()), MPI_UNSIGNED_LONG_LONG,
                MPI_SUM, MPI_COMM_WORLD);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<bool> ok(rs.size());
  for (std::size_t i = 0; i < rs.size(); ++i) {
    ok[i] = global[i] == 0;
    if (!ok[i] && local[i] != 0 && !quiet)
      std::fprintf(stderr, "[rank %d] FAILED %s: %llu mismatch(es); first: %s\n", rank,
                   what[i].c_str(), local[i], rs[i]->first_error.c_str());
  }
  return ok;
}
} // namespace

totals run_halo_section(backend b, std::uint64_t seed, long cases, index_t max_elements,
                        bool quiet) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  totals t;
  for (long i = 0; i < cases; ++i) {
    std::mt19937_64 rng(seed * 1000003ull + static_cast<std::uint64_t>(i));
    halo_case const c = random_halo_case(rng, size, max_elements);
    std::string const what =
        std::string("halo ") + to_string(b) + " case " + std::to_string(i) + " (" + c.str() + ")";
    halo_result r;
    try {
      r = run_halo_case(c, b, MPI_COMM_WORLD);
    } catch (error const& e) {
      // Errors of halox are raised on every rank (collective checks), so all ranks land here.
      r.forward.mismatches = r.reverse.mismatches = 1;
      r.forward.first_error = r.reverse.first_error = std::string("exception: ") + e.what();
    }
    auto const ok = agree({&r.forward, &r.reverse}, {what + " forward", what + " reverse"}, quiet);
    for (bool v : ok) (v ? t.passed : t.failed) += 1;
  }
  return t;
}

std::vector<section> const& sections() {
  static std::vector<section> const all = [] {
    return std::vector<section>{{"halo", &run_halo_section},
                                {"redistribute", &run_redistribute_section}};
  }();
  return all;
}

} // namespace halox::verify
