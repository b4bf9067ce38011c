#pragma once
// The pure half of automatic selection: what a candidate's measurement says and how the winner is
// picked from measurements that every rank holds identically (they are already reduced over the
// plan communicator). No MPI here, so the rule is unit-tested on its own.

#include <halox/backend.hpp>

#include <string>
#include <vector>

namespace halox::detail {

/// Number of `backend` enumerators (automatic included); sizes fixed per-backend arrays.
inline constexpr int backend_count = static_cast<int>(backend::ucx_iov) + 1;

/// What became of one candidate during selection.
enum class candidate_status {
  measured,    ///< built on every rank and timed
  unavailable, ///< its executor could not be built on at least one rank
  skipped      ///< not tried: the tuning budget was used up before its turn
};

/// One candidate and, when measured, its score.
struct candidate_result {
  backend b = backend::mpi_pack;
  candidate_status status = candidate_status::skipped;
  double median = 0.0; ///< seconds: median over trials of the max-over-ranks trial time
};

/// Median of `v` (mean of the two middle values for an even count); 0 for an empty vector.
[[nodiscard]] double median(std::vector<double> v);

/// Index in `c` of the winner: the smallest median among measured candidates, ties broken by
/// the smaller enumerator of `backend`, so every rank holding the same numbers picks the same
/// one. -1 when no candidate was measured.
[[nodiscard]] int pick_fastest(std::vector<candidate_result> const& c) noexcept;

/// True when tuning must stop before the next candidate: `elapsed` (the max over ranks of the
/// seconds spent since selection began) has reached `budget`. At least one candidate is always
/// measured, whatever the budget, so there is something to choose from.
[[nodiscard]] bool budget_used(double elapsed, double budget, int measured_so_far) noexcept;

/// The order candidates are tried in: `available` (enum order) with the pre-autotuning default
/// (`preferred`, when present) moved to the front, so that a tight budget never ends up with a
/// choice worse than the old default had it been the only one measured.
[[nodiscard]] std::vector<backend> trial_order(std::vector<backend> available, backend preferred);

/// "12.3 us", "1.20 ms", "2.50 s": three significant digits.
[[nodiscard]] std::string format_seconds(double s);

/// "mpi_pack 12.3 us, mpi_persistent 11.0 us *, alltoallw unavailable, ..." in enum order, the
/// winner (`chosen`) marked with '*'.
[[nodiscard]] std::string format_candidates(std::vector<candidate_result> c, backend chosen);

} // namespace halox::detail
