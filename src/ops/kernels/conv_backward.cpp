#include "ops/kernels/conv_common.hpp"
#include "ops/kernels/elementwise.hpp"
#include "ops/kernels/gathered_gemm.hpp"
#include "ops/kernels/gemm.hpp"
#include "ops/kernels/parallel.hpp"
#include "ops/kernels/simd_clones.hpp"

#include <halox/error.hpp>
#include <halox/ops/conv.hpp>

#include <algorithm>
#include <string>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace halox::ops {
namespace detail {
namespace {

constexpr auto bad = errc::invalid_argument;

// dx[n, :, ib] = W^T-gather: each input position collects dy at the outputs that read it. Done
// as a gather (not a col2im scatter) so any sub-box of dx is computed independently.
template <class T> void backward_data_kernel(conv_problem const& cp, block3<T const> const& dy,
                                             std::vector<T> const& wt, block3<T> const& dx,
                                             box3 const& ib) {
  gathered_gemm(dy, cp.cout, cp.w.kvol(), wt, cp.cin, static_cast<T const*>(nullptr), false, dx, ib,
                cp.w.in[0] * cp.w.in[1] * cp.w.in[2],
                [&](index_t q0, index_t pc, std::vector<index_t>& off) {
                  backward_table(cp.w, dy, ib, q0, pc, off);
                });
}

// dW += dy(ob) * im2col(x)^T, with per-thread double accumulators summed in thread order so
// the result does not depend on scheduling (for a fixed thread count).
template <class T> void backward_weights_kernel(conv_problem const& cp, block3<T const> const& x,
                                                block3<T const> const& dy, box3 const& ob,
                                                std::vector<double>& total) {
  index_t const npos = ob.volume(), kvol = cp.w.kvol(), kdim = cp.cin * kvol;
  std::size_t const wsize = static_cast<std::size_t>(cp.cout * kdim);
  total.assign(wsize, 0.0);
  if (npos == 0 || x.n == 0 || wsize == 0) return;
  index_t const width = gemm_columns(cp.w.out[0] * cp.w.out[1] * cp.w.out[2]);
  index_t const nchunks = (npos + width - 1) / width, items = x.n * nchunks;
  bool const par = items > 1 && use_threads(x.n * npos * kdim * cp.cout);
  int nthreads = 1; // at most; the team may be smaller (dynamic adjustment)
#ifdef _OPENMP
  if (par) nthreads = omp_get_max_threads();
#endif
  int team = 1; // the threads that ran: only their partials are this call's
  // Kept between calls (on the calling thread), as are the per-thread buffers below.
  // A thread_local names each thread's own copy inside the parallel region: share the caller's
  // through a reference.
  thread_local std::vector<std::vector<double>> callers_partial;
  std::vector<std::vector<double>>& partial = callers_partial;
  partial.resize(static_cast<std::size_t>(nthreads));
  parallel_region(par, [&] {
    int tid = 0;
#ifdef _OPENMP
    tid = omp_get_thread_num();
    if (tid == 0) team = omp_get_num_threads();
#endif
    std::vector<double>& acc = partial[static_cast<std::size_t>(tid)];
    acc.assign(wsize, 0.0);
    thread_local std::vector<index_t> off, yoff;
    thread_local std::vector<T> col, dyc, out;
    out.resize(wsize);
#pragma omp for schedule(static)
    for (index_t it = 0; it < items; ++it) {
      index_t const n = it / nchunks, q0 = (it % nchunks) * width;
      index_t const pc = std::min(width, npos - q0);
      forward_table(cp.w, x, ob, q0, pc, off);
      col.resize(static_cast<std::size_t>(kdim * width));
      gather_columns(x.data + n * x.sn, x.sc, cp.cin, off, kvol, pc, width, col.data());
      position_offsets(dy, ob, q0, pc, yoff);
      dyc.resize(static_cast<std::size_t>(cp.cout * width));
      for (index_t co = 0; co < cp.cout; ++co) {
        T const* src = dy.data + n * dy.sn + co * dy.sc;
        T* dst = dyc.data() + co * width;
        for (index_t p = 0; p < pc; ++p) dst[p] = src[yoff[p]];
        for (index_t p = pc; p < width; ++p) dst[p] = T(0);
      }
      // out[co][(ci, k)] = sum_p dyc[co][p] * col[(ci, k)][p]
      gemm<T>(true, cp.cout, kdim, width, dyc.data(), width, col.data(), width, out.data(), kdim);
      for (std::size_t i = 0; i < wsize; ++i) acc[i] += static_cast<double>(out[i]);
    }
  });
  for (int t = 0; t < team; ++t) {
    std::vector<double> const& acc = partial[static_cast<std::size_t>(t)];
    for (std::size_t i = 0; i < acc.size(); ++i) total[i] += acc[i];
  }
}

// dw[co, ci, k] += acc[co][(ci, k)]
template <class T>
void add_to_weights(std::vector<double> const& acc, window3 const& g, tensor_ref<T> const& dw) {
  index_t const cout = dw.shape[0], cin = dw.shape[1], kvol = g.kvol();
  index_t ks[s3] = {0, 0, 0};
  for (int i = 0; i < g.nsp; ++i) ks[s3 - g.nsp + i] = dw.strides[2 + i];
  for (index_t co = 0; co < cout; ++co)
    for (index_t ci = 0; ci < cin; ++ci) {
      T* base = dw.data + co * dw.strides[0] + ci * dw.strides[1];
      double const* a = acc.data() + (co * cin + ci) * kvol;
      index_t k = 0;
      for (index_t k0 = 0; k0 < g.k[0]; ++k0)
        for (index_t k1 = 0; k1 < g.k[1]; ++k1)
          for (index_t k2 = 0; k2 < g.k[2]; ++k2, ++k)
            base[k0 * ks[0] + k1 * ks[1] + k2 * ks[2]] += static_cast<T>(a[k]);
    }
}

template <class T> void backward_data_impl(char const* op, const_block_ref<T> const& dy,
                                           dims const& in_extent, const_tensor_ref<T> const& w,
                                           block_ref<T> const& dx, box const& in_box,
                                           conv_params const& p) {
  auto const c = check_conv_backward_data(op, dy, in_extent, w, dx, in_box, p);
  backward_data_kernel(c.cp, c.dy, pack_weights(w, c.cp.w, true), c.dx, c.in);
}

template <class T> void backward_weights_impl(char const* op, const_block_ref<T> const& x,
                                              dims const& in_extent, const_block_ref<T> const& dy,
                                              tensor_ref<T> const& dw, box const& out_box,
                                              conv_params const& p) {
  auto const c = check_conv_backward_weights(op, x, in_extent, dy, dw, out_box, p);
  thread_local std::vector<double> acc; // reused: steady-state steps allocate nothing
  backward_weights_kernel(c.cp, c.x, c.dy, c.out, acc);
  add_to_weights(acc, c.cp.w, dw);
}

// Channel c's sum of dy over `ob` in double. The box's rows, or whole planes when its rows lie
// back to back (a dy without halos), are contiguous runs when the last stride is 1 (`unit`);
// each run is summed in `bias_lanes` independent double accumulators, which the compiler
// vectorises: several vectors of them, as one vector add waits for the one before it. Runs
// shorter than that (the 7-wide maps of a small network, cut further by a spatial split) are
// summed column by column instead (`by_column`): one accumulator per column, the same vector
// adds. Only additions, in an order fixed by the code, so every clone gives the same bits.
constexpr index_t bias_lanes = 32;
template <class T> HALOX_SIMD_CLONES double channel_sum(block3<T const> const& b, box3 const& ob,
                                                        index_t c, index_t rows, index_t run,
                                                        bool unit, bool by_column) {
  double acc[bias_lanes] = {}; // one per lane, or one per column
  for (index_t n = 0; n < b.n; ++n)
    for (index_t i0 = ob.lo[0]; i0 < ob.hi[0]; ++i0)
      for (index_t r = 0; r < rows; ++r) {
        T const* row = b.data + b.offset(n, c, i0, ob.lo[1] + r, ob.lo[2]);
        if (!unit) {
          for (index_t i2 = 0; i2 < run; ++i2) acc[0] += static_cast<double>(row[i2 * b.str[2]]);
          continue;
        }
        if (by_column) {
          for (index_t i = 0; i < run; ++i) acc[i] += static_cast<double>(row[i]);
          continue;
        }
        index_t i = 0;
        for (; i + bias_lanes <= run; i += bias_lanes)
          for (index_t l = 0; l < bias_lanes; ++l) acc[l] += static_cast<double>(row[i + l]);
        for (index_t l = 0; l < run - i; ++l) acc[l] += static_cast<double>(row[i + l]);
      }
  double s = 0;
  for (double a : acc) s += a;
  return s;
}

template <class T>
void backward_bias_impl(char const* op, const_block_ref<T> const& dy, box const& out_box, T* db) {
  int const nsp = spatial_dims(op, "dy", dy.ref.rank());
  block3<T const> b = to_block3(op, "dy", dy, nsp);
  box3 ob = to_box3(op, "out_box", out_box, nsp);
  require_covers(op, "dy", b, ob, nsp, "out_box");
  HALOX_REQUIRE(db != nullptr || b.c == 0, bad, std::string(op) + ": db is null");
  bool const unit = b.str[2] == 1;
  bool const planes = unit && b.str[1] == ob.extent(2);
  index_t const run = planes ? ob.extent(1) * ob.extent(2) : ob.extent(2);
  index_t const rows = planes ? 1 : ob.extent(1);
  bool const by_column = unit && run < bias_lanes;
  // The sums are in a function of their own: the clones (simd_clones.hpp) would not reach the
  // body of an OpenMP region, which the compiler outlines.
  parallel_for(b.c, use_threads(b.n * b.c * ob.volume()), [&](index_t c) {
    db[c] += static_cast<T>(channel_sum(b, ob, c, rows, run, unit, by_column));
  });
}

} // namespace
} // namespace detail

