#include "fc_kernels.hpp"

#include "simd_clones.hpp"

#include <algorithm>

namespace trainer {
using halox::index_t;

namespace {
constexpr index_t wide = 64, narrow = 16; // blocks of outputs (fc_forward), inputs (sums)
index_t padded_outputs(index_t O) { return (O + narrow - 1) / narrow * narrow; }
} // namespace

index_t fc_forward_scratch(index_t F, index_t O) { return F * padded_outputs(O); }

namespace {

// Sums `width` outputs from o0 on, for one row, in registers: one running sum per output, over f.
template <index_t width, class T>
TRAINER_CLONE_INLINE void output_block(index_t F, index_t Op, T const* xr, T const* wt, T const* b,
                                       index_t o0, index_t O, T* yr) {
  T acc[width];
  for (index_t k = 0; k < width; ++k) acc[k] = b && o0 + k < O ? b[o0 + k] : T(0);
  for (index_t f = 0; f < F; ++f) {
    T const v = xr[f];
    T const* wr = wt + f * Op + o0;
#pragma omp simd
    for (index_t k = 0; k < width; ++k) acc[k] += v * wr[k];
  }
  std::copy(acc, acc + std::min(width, O - o0), yr + o0);
}

} // namespace

template <class T> TRAINER_SIMD_CLONES void
fc_forward(index_t rows, index_t F, index_t O, T const* x, T const* w, T const* b, T* y, T* wt) {
  if (rows == 0) return;
  // W^T first, its rows padded with zeros to a multiple of `narrow`, so that a row of y is a
  // sum of rows of W^T scaled by the inputs: vector multiply-adds across the outputs, with no
  // horizontal sums, in blocks of fixed width that stay in registers (`wide` ones give the
  // multiply-adds of several vectors to overlap).
  index_t const Op = padded_outputs(O);
  for (index_t f = 0; f < F; ++f) {
    for (index_t o = 0; o < O; ++o) wt[f * Op + o] = w[o * F + f];
    for (index_t o = O; o < Op; ++o) wt[f * Op + o] = T(0);
  }
  for (index_t n = 0; n < rows; ++n) {
    index_t o0 = 0;
    for (; o0 + wide <= Op; o0 += wide)
      output_block<wide>(F, Op, x + n * F, wt, b, o0, O, y + n * O);
    for (; o0 < Op; o0 += narrow) output_block<narrow>(F, Op, x + n * F, wt, b, o0, O, y + n * O);
  }
}

namespace {

// gw[o, f0 + k] = sum over the rows of dy[n, o] x[n, f0 + k] for k < m (m == wide when `full`):
// the sums stay in registers while the rows stream past.
template <bool full, class T>
TRAINER_CLONE_INLINE void weight_block(index_t rows, index_t F, index_t O, T const* x, T const* dy,
                                       index_t o, index_t f0, index_t m, double* gw) {
  index_t const len = full ? wide : m;
  double acc[wide] = {};
  for (index_t n = 0; n < rows; ++n) {
    double const d = dy[n * O + o];
    T const* xr = x + n * F + f0;
#pragma omp simd
    for (index_t k = 0; k < len; ++k) acc[k] += d * xr[k];
  }
  std::copy(acc, acc + len, gw + o * F + f0);
}

} // namespace

template <class T> TRAINER_SIMD_CLONES void fc_weight_sums(index_t rows, index_t F, index_t O,
                                                           T const* x, T const* dy, double* gw,
                                                           double* gb) {
  // Output by output, in blocks of `wide` inputs.
  for (index_t o = 0; o < O; ++o) {
    index_t f0 = 0;
    for (; f0 + wide <= F; f0 += wide) weight_block<true>(rows, F, O, x, dy, o, f0, wide, gw);
    if (f0 < F) weight_block<false>(rows, F, O, x, dy, o, f0, F - f0, gw);
    if (gb) {
      double sb = 0;
      for (index_t n = 0; n < rows; ++n) sb += dy[n * O + o];
      gb[o] = sb;
    }
  }
}

template <class T> TRAINER_SIMD_CLONES void fc_backward_data(index_t rows, index_t F, index_t O,
                                                             T const* dy, T const* w, T* dx) {
  for (index_t n = 0; n < rows; ++n) {
    T* dr = dx + n * F;
    std::fill(dr, dr + F, T(0));
    for (index_t o = 0; o < O; ++o) {
      T const d = dy[n * O + o];
      T const* wr = w + o * F;
#pragma omp simd
      for (index_t f = 0; f < F; ++f) dr[f] += d * wr[f];
    }
  }
}

template void fc_forward(index_t, index_t, index_t, float const*, float const*, float const*,
                         float*, float*);
template void fc_forward(index_t, index_t, index_t, double const*, double const*, double const*,
                         double*, double*);
template void fc_weight_sums(index_t, index_t, index_t, float const*, float const*, double*,
                             double*);
template void fc_weight_sums(index_t, index_t, index_t, double const*, double const*, double*,
                             double*);
template void fc_backward_data(index_t, index_t, index_t, float const*, float const*, float*);
template void fc_backward_data(index_t, index_t, index_t, double const*, double const*, double*);

} // namespace trainer
