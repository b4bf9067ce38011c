#pragma once
// When and how the CPU kernels share a loop among OpenMP threads.
//
// Why not `#pragma omp parallel if (cond)`: a region whose `if` is false (or whose team has one
// thread) still goes through libgomp's team start and end, which costs a futex system call,
// about 1 us, per call. A layer calls such loops a few times per step on small blocks, and on
// one thread per rank (the usual MPI set-up) none of them can use a team: those microseconds
// were fixed costs of every step. These helpers enter a region only when it can help.

#include "ops/kernels/geometry.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace halox::ops::detail {

/// Whether `work` elementary steps are worth a team: enough of them, more than one thread, and
/// a region opened here would be active (inside a caller's team, with nesting off, its team
/// would have one thread).
inline bool use_threads(index_t work) {
#ifdef _OPENMP
  return work >= parallel_min_work && omp_get_max_threads() > 1 &&
         omp_get_active_level() < omp_get_max_active_levels();
#else
  (void)work;
  return false;
#endif
}

/// f(i) for every i in [0, n): shared statically among the threads when `par`, else a plain
/// loop on the calling thread.
template <class F> void parallel_for(index_t n, bool par, F&& f) {
  if (par) {
#pragma omp parallel for schedule(static)
    for (index_t i = 0; i < n; ++i) f(i);
  } else {
    for (index_t i = 0; i < n; ++i) f(i);
  }
}

/// body() once on every thread of a team when `par`, else once on the calling thread; the
/// worksharing loops (`omp for`) inside it then run all their iterations there.
template <class F> void parallel_region(bool par, F&& body) {
  if (par) {
#pragma omp parallel
    body();
#ifdef _OPENMP
  } else if (omp_in_parallel()) {
    // Called by one thread of a caller's team: body's worksharing loops would bind to that team
    // (whose other threads never reach them: a deadlock at their barrier). A team of one keeps
    // them here, at the cost of the region.
#pragma omp parallel num_threads(1)
    body();
#endif
  } else {
    body();
  }
}

} // namespace halox::ops::detail