template <class T> void conv_backward_data_box(const_block_ref<T> dy, dims const& in_extent,
                                               const_tensor_ref<T> w, block_ref<T> dx,
                                               box const& in_box, conv_params const& p) {
  detail::backward_data_impl("conv_backward_data_box", dy, in_extent, w, dx, in_box, p);
}

template <class T> void conv_backward_data(const_tensor_ref<T> dy, const_tensor_ref<T> w,
                                           tensor_ref<T> dx, conv_params const& p) {
  char const* op = "conv_backward_data";
  detail::check_ref(op, "dx", dx);
  detail::check_ref(op, "dy", dy);
  auto expected = detail::conv_shape(op, dx.shape, w.shape, p);
  detail::require_shape(op, "dy", dy.shape, expected,
                        "(the forward output for dx " + detail::fmt(dx.shape) + " and w " +
                            detail::fmt(w.shape) + ")");
  detail::backward_data_impl(op, const_block_ref<T>(dy), detail::spatial_extent(dx.shape), w,
                             block_ref<T>(dx), detail::spatial_box(dx.shape), p);
}

template <class T> void conv_backward_weights_box(const_block_ref<T> x, dims const& in_extent,
                                                  const_block_ref<T> dy, tensor_ref<T> dw,
                                                  box const& out_box, conv_params const& p) {
  detail::backward_weights_impl("conv_backward_weights_box", x, in_extent, dy, dw, out_box, p);
}

