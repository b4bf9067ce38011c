#pragma once
// The pure half of automatic selection: what a candidate's measurement says and how the winner is
// picked from measurements that every rank holds identically (they are already reduced over the
// plan communicator). No MPI here, so the rule is unit-tested on its own.

#include <halox/backend.hpp>

#include <string>
#include <vector>

namespace halox::detail {

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
  double median = 0.0; ///< seconds: median over rounds of the max-over-ranks exchange time
  double lo = 0.0;     ///< lower end of the median's confidence interval (seconds)
  double hi = 0.0;     ///< upper end of the median's confidence interval (seconds)
  int rounds = 0;      ///< rounds it was timed in (0: unknown, e.g. an old cache file)
};

/// A median with its order-statistic confidence interval.
struct median_interval {
  double lo = 0.0, median = 0.0, hi = 0.0;
};

/// The median of `v` and a distribution-free confidence interval for it at level `confidence`:
/// [x(j), x(n+1-j)] of the sorted sample, with the largest j for which the binomial(n, 1/2)
/// probability of fewer than j samples below the true median is at most (1 - confidence) / 2.
/// Up to 8 samples (at 95 %) the interval is the whole range. All zeros for an empty `v`.
[[nodiscard]] median_interval median_ci(std::vector<double> v, double confidence = 0.95);

/// True when `a` is faster than `b` beyond doubt: `a`'s interval ends below `b`'s start.
[[nodiscard]] inline bool separated(median_interval const& a, median_interval const& b) noexcept {
  return a.hi < b.lo;
}

/// Limits of the measuring race (see docs/autotune.md, "What is measured").
struct race_limits {
  int min_rounds = 5;       ///< rounds before anything is dropped or decided
  int max_rounds = 64;      ///< rounds after which the best median wins regardless
  double budget = 2.0;      ///< seconds of tuning (max over ranks) after which the race stops
  double confidence = 0.95; ///< level of the medians' confidence intervals
  /// Candidates whose intervals all lie within this fraction of the leader's median are as good
  /// as each other: more rounds would not change the outcome by more than that.
  double equivalence = 0.02;
};

/// One racing candidate: its max-over-ranks time per round it took part in.
struct contestant {
  backend b = backend::mpi_pack;
  std::vector<double> times;
  bool active = true; ///< still timed in each round (false: dropped as clearly slower)
};

/// What the race says after a round.
struct race_verdict {
  int leader = -1;        ///< index of the smallest median among active contestants
  int runner_up = -1;     ///< the next smallest median (active or dropped); -1 when none
  bool separated = false; ///< the leader's interval is separated from every other one's
  bool stop = false;      ///< measuring is over: take `leader`
  std::vector<int> drop;  ///< active contestants to stop timing from now on
};

/// The race rule, on reduced timings only, so every rank reaches the same verdict. Once
/// `rounds >= min_rounds`: an active contestant whose interval starts above the leader's end is
/// dropped (clearly slower), and at rounds min_rounds * 2^k (k >= 1) successive halving keeps
/// only the better half by median of the active ones (never fewer than two). The race stops when
/// the leader is the only active contestant left (after min_rounds), when every active
/// contestant's interval lies within `equivalence` of the leader's median (after min_rounds:
/// they are equally good), at `max_rounds`, or when `elapsed` reached the budget (after at least
/// one round). Ties go to the smaller enumerator.
[[nodiscard]] race_verdict judge_race(std::vector<contestant> const& c, int rounds, double elapsed,
                                      race_limits const& lim);

/// The online re-check's rule: `winner` and `runner` hold the max-over-ranks times of the
/// first executions run with each (sorted in place, no allocation). Switch when the runner-up's
/// median is below the winner's by more than `margin` (a fraction, e.g. 0.05). `medians` (2
/// entries) receives both medians.
[[nodiscard]] bool recheck_switch(double* winner, int nw, double* runner, int nr, double margin,
                                  double* medians) noexcept;

/// Median of `v` (mean of the two middle values for an even count); 0 for an empty vector.
[[nodiscard]] double median(std::vector<double> v);

/// Index in `c` of the winner: the smallest median among measured candidates, ties broken by
/// the smaller enumerator of `backend`, so every rank holding the same numbers picks the same
/// one. -1 when no candidate was measured.
[[nodiscard]] int pick_fastest(std::vector<candidate_result> const& c) noexcept;

/// Index in `c` of the best measured candidate other than `chosen` (smallest median, ties to
/// the smaller enumerator): the runner-up of a decision. -1 when there is none.
[[nodiscard]] int second_best(std::vector<candidate_result> const& c, backend chosen) noexcept;

/// True when `winner`'s interval ends below `runner`'s start. Candidates without an interval
/// (rounds == 0: decisions read from a version-1 cache file) count as separated: there is
/// nothing to say they are not.
[[nodiscard]] bool intervals_separated(candidate_result const& winner,
                                       candidate_result const& runner) noexcept;

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

/// "12.3 us [11.9, 12.8]": a median and its interval (just the median when the interval is
/// unknown, i.e. lo == hi == median).
[[nodiscard]] std::string format_interval(candidate_result const& r);

/// "mpi_pack 12.3 us, mpi_persistent 11.0 us *, alltoallw unavailable, ..." in enum order, the
/// winner (`chosen`) marked with '*'.
[[nodiscard]] std::string format_candidates(std::vector<candidate_result> c, backend chosen);

} // namespace halox::detail
