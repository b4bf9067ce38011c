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

} // namespace
