#include "ops/kernels/gemm.hpp"

#if HALOX_OPS_OPENBLAS
#include <cblas.h>

#include <mutex>
#endif

namespace halox::ops::detail {

#if HALOX_OPS_OPENBLAS

namespace {

// The kernels parallelise over independent products with OpenMP; OpenBLAS's own threads would
// oversubscribe the cores inside those regions, and OpenBLAS splits a large product between
// threads by size, which would make results depend on the thread count.
void single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

inline void blas_gemm(bool tb, int m, int n, int k, float const* a, int lda, float const* b,
                      int ldb, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b,
              ldb, 0.0f, c, ldc);
}
inline void blas_gemm(bool tb, int m, int n, int k, double const* a, int lda, double const* b,
                      int ldb, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0, a, lda, b,
              ldb, 0.0, c, ldc);
}

} // namespace

template <class T> void gemm(bool trans_b, index_t m, index_t n, index_t k, T const* a, index_t lda,
                             T const* b, index_t ldb, T* c, index_t ldc) {
  if (m <= 0 || n <= 0) return;
  single_threaded_blas();
  blas_gemm(trans_b, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), a,
            static_cast<int>(lda), b, static_cast<int>(ldb), c, static_cast<int>(ldc));
}

#else

// Each element is a sum over k in order, so it never depends on the matrix sizes.
template <class T> void gemm(bool trans_b, index_t m, index_t n, index_t k, T const* a, index_t lda,
                             T const* b, index_t ldb, T* c, index_t ldc) {
  index_t const bk = trans_b ? 1 : ldb, bj = trans_b ? ldb : 1;
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      T sum = T(0);
      for (index_t p = 0; p < k; ++p) sum += a[i * lda + p] * b[p * bk + j * bj];
      c[i * ldc + j] = sum;
    }
}

#endif

template void gemm(bool, index_t, index_t, index_t, float const*, index_t, float const*, index_t,
                   float*, index_t);
template void gemm(bool, index_t, index_t, index_t, double const*, index_t, double const*, index_t,
                   double*, index_t);

} // namespace halox::ops::detail
