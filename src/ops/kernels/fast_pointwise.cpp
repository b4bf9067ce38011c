// Vectorised host kernels for ReLU and batch norm (see fast_pointwise.hpp). Each pass walks
// the tensor as contiguous runs (`for_each_run`: a whole plane when the layout is dense, one row
// when halos interrupt it) and runs a SIMD loop over each run. The loops are written so that
// `#pragma omp simd` (honoured with -fopenmp or -fopenmp-simd) vectorises them, reductions
// included, without changing the per-element arithmetic.
#include "ops/kernels/fast_pointwise.hpp"

#include "ops/kernels/bn_affine.hpp"
#include "ops/kernels/elementwise.hpp"
#include "ops/kernels/parallel.hpp"
#include "ops/kernels/per_channel.hpp"

#include <string>

namespace halox::ops::detail {
namespace {

template <class T> void relu_run(T const* x, T* y, index_t n) {
#pragma omp simd
  for (index_t i = 0; i < n; ++i) {
    T const v = x[i];
    y[i] = v < T(0) ? T(0) : v;
  }
}

template <class T> void relu_backward_run(T const* x, T const* dy, T* dx, index_t n) {
#pragma omp simd
  for (index_t i = 0; i < n; ++i) {
    // Both loads unconditional: a select of loaded values vectorises, a conditional load not.
    T const v = x[i], g = dy[i];
    dx[i] = v <= T(0) ? T(0) : g;
  }
}

template <class T> double sum_run(T const* x, index_t n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (index_t i = 0; i < n; ++i) s += static_cast<double>(x[i]);
  return s;
}

template <class T> double squared_deviation_run(T const* x, index_t n, double mean) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (index_t i = 0; i < n; ++i) {
    double const d = static_cast<double>(x[i]) - mean;
    s += d * d;
  }
  return s;
}

template <class T>
void affine_run(T const* x, T* y, index_t n, double scale, double shift, bool relu) {
  if (relu) {
#pragma omp simd
    for (index_t i = 0; i < n; ++i) {
      T const v = static_cast<T>(static_cast<double>(x[i]) * scale + shift);
      y[i] = v < T(0) ? T(0) : v;
    }
  } else {
#pragma omp simd
    for (index_t i = 0; i < n; ++i)
      y[i] = static_cast<T>(static_cast<double>(x[i]) * scale + shift);
  }
}

template <class T>
void grad_sums_run(T const* x, T const* dy, index_t n, double mean, double& sd, double& sdx) {
  double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
  for (index_t i = 0; i < n; ++i) {
    double const g = static_cast<double>(dy[i]);
    a += g;
    b += g * (static_cast<double>(x[i]) - mean);
  }
  sd += a;
  sdx += b;
}

struct dx_coefficients {
  double k, mdy, mdyx, mean, invstd;
};

template <class T>
void dx_run(T const* x, T const* dy, T* dx, index_t n, dx_coefficients const& q) {
#pragma omp simd
  for (index_t i = 0; i < n; ++i) {
    double const xhat = (static_cast<double>(x[i]) - q.mean) * q.invstd;
    double const g = static_cast<double>(dy[i]);
    dx[i] = static_cast<T>(q.k * (g - q.mdy - xhat * q.mdyx));
  }
}

// Threads across channels only for large tensors, as the reference kernels decide.
bool parallel(per_channel const& g) { return use_threads(g.n * g.inner * g.c); }

// True when a plane of `shape` with `strides` is one contiguous run (row-major, no gaps).
bool one_run(dims const& shape, dims const& strides) {
  index_t expected = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

// for_each_run over one plane, or a single call when every layout holds the plane as one run
// (precomputed in `whole`): the common case, where walking the dimensions again for every plane
// costs as much as the short runs of a small spatial block. Used by the element-wise passes; the
// reductions keep for_each_run, whose out-of-line runs GCC vectorises better there.
template <class F>
void plane_runs(per_channel const& g, dims const& sb, dims const& sc, bool whole, F&& f) {
  if (whole)
    f(index_t{0}, index_t{0}, index_t{0}, g.inner);
  else
    for_each_run(g.rest, g.rest_strides, sb, sc, f);
}

// Calls f(n, c) for every (sample, channel) plane. With threads, each takes whole channels. On
// one thread the planes go in memory order (samples outer in NCHW), so a pass streams through
// the block: visiting one channel's planes in turn instead jumps a whole sample between runs,
// which the hardware prefetcher does not follow, and on a spatially split block (short planes)
// that costs a quarter of the time. Each channel sees its planes in increasing n either way, so
// its sums are added in the same order whichever way runs.
template <class F> void for_each_plane(per_channel const& g, F&& f) {
  bool const par = parallel(g);
  if (par || g.sn < g.sc) {
    parallel_for(g.c, par, [&](index_t c) {
      for (index_t n = 0; n < g.n; ++n) f(n, c);
    });
  } else {
    for (index_t n = 0; n < g.n; ++n)
      for (index_t c = 0; c < g.c; ++c) f(n, c);
  }
}

} // namespace

template <class T> void fast_relu_forward(const_tensor_ref<T> x, tensor_ref<T> y) {
  char const* op = "relu_forward";
  check_ref(op, "x", x);
  check_ref(op, "y", y);
  require_same(op, "y", y.shape, "x", x.shape);
  for_each_run(
      x.shape, x.strides, y.strides, y.strides,
      [&](index_t ox, index_t oy, index_t, index_t n) { relu_run(x.data + ox, y.data + oy, n); });
}

template <class T>
void fast_relu_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy, tensor_ref<T> dx) {
  char const* op = "relu_backward";
  check_ref(op, "x", x);
  check_ref(op, "dy", dy);
  check_ref(op, "dx", dx);
  require_same(op, "dy", dy.shape, "x", x.shape);
  require_same(op, "dx", dx.shape, "x", x.shape);
  for_each_run(x.shape, x.strides, dy.strides, dx.strides,
               [&](index_t ox, index_t od, index_t oo, index_t n) {
                 relu_backward_run(x.data + ox, dy.data + od, dx.data + oo, n);
               });
}

