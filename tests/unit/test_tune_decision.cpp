// The pure rules of automatic selection: median, the decision on reduced timings, the budget,
// the trial order and the report text.
#include "tune/decision.hpp"

#include <gtest/gtest.h>

#include <algorithm>

using namespace halox;
using namespace halox::detail;

namespace {

candidate_result measured(backend b, double t) { return {b, candidate_status::measured, t}; }

TEST(TuneDecision, MedianOddEvenAndEmpty) {
  EXPECT_DOUBLE_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_DOUBLE_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_DOUBLE_EQ(median({7.0}), 7.0);
  EXPECT_DOUBLE_EQ(median({}), 0.0);
  // One outlier (a preempted trial) does not move the median.
  EXPECT_DOUBLE_EQ(median({1e-5, 1.1e-5, 1.2e-5, 9.0, 1.05e-5}), 1.1e-5);
}

TEST(TuneDecision, PicksSmallestMedian) {
  std::vector<candidate_result> c = {measured(backend::mpi_pack, 3e-6),
                                     measured(backend::mpi_datatype, 2e-6),
                                     measured(backend::alltoallv, 5e-6)};
  EXPECT_EQ(pick_fastest(c), 1);
}

TEST(TuneDecision, TiesGoToTheSmallerEnumeratorWhateverTheOrder) {
  std::vector<candidate_result> c = {measured(backend::alltoallw, 2e-6),
                                     measured(backend::mpi_persistent, 2e-6),
                                     measured(backend::mpi_neighbor, 2e-6)};
  EXPECT_EQ(c[pick_fastest(c)].b, backend::mpi_persistent);
  std::reverse(c.begin(), c.end());
  EXPECT_EQ(c[pick_fastest(c)].b, backend::mpi_persistent);
}

TEST(TuneDecision, IgnoresUnmeasuredCandidates) {
  std::vector<candidate_result> c = {{backend::mpi_datatype, candidate_status::unavailable, 0.0},
                                     measured(backend::mpi_pack, 4e-6),
                                     {backend::alltoallv, candidate_status::skipped, 0.0}};
  EXPECT_EQ(pick_fastest(c), 1);
  c.erase(c.begin() + 1);
  EXPECT_EQ(pick_fastest(c), -1);
  EXPECT_EQ(pick_fastest({}), -1);
}

TEST(TuneDecision, BudgetAlwaysLetsOneCandidateThrough) {
  EXPECT_FALSE(budget_used(100.0, 0.0, 0));
  EXPECT_TRUE(budget_used(0.0, 0.0, 1));
  EXPECT_FALSE(budget_used(0.5, 2.0, 3));
  EXPECT_TRUE(budget_used(2.0, 2.0, 3));
}

TEST(TuneDecision, TrialOrderPutsTheOldDefaultFirst) {
  std::vector<backend> const all = {backend::mpi_datatype, backend::mpi_pack,
                                    backend::mpi_persistent, backend::alltoallv};
  auto const o = trial_order(all, backend::mpi_pack);
  std::vector<backend> const expect = {backend::mpi_pack, backend::mpi_datatype,
                                       backend::mpi_persistent, backend::alltoallv};
  EXPECT_EQ(o, expect);
  EXPECT_EQ(trial_order(all, backend::nccl), all); // absent: unchanged
}

TEST(TuneDecision, ReportListsEveryCandidateInEnumOrder) {
  std::vector<candidate_result> c = {measured(backend::mpi_pack, 12.3e-6),
                                     measured(backend::mpi_datatype, 2.5e-3),
                                     {backend::alltoallw, candidate_status::unavailable, 0.0},
                                     {backend::alltoallv, candidate_status::skipped, 0.0}};
  EXPECT_EQ(format_candidates(c, backend::mpi_pack),
            "mpi_datatype 2.5 ms, mpi_pack 12.3 us *, alltoallv skipped (budget), alltoallw "
            "unavailable");
  EXPECT_EQ(format_seconds(1.5), "1.5 s");
}

// --- Intervals, the race and the re-check -------------------------------------------------

std::vector<double> ramp(int n, double from = 1.0) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = from + i;
  return v;
}

