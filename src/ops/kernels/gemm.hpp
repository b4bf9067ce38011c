#pragma once
// Internal matrix product of the convolution kernels: OpenBLAS where built, plain loops otherwise.

#include "common/strided_region.hpp"

namespace halox::ops::detail {

/// `C = A * op(B)`, row-major, single-threaded: A is m x k (row stride `lda`), op(B) is k x n,
/// stored as B (k x n, row stride `ldb`) or, when `trans_b`, as B^T (n x k, row stride `ldb`);
/// C is m x n (row stride `ldc`).
///
/// An element of C is the same for every call of the same (m, n, k, trans_b), wherever its
/// column sits, but BLAS libraries pick kernels by matrix size, so a different n may round
/// differently. Callers that need results independent of how work is cut (a distributed
/// operator against its serial oracle) keep n fixed per problem and pad the last columns.
template <class T> void gemm(bool trans_b, index_t m, index_t n, index_t k, T const* a, index_t lda,
                             T const* b, index_t ldb, T* c, index_t ldc);

} // namespace halox::ops::detail
