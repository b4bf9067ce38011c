// One GoogleTest main for every MPI test executable.
//
// Rank 0 prints the usual report. Other ranks print only their failures, each line prefixed
// with "[rank r]", so a failure seen by one rank is never lost. The results are combined with a
// single MPI_Allreduce(MAX) after RUN_ALL_TESTS, so every rank returns the same exit code; no
// collective runs inside a listener callback (a rank that failed early would leave the others
// waiting in it).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace {

class rank_failure_printer : public testing::EmptyTestEventListener {
public:
  explicit rank_failure_printer(int rank) : rank_(rank) {}
  void OnTestPartResult(testing::TestPartResult const& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n[rank %d] %s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), rank_, r.summary());
  }
  void OnTestEnd(testing::TestInfo const& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

private:
  int rank_;
};

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new rank_failure_printer(rank));

  int local = RUN_ALL_TESTS();
  int global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && global != local)
    std::fprintf(stderr, "[rank 0] another rank reported a failure (see its [rank r] lines)\n");
  MPI_Finalize();
  return global;
}
