#pragma once
// When and how the CPU kernels share a loop among OpenMP threads.
//
// Why not `#pragma omp parallel if (cond)`: a region whose `if` is false (or whose team has one
// thread) still goes through libgomp's team start and end, which costs a futex system call,
// about 1 us, per call. A layer calls such loops a few times per step on small blocks, and on
// one thread per rank (the usual MPI set-up) none of them can use a team: those microseconds
// were fixed costs of every step. These helpers enter a region only when it can help.

#include "ops/geometry.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace halox::ops::detail {

/// Whether `work` elementary steps are worth a team: enough of them, and more than one thread.
inline bool use_threads(index_t work) {
#ifdef _OPENMP
  return work >= parallel_min_work && omp_get_max_threads() > 1;
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
  } else {
    body();
  }
}

} // namespace halox::ops::detail