template <class T> void fast_bn_partial_stats(const_tensor_ref<T> x, bn_stats& s) {
  auto const g = split("bn_partial_stats", "x", x);
  s.count = g.n * g.inner;
  s.mean.assign(static_cast<std::size_t>(g.c), 0.0);
  s.m2.assign(static_cast<std::size_t>(g.c), 0.0);
  if (s.count == 0) return;
  double const count = static_cast<double>(s.count);
  // Two passes over each channel, as the reference: the mean of the block, then the squared
  // deviations from it. Sums of float values in double are nearly exact, so the moments hardly
  // depend on how the tensor is split (the deterministic trainer relies on this). s.mean holds
  // the channel sums until the first pass is complete.
  double* const mean = s.mean.data();
  double* const m2 = s.m2.data();
  for_each_plane(g, [&](index_t n, index_t c) {
    T const* base = x.data + n * g.sn + c * g.sc;
    for_each_run(
        g.rest, g.rest_strides, g.rest_strides, g.rest_strides,
        [&](index_t o, index_t, index_t, index_t len) { mean[c] += sum_run(base + o, len); });
  });
  for (index_t c = 0; c < g.c; ++c) mean[c] /= count;
  for_each_plane(g, [&](index_t n, index_t c) {
    T const* base = x.data + n * g.sn + c * g.sc;
    for_each_run(g.rest, g.rest_strides, g.rest_strides, g.rest_strides,
                 [&](index_t o, index_t, index_t, index_t len) {
                   m2[c] += squared_deviation_run(base + o, len, mean[c]);
                 });
  });
}

template <class T> void fast_bn_apply(const_tensor_ref<T> x, bn_moments const& m, T const* gamma,
                                      T const* beta, tensor_ref<T> y, bool relu) {
  char const* op = "bn_apply";
  auto const gx = split(op, "x", x);
  auto const gy = split(op, "y", y);
  require_same(op, "y", y.shape, "x", x.shape);
  require_moments(op, m, gx.c);
  bool const whole = one_run(gx.rest, gx.rest_strides) && one_run(gy.rest, gy.rest_strides);
  for_each_plane(gx, [&](index_t n, index_t c) {
    double const scale = m.invstd[c] * (gamma ? static_cast<double>(gamma[c]) : 1.0);
    double const shift = (beta ? static_cast<double>(beta[c]) : 0.0) - m.mean[c] * scale;
    T const* xb = x.data + n * gx.sn + c * gx.sc;
    T* yb = y.data + n * gy.sn + c * gy.sc;
    plane_runs(gx, gy.rest_strides, gy.rest_strides, whole,
               [&](index_t ox, index_t oy, index_t, index_t len) {
                 affine_run(xb + ox, yb + oy, len, scale, shift, relu);
               });
  });
}