TEST(TuneStatistics, MedianIntervalUsesBinomialOrderStatistics) {
  // n = 10: P(B <= 1) = 0.0107 <= 0.025 < P(B <= 2): the interval is [x(2), x(9)].
  auto v = ramp(10);
  std::reverse(v.begin(), v.end()); // order does not matter
  auto const a = median_ci(v);
  EXPECT_DOUBLE_EQ(a.median, 5.5);
  EXPECT_DOUBLE_EQ(a.lo, 2.0);
  EXPECT_DOUBLE_EQ(a.hi, 9.0);
  // n = 100: the textbook 95 % interval is [x(40), x(61)].
  auto const b = median_ci(ramp(100));
  EXPECT_DOUBLE_EQ(b.lo, 40.0);
  EXPECT_DOUBLE_EQ(b.hi, 61.0);
  // Up to 8 samples nothing narrower than the whole range reaches 95 %.
  auto const c = median_ci({3.0, 1.0, 2.0, 5.0, 4.0});
  EXPECT_DOUBLE_EQ(c.lo, 1.0);
  EXPECT_DOUBLE_EQ(c.hi, 5.0);
  EXPECT_DOUBLE_EQ(median_ci(ramp(9)).lo, 2.0);
  EXPECT_DOUBLE_EQ(median_ci(ramp(8)).lo, 1.0);
  // A lower confidence narrows it; large samples do not underflow.
  EXPECT_GT(median_ci(ramp(100), 0.5).lo, b.lo);
  auto const big = median_ci(ramp(5000));
  EXPECT_LT(big.lo, big.median);
  EXPECT_GT(big.hi, big.median);
  EXPECT_GT(big.lo, 2400.0);
  auto const none = median_ci({});
  EXPECT_EQ(none.lo, 0.0);
  EXPECT_EQ(none.hi, 0.0);
}

TEST(TuneStatistics, SeparationNeedsDisjointIntervals) {
  EXPECT_TRUE(separated({1.0, 1.5, 2.0}, {2.1, 3.0, 4.0}));
  EXPECT_FALSE(separated({1.0, 1.5, 2.0}, {2.0, 3.0, 4.0}));
  EXPECT_FALSE(separated({2.1, 3.0, 4.0}, {1.0, 1.5, 2.0}));
}

// `n` rounds of times around `center`, spread by +-`spread` in a fixed zig-zag.
std::vector<double> noisy(double center, double spread, int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(center + spread * ((i * 7) % 5 - 2) / 2.0);
  return v;
}

contestant runner(backend b, std::vector<double> t) { return {b, std::move(t), true}; }

TEST(TuneRace, NothingIsDecidedBeforeTheMinimumRounds) {
  race_limits lim; // min 5, max 64, budget 2 s
  std::vector<contestant> c = {runner(backend::mpi_pack, noisy(1.0, 0.01, 4)),
                               runner(backend::alltoallv, noisy(9.0, 0.01, 4))};
  auto const v = judge_race(c, 4, 0.1, lim);
  EXPECT_EQ(v.leader, 0);
  EXPECT_TRUE(v.drop.empty());
  EXPECT_FALSE(v.stop);
}

TEST(TuneRace, ClearlySlowerCandidatesAreDroppedAndTheRaceEnds) {
  race_limits lim;
  std::vector<contestant> c = {runner(backend::alltoallv, noisy(2.0, 0.01, 5)),
                               runner(backend::mpi_pack, noisy(1.0, 0.01, 5)),
                               runner(backend::alltoallw, noisy(3.0, 0.01, 5))};
  auto const v = judge_race(c, 5, 0.1, lim);
  EXPECT_EQ(v.leader, 1);
  EXPECT_EQ(v.runner_up, 0);
  EXPECT_EQ(v.drop, (std::vector<int>{0, 2}));
  EXPECT_TRUE(v.separated);
  EXPECT_TRUE(v.stop);
}