template <class T> void conv_backward_weights(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                              tensor_ref<T> dw, conv_params const& p) {
  char const* op = "conv_backward_weights";
  detail::check_ref(op, "dw", dw);
  detail::check_ref(op, "dy", dy);
  auto expected = detail::conv_shape(op, x.shape, dw.shape, p);
  detail::require_shape(op, "dy", dy.shape, expected,
                        "(the forward output for x " + detail::fmt(x.shape) + " and dw " +
                            detail::fmt(dw.shape) + ")");
  detail::for_each_element(dw.shape, dw.strides, dw.strides, dw.strides,
                           [&](index_t o, index_t, index_t) { dw.data[o] = T(0); });
  detail::backward_weights_impl(op, const_block_ref<T>(x), detail::spatial_extent(x.shape),
                                const_block_ref<T>(dy), dw, detail::spatial_box(dy.shape), p);
}

template <class T> void conv_backward_bias_box(const_block_ref<T> dy, box const& out_box, T* db) {
  detail::backward_bias_impl("conv_backward_bias_box", dy, out_box, db);
}

template <class T> void conv_backward_bias(const_tensor_ref<T> dy, T* db) {
  char const* op = "conv_backward_bias";
  detail::check_ref(op, "dy", dy);
  detail::spatial_dims(op, "dy", dy.rank());
  for (index_t c = 0; db && c < dy.shape[1]; ++c) db[c] = T(0);
  detail::backward_bias_impl(op, const_block_ref<T>(dy), detail::spatial_box(dy.shape), db);
}

#define HALOX_INSTANTIATE(T)                                                                       \
  template void conv_backward_data_box(const_block_ref<T>, dims const&, const_tensor_ref<T>,       \
                                       block_ref<T>, box const&, conv_params const&);              \
  template void conv_backward_data(const_tensor_ref<T>, const_tensor_ref<T>, tensor_ref<T>,        \
                                   conv_params const&);                                            \
  template void conv_backward_weights_box(const_block_ref<T>, dims const&, const_block_ref<T>,     \
                                          tensor_ref<T>, box const&, conv_params const&);          \
  template void conv_backward_weights(const_tensor_ref<T>, const_tensor_ref<T>, tensor_ref<T>,     \
                                      conv_params const&);                                         \
  template void conv_backward_bias_box(const_block_ref<T>, box const&, T*);                        \
  template void conv_backward_bias(const_tensor_ref<T>, T*);
HALOX_INSTANTIATE(float)
HALOX_INSTANTIATE(double)
#undef HALOX_INSTANTIATE

} // namespace halox::ops
