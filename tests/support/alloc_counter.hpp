#pragma once
// The process-wide count of C++ allocations, kept by the replacement operator new of
// tests/mpi/test_context.cpp (one per test executable), so a test can prove that a step
// allocates nothing. MPI's own mallocs are C and not counted.

namespace halox::test {

/// C++ allocations of this process so far.
long allocations_so_far();

/// C++ allocations of this process while `run` runs.
template <class F> long allocations_during(F&& run) {
  long const before = allocations_so_far();
  run();
  return allocations_so_far() - before;
}

} // namespace halox::test