TEST(TuneRace, OverlappingLeadersKeepRacing) {
  race_limits lim;
  std::vector<contestant> c = {runner(backend::mpi_pack, noisy(1.0, 0.2, 7)),
                               runner(backend::mpi_persistent, noisy(1.05, 0.2, 7)),
                               runner(backend::alltoallw, noisy(5.0, 0.2, 7))};
  auto const v = judge_race(c, 7, 0.1, lim);
  EXPECT_EQ(v.leader, 0);
  EXPECT_EQ(v.runner_up, 1);
  EXPECT_EQ(v.drop, (std::vector<int>{2}));
  EXPECT_FALSE(v.separated);
  EXPECT_FALSE(v.stop);
  // A dropped contestant stays out of the leadership, its times kept for the report.
  c[2].active = false;
  EXPECT_EQ(judge_race(c, 7, 0.1, lim).leader, 0);
}

TEST(TuneRace, SuccessiveHalvingKeepsTheBetterHalfAtCheckpoints) {
  race_limits lim;
  lim.min_rounds = 4;
  auto field = [](int rounds) {
    return std::vector<contestant>{runner(backend::alltoallw, noisy(1.3, 0.5, rounds)),
                                   runner(backend::mpi_pack, noisy(1.0, 0.5, rounds)),
                                   runner(backend::alltoallv, noisy(1.2, 0.5, rounds)),
                                   runner(backend::mpi_datatype, noisy(1.1, 0.5, rounds)),
                                   runner(backend::mpi_neighbor, noisy(1.4, 0.5, rounds))};
  };
  // Round 4 (not a checkpoint) and 12 (not a power-of-two multiple): nobody is halved.
  EXPECT_TRUE(judge_race(field(4), 4, 0.0, lim).drop.empty());
  EXPECT_TRUE(judge_race(field(12), 12, 0.0, lim).drop.empty());
  // Round 8 = 2 * 4: five overlapping contestants, the three best go on.
  auto const v = judge_race(field(8), 8, 0.0, lim);
  EXPECT_EQ(v.leader, 1);
  EXPECT_EQ(v.drop, (std::vector<int>{0, 4}));
  EXPECT_FALSE(v.stop);
  // Two never get halved to one.
  std::vector<contestant> two = {runner(backend::mpi_pack, noisy(1.0, 0.5, 16)),
                                 runner(backend::alltoallv, noisy(1.1, 0.5, 16))};
  EXPECT_TRUE(judge_race(two, 16, 0.0, lim).drop.empty());
}

TEST(TuneRace, RoundAndTimeLimitsEndTheRace) {
  race_limits lim;
  lim.max_rounds = 20;
  lim.budget = 1.0;
  std::vector<contestant> c = {runner(backend::mpi_pack, noisy(1.0, 0.2, 20)),
                               runner(backend::alltoallv, noisy(1.0, 0.2, 20))};
  EXPECT_TRUE(judge_race(c, 20, 0.0, lim).stop);  // max_rounds
  EXPECT_FALSE(judge_race(c, 19, 0.0, lim).stop); // not yet
  for (auto& x : c) x.times.resize(1);
  EXPECT_TRUE(judge_race(c, 1, 1.0, lim).stop); // the budget, after one round
  // One contestant alone: decided after the minimum rounds.
  std::vector<contestant> one = {runner(backend::mpi_pack, noisy(1.0, 0.2, 5))};
  auto const v = judge_race(one, 5, 0.0, lim);
  EXPECT_TRUE(v.stop);
  EXPECT_EQ(v.runner_up, -1);
  EXPECT_TRUE(v.separated);
}

