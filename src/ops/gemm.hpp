#pragma once
// Internal cache-blocked matrix product used by the convolution kernels.

#include <halox/detail/box.hpp>

namespace halox::ops::detail {

/// `C = A * B` (or `C += A * B` when `accumulate`), single-threaded.
///
/// A is m x k, B is k x n, C is m x n; each is given by its base pointer, row stride and column
/// stride in elements, so transposed operands need no copy (packing absorbs the layout). The
/// callers parallelise over independent products, which keeps this routine free of OpenMP.
template <class T> void gemm(index_t m, index_t n, index_t k, T const* a, index_t rsa, index_t csa,
                             T const* b, index_t rsb, index_t csb, T* c, index_t rsc, index_t csc,
                             bool accumulate);

} // namespace halox::ops::detail