template <class T> void fast_bn_backward_partial(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                                 bn_moments const& m, bn_grad_sums& s) {
  char const* op = "bn_backward_partial";
  auto const gx = split(op, "x", x);
  auto const gd = split(op, "dy", dy);
  require_same(op, "dy", dy.shape, "x", x.shape);
  require_moments(op, m, gx.c);
  s.count = gx.n * gx.inner;
  s.sum_dy.assign(static_cast<std::size_t>(gx.c), 0.0);
  s.sum_dy_xhat.assign(static_cast<std::size_t>(gx.c), 0.0);
  double* const sd = s.sum_dy.data();
  double* const sdx = s.sum_dy_xhat.data(); // sum of dy * (x - mean) until scaled below
  for_each_plane(gx, [&](index_t n, index_t c) {
    T const* xb = x.data + n * gx.sn + c * gx.sc;
    T const* db = dy.data + n * gd.sn + c * gd.sc;
    for_each_run(gx.rest, gx.rest_strides, gd.rest_strides, gd.rest_strides,
                 [&](index_t ox, index_t od, index_t, index_t len) {
                   grad_sums_run(xb + ox, db + od, len, m.mean[c], sd[c], sdx[c]);
                 });
  });
  for (index_t c = 0; c < gx.c; ++c) sdx[c] *= m.invstd[c];
}

template <class T> void fast_bn_backward_apply(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                               bn_moments const& m, T const* gamma,
                                               bn_grad_sums const& total, bool training,
                                               tensor_ref<T> dx) {
  char const* op = "bn_backward_apply";
  auto const gx = split(op, "x", x);
  auto const gd = split(op, "dy", dy);
  auto const go = split(op, "dx", dx);
  require_same(op, "dy", dy.shape, "x", x.shape);
  require_same(op, "dx", dx.shape, "x", x.shape);
  require_moments(op, m, gx.c);
  if (training) require_grad_sums(op, total, gx.c);
  bool const whole = one_run(gx.rest, gx.rest_strides) && one_run(gd.rest, gd.rest_strides) &&
                     one_run(go.rest, go.rest_strides);
  for_each_plane(gx, [&](index_t n, index_t c) {
    dx_coefficients q{m.invstd[c] * (gamma ? static_cast<double>(gamma[c]) : 1.0), 0, 0, m.mean[c],
                      m.invstd[c]};
    if (training) {
      double const count = static_cast<double>(total.count);
      q.mdy = total.sum_dy[c] / count;
      q.mdyx = total.sum_dy_xhat[c] / count;
    }
    T const* xb = x.data + n * gx.sn + c * gx.sc;
    T const* db = dy.data + n * gd.sn + c * gd.sc;
    T* ob = dx.data + n * go.sn + c * go.sc;
    plane_runs(gx, gd.rest_strides, go.rest_strides, whole,
               [&](index_t ox, index_t od, index_t oo, index_t len) {
                 dx_run(xb + ox, db + od, ob + oo, len, q);
               });
  });
}

#define HALOX_INSTANTIATE(T)                                                                       \
  template void fast_relu_forward(const_tensor_ref<T>, tensor_ref<T>);                             \
  template void fast_relu_backward(const_tensor_ref<T>, const_tensor_ref<T>, tensor_ref<T>);       \
  template void fast_bn_partial_stats(const_tensor_ref<T>, bn_stats&);                             \
  template void fast_bn_apply(const_tensor_ref<T>, bn_moments const&, T const*, T const*,          \
                              tensor_ref<T>, bool);                                                \
  template void fast_bn_backward_partial(const_tensor_ref<T>, const_tensor_ref<T>,                 \
                                         bn_moments const&, bn_grad_sums&);                        \
  template void fast_bn_backward_apply(const_tensor_ref<T>, const_tensor_ref<T>,                   \
                                       bn_moments const&, T const*, bn_grad_sums const&, bool,     \
                                       tensor_ref<T>);
HALOX_INSTANTIATE(float)
HALOX_INSTANTIATE(double)
#undef HALOX_INSTANTIATE

} // namespace halox::ops::detail