TEST(TuneRace, EquallyGoodCandidatesEndTheRaceEarly) {
  race_limits lim; // equivalence 2 %
  // Both within +-1 % of the leader's median: more rounds cannot matter by more than 2 %.
  std::vector<contestant> c = {runner(backend::mpi_pack, noisy(1.0, 0.01, 9)),
                               runner(backend::alltoallv, noisy(1.001, 0.01, 9))};
  auto v = judge_race(c, 9, 0.0, lim);
  EXPECT_FALSE(v.separated);
  EXPECT_TRUE(v.stop);
  // Wider spreads (+-10 %) keep racing.
  c = {runner(backend::mpi_pack, noisy(1.0, 0.1, 9)),
       runner(backend::alltoallv, noisy(1.001, 0.1, 9))};
  EXPECT_FALSE(judge_race(c, 9, 0.0, lim).stop);
  lim.equivalence = 0.0;
  c = {runner(backend::mpi_pack, noisy(1.0, 0.01, 9)),
       runner(backend::alltoallv, noisy(1.001, 0.01, 9))};
  EXPECT_FALSE(judge_race(c, 9, 0.0, lim).stop);
}

TEST(TuneRace, TiesGoToTheSmallerEnumerator) {
  race_limits lim;
  std::vector<contestant> c = {runner(backend::alltoallw, {1.0, 1.0, 1.0}),
                               runner(backend::mpi_persistent, {1.0, 1.0, 1.0})};
  EXPECT_EQ(judge_race(c, 3, 0.0, lim).leader, 1);
  std::reverse(c.begin(), c.end());
  EXPECT_EQ(judge_race(c, 3, 0.0, lim).leader, 0);
}

TEST(TuneRecheck, SwitchesOnlyBeyondTheMargin) {
  double m[2];
  double w[] = {10.0, 11.0, 10.0, 30.0}, r[] = {9.0, 9.0, 40.0, 9.0};
  EXPECT_TRUE(recheck_switch(w, 4, r, 4, 0.05, m)); // 9 vs 10.5: 14 % faster
  EXPECT_DOUBLE_EQ(m[0], 10.5);
  EXPECT_DOUBLE_EQ(m[1], 9.0);
  double w2[] = {10.0, 10.0, 10.0}, r2[] = {9.7, 9.7, 9.7};
  EXPECT_FALSE(recheck_switch(w2, 3, r2, 3, 0.05, m)); // 3 % is within the margin
  EXPECT_TRUE(recheck_switch(w2, 3, r2, 3, 0.01, m));
  double r3[] = {12.0, 12.0, 12.0};
  EXPECT_FALSE(recheck_switch(w2, 3, r3, 3, 0.0, m));
  EXPECT_FALSE(recheck_switch(w2, 3, r3, 0, 0.0, m)); // nothing measured: keep the choice
}

TEST(TuneRecheck, RunnerUpAndSeparationOfACachedDecision) {
  std::vector<candidate_result> c = {
      {backend::mpi_pack, candidate_status::measured, 2e-6, 1.9e-6, 2.1e-6, 10},
      {backend::alltoallv, candidate_status::measured, 2.2e-6, 2.0e-6, 2.4e-6, 10},
      {backend::mpi_datatype, candidate_status::unavailable, 0.0, 0.0, 0.0, 0},
      {backend::alltoallw, candidate_status::measured, 9e-6, 8e-6, 9.5e-6, 5}};
  int const r = second_best(c, backend::mpi_pack);
  EXPECT_EQ(r, 1);
  EXPECT_FALSE(intervals_separated(c[0], c[1]));
  EXPECT_TRUE(intervals_separated(c[0], c[3]));
  EXPECT_EQ(second_best({c[0]}, backend::mpi_pack), -1);
  // Version-1 entries carry no interval: nothing says they overlap.
  candidate_result old = c[1];
  old.rounds = 0;
  EXPECT_TRUE(intervals_separated(c[0], old));
  EXPECT_EQ(format_interval(c[0]), "2 us [1.9, 2.1] x10");
  EXPECT_EQ(format_interval(old), "2.2 us");
}

} // namespace
