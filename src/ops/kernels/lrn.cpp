// Reference LRN across channels: the oracle of the providers and of dist_lrn. Every value of s
// is recomputed from its window in increasing channel order, so a channel block computed with
// its neighbours' channels at hand gives the same bits as the whole tensor.
#include "ops/kernels/geometry.hpp"
#include "ops/kernels/scratch.hpp"

#include <halox/error.hpp>
#include <halox/ops/lrn.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace halox::ops {
using detail::require_same;

namespace {

constexpr auto bad = errc::invalid_argument;

// Calls f(row_offsets..., inner_extent) for every (n, outer spatial) row of `shape` (the channel
// dimension excluded): each tensor's element offset of channel 0, inner position 0 of that row.
// The inner loop of the kernels then runs over the last dimension.
template <std::size_t K, class F>
void for_each_row(dims const& shape, dims const* const (&strides)[K], F&& f) {
  int const r = static_cast<int>(shape.size());
  index_t const inner = r > 2 ? shape[r - 1] : 1;
  for (int d = 0; d < r; ++d)
    if (d != 1 && shape[d] == 0) return;
  // The outer dimensions: 0 and 2 .. r-2.
  int outer[max_dims] = {0};
  std::size_t n_outer = 1;
  for (int d = 2; d < r - 1; ++d) outer[n_outer++] = d;
  index_t idx[max_dims] = {};
  index_t off[K] = {};
  while (true) {
    f(off, inner);
    std::size_t i = n_outer;
    while (i-- > 0) {
      int const d = outer[i];
      if (++idx[i] < shape[d]) {
        for (std::size_t k = 0; k < K; ++k) off[k] += (*strides[k])[d];
        break;
      }
      for (std::size_t k = 0; k < K; ++k) off[k] -= (shape[d] - 1) * (*strides[k])[d];
      idx[i] = 0;
      if (i == 0) return;
    }
  }
}

std::string chans(index_t lo, index_t hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
}

template <class A, class B> void require_same_but_channels(char const* op, char const* a,
                                                           tensor_ref<A> const& ta, char const* b,
                                                           tensor_ref<B> const& tb) {
  bool ok = ta.rank() == tb.rank() && ta.rank() >= 2;
  for (int d = 0; ok && d < ta.rank(); ++d) ok = d == 1 || ta.shape[d] == tb.shape[d];
  HALOX_REQUIRE(ok, bad,
                std::string(op) + ": " + a + " has shape " + detail::fmt(ta.shape) + " but " + b +
                    " has shape " + detail::fmt(tb.shape) +
                    "; they must be [N, C, ...] of the same rank (>= 2) and agree on every "
                    "dimension but the channels");
}

// Throws unless the channels [have_lo, have_hi) of `name` contain [need_lo, need_hi).
void require_channels(char const* op, char const* name, index_t have_lo, index_t have_hi,
                      index_t need_lo, index_t need_hi, char const* why) {
  if (need_hi <= need_lo) return;
  HALOX_REQUIRE(have_lo <= need_lo && need_hi <= have_hi, bad,
                std::string(op) + ": " + name + " holds channels " + chans(have_lo, have_hi) +
                    " but " + why + " needs " + chans(need_lo, need_hi) +
                    "; give it those channels (a channel halo of size/2 below and (size-1)/2 "
                    "above)");
}

void require_range(char const* op, char const* name, index_t c0, index_t c1, index_t channels) {
  HALOX_REQUIRE(channels >= 0 && c0 >= 0 && c1 <= channels, bad,
                std::string(op) + ": " + name + " holds channels " + chans(c0, c1) +
                    " outside the tensor's " + chans(0, channels) +
                    "; pass the block's first global channel and the global channel count");
}

// The window of channel c, clipped: [lo, hi).
struct window {
  index_t lo, hi;
};
inline window fwd_window(index_t c, index_t channels, lrn_params const& p) {
  return {std::max<index_t>(0, c - lrn_reach_lo(p)),
          std::min<index_t>(channels, c + lrn_reach_hi(p) + 1)};
}
// The channels whose window contains c, clipped.
inline window rev_window(index_t c, index_t channels, lrn_params const& p) {
  return {std::max<index_t>(0, c - lrn_reach_hi(p)),
          std::min<index_t>(channels, c + lrn_reach_lo(p) + 1)};
}

// s = k + alpha / size * (sum of squares of x over the window of channel c) for the `n` values
// of one row, into acc. `xr` points at channel x_c0 of the row.
template <class T> void scale_row(T const* xr, index_t xsc, index_t xi, index_t x_c0, index_t c,
                                  index_t channels, index_t n, lrn_params const& p, double* acc) {
  window const w = fwd_window(c, channels, p);
  std::fill(acc, acc + n, 0.0);
  for (index_t cc = w.lo; cc < w.hi; ++cc) {
    T const* xp = xr + (cc - x_c0) * xsc;
    for (index_t i = 0; i < n; ++i) {
      double const v = static_cast<double>(xp[i * xi]);
      acc[i] += v * v;
    }
  }
  double const a = p.alpha / p.size;
  for (index_t i = 0; i < n; ++i) acc[i] = p.k + a * acc[i];
}

} // namespace

void check_lrn_params(lrn_params const& p, char const* what) {
  HALOX_REQUIRE(p.size >= 1, bad,
                std::string(what) + ": size = " + std::to_string(p.size) +
                    " channels per window; give size >= 1 (AlexNet uses 5)");
  HALOX_REQUIRE(std::isfinite(p.alpha) && p.alpha >= 0, bad,
                std::string(what) + ": alpha = " + std::to_string(p.alpha) +
                    "; give a finite alpha >= 0 (default 1e-4)");
  HALOX_REQUIRE(std::isfinite(p.beta), bad,
                std::string(what) + ": beta = " + std::to_string(p.beta) +
                    "; give a finite beta (default 0.75)");
  HALOX_REQUIRE(std::isfinite(p.k) && p.k > 0, bad,
                std::string(what) + ": k = " + std::to_string(p.k) +
                    "; give a finite k > 0 (default 1; AlexNet uses 2), so that the normalised "
                    "base k + alpha/size * sum(x^2) is never zero");
}

template <class T> void lrn_forward_channels(const_tensor_ref<T> x, index_t x_c0, index_t channels,
                                             tensor_ref<T> y, index_t y_c0, lrn_params const& p) {
  char const* op = "lrn_forward";
  check_lrn_params(p, op);
  detail::check_ref(op, "x", x);
  detail::check_ref(op, "y", y);
  require_same_but_channels(op, "y", y, "x", x);
  index_t const yc = y.shape[1], xc = x.shape[1];
  require_range(op, "x", x_c0, x_c0 + xc, channels);
  require_range(op, "y", y_c0, y_c0 + yc, channels);
  if (yc == 0) return;
  require_channels(op, "x", x_c0, x_c0 + xc, fwd_window(y_c0, channels, p).lo,
                   fwd_window(y_c0 + yc - 1, channels, p).hi, "the windows of y's channels");
  int const r = x.rank();
  index_t const xi = r > 2 ? x.strides[r - 1] : 0, yi = r > 2 ? y.strides[r - 1] : 0;
  double* const acc = detail::thread_scratch<double, struct lrn_acc>(
      static_cast<std::size_t>(r > 2 ? x.shape[r - 1] : 1));
  dims const* const st[2] = {&x.strides, &y.strides};
  for_each_row(x.shape, st, [&](index_t const* off, index_t n) {
    T const* xr = x.data + off[0];
    for (index_t c = y_c0; c < y_c0 + yc; ++c) {
      scale_row(xr, x.strides[1], xi, x_c0, c, channels, n, p, acc);
      T const* xp = xr + (c - x_c0) * x.strides[1];
      T* yp = y.data + off[1] + (c - y_c0) * y.strides[1];
      for (index_t i = 0; i < n; ++i)
        yp[i * yi] = static_cast<T>(static_cast<double>(xp[i * xi]) * std::pow(acc[i], -p.beta));
    }
  });
}

template <class T> void lrn_backward_terms(const_tensor_ref<T> x, index_t x_c0, index_t channels,
                                           const_tensor_ref<T> dy, tensor_ref<double> t,
                                           index_t t_c0, lrn_params const& p) {
  char const* op = "lrn_backward";
  check_lrn_params(p, op);
  detail::check_ref(op, "x", x);
  detail::check_ref(op, "dy", dy);
  detail::check_ref(op, "terms", t);
  require_same_but_channels(op, "dy", dy, "x", x);
  require_same(op, "terms", t, "dy", dy);
  index_t const tc = t.shape[1], xc = x.shape[1];
  require_range(op, "x", x_c0, x_c0 + xc, channels);
  require_range(op, "dy", t_c0, t_c0 + tc, channels);
  if (tc == 0) return;
  require_channels(op, "x", x_c0, x_c0 + xc, fwd_window(t_c0, channels, p).lo,
                   fwd_window(t_c0 + tc - 1, channels, p).hi, "the windows of dy's channels");
  int const r = x.rank();
  index_t const xi = r > 2 ? x.strides[r - 1] : 0, di = r > 2 ? dy.strides[r - 1] : 0,
                ti = r > 2 ? t.strides[r - 1] : 0;
  double* const acc = detail::thread_scratch<double, struct lrn_acc>(
      static_cast<std::size_t>(r > 2 ? x.shape[r - 1] : 1));
  dims const* const st[3] = {&x.strides, &dy.strides, &t.strides};
  for_each_row(x.shape, st, [&](index_t const* off, index_t n) {
    T const* xr = x.data + off[0];
    for (index_t c = t_c0; c < t_c0 + tc; ++c) {
      scale_row(xr, x.strides[1], xi, x_c0, c, channels, n, p, acc);
      T const* xp = xr + (c - x_c0) * x.strides[1];
      T const* dp = dy.data + off[1] + (c - t_c0) * dy.strides[1];
      double* tp = t.data + off[2] + (c - t_c0) * t.strides[1];
      for (index_t i = 0; i < n; ++i)
        tp[i * ti] = static_cast<double>(dp[i * di]) * static_cast<double>(xp[i * xi]) *
                     std::pow(acc[i], -p.beta - 1);
    }
  });
}

template <class T> void lrn_backward_apply(const_tensor_ref<T> x, index_t x_c0, index_t channels,
                                           const_tensor_ref<T> dy, const_tensor_ref<double> t,
                                           index_t t_c0, tensor_ref<T> dx, index_t dx_c0,
                                           lrn_params const& p) {
  char const* op = "lrn_backward";
  check_lrn_params(p, op);
  detail::check_ref(op, "x", x);
  detail::check_ref(op, "dy", dy);
  detail::check_ref(op, "terms", t);
  detail::check_ref(op, "dx", dx);
  require_same_but_channels(op, "dx", dx, "x", x);
  require_same_but_channels(op, "terms", t, "x", x);
  require_same(op, "dx", dx, "dy", dy);
  index_t const dc = dx.shape[1], xc = x.shape[1], tc = t.shape[1];
  require_range(op, "x", x_c0, x_c0 + xc, channels);
  require_range(op, "terms", t_c0, t_c0 + tc, channels);
  require_range(op, "dx", dx_c0, dx_c0 + dc, channels);
  if (dc == 0) return;
  require_channels(op, "x", x_c0, x_c0 + xc, fwd_window(dx_c0, channels, p).lo,
                   fwd_window(dx_c0 + dc - 1, channels, p).hi, "the windows of dx's channels");
  require_channels(op, "terms", t_c0, t_c0 + tc, rev_window(dx_c0, channels, p).lo,
                   rev_window(dx_c0 + dc - 1, channels, p).hi,
                   "the channels whose windows hold dx's channels");
  int const r = x.rank();
  index_t const xi = r > 2 ? x.strides[r - 1] : 0, di = r > 2 ? dy.strides[r - 1] : 0,
                ti = r > 2 ? t.strides[r - 1] : 0, oi = r > 2 ? dx.strides[r - 1] : 0;
  std::size_t const len = static_cast<std::size_t>(r > 2 ? x.shape[r - 1] : 1);
  double* const acc = detail::thread_scratch<double, struct lrn_acc>(len);
  double* const sum = detail::thread_scratch<double, struct lrn_sum>(len);
  double const coef = 2.0 * p.alpha * p.beta / p.size;
  dims const* const st[4] = {&x.strides, &dy.strides, &t.strides, &dx.strides};
  for_each_row(x.shape, st, [&](index_t const* off, index_t n) {
    T const* xr = x.data + off[0];
    for (index_t c = dx_c0; c < dx_c0 + dc; ++c) {
      scale_row(xr, x.strides[1], xi, x_c0, c, channels, n, p, acc);
      window const w = rev_window(c, channels, p);
      std::fill(sum, sum + n, 0.0);
      for (index_t j = w.lo; j < w.hi; ++j) {
        double const* tp = t.data + off[2] + (j - t_c0) * t.strides[1];
        for (index_t i = 0; i < n; ++i) sum[i] += tp[i * ti];
      }
      T const* xp = xr + (c - x_c0) * x.strides[1];
      T const* dp = dy.data + off[1] + (c - dx_c0) * dy.strides[1];
      T* op_ = dx.data + off[3] + (c - dx_c0) * dx.strides[1];
      for (index_t i = 0; i < n; ++i)
        op_[i * oi] = static_cast<T>(static_cast<double>(dp[i * di]) * std::pow(acc[i], -p.beta) -
                                     coef * static_cast<double>(xp[i * xi]) * sum[i]);
    }
  });
}

template <class T> void lrn_forward(const_tensor_ref<T> x, tensor_ref<T> y, lrn_params const& p) {
  char const* op = "lrn_forward";
  detail::check_ref(op, "x", x);
  detail::check_ref(op, "y", y);
  HALOX_REQUIRE(x.rank() >= 2, bad,
                std::string(op) + ": x has shape " + detail::fmt(x.shape) +
                    "; expected [N, C, ...] (rank >= 2)");
  require_same(op, "y", y, "x", x);
  lrn_forward_channels<T>(x, 0, x.shape[1], y, 0, p);
}

template <class T> void lrn_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                     tensor_ref<T> dx, lrn_params const& p) {
  char const* op = "lrn_backward";
  detail::check_ref(op, "x", x);
  detail::check_ref(op, "dy", dy);
  detail::check_ref(op, "dx", dx);
  HALOX_REQUIRE(x.rank() >= 2, bad,
                std::string(op) + ": x has shape " + detail::fmt(x.shape) +
                    "; expected [N, C, ...] (rank >= 2)");
  require_same(op, "dy", dy, "x", x);
  require_same(op, "dx", dx, "x", x);
  check_lrn_params(p, op);
  double* const t =
      detail::thread_scratch<double, struct lrn_terms>(static_cast<std::size_t>(x.size()));
  tensor_ref<double> const tr(t, x.shape);
  index_t const c = x.shape[1];
  lrn_backward_terms<T>(x, 0, c, dy, tr, 0, p);
  lrn_backward_apply<T>(x, 0, c, dy, tr, 0, dx, 0, p);
}

#define HALOX_LRN_INSTANTIATE(T)                                                                   \
  template void lrn_forward(const_tensor_ref<T>, tensor_ref<T>, lrn_params const&);                \
  template void lrn_backward(const_tensor_ref<T>, const_tensor_ref<T>, tensor_ref<T>,              \
                             lrn_params const&);                                                   \
  template void lrn_forward_channels(const_tensor_ref<T>, index_t, index_t, tensor_ref<T>,         \
                                     index_t, lrn_params const&);                                  \
  template void lrn_backward_terms(const_tensor_ref<T>, index_t, index_t, const_tensor_ref<T>,     \
                                   tensor_ref<double>, index_t, lrn_params const&);                \
  template void lrn_backward_apply(const_tensor_ref<T>, index_t, index_t, const_tensor_ref<T>,     \
                                   const_tensor_ref<double>, index_t, tensor_ref<T>, index_t,      \
                                   lrn_params const&);
HALOX_LRN_INSTANTIATE(float)
HALOX_LRN_INSTANTIATE(double)
#undef HALOX_LRN_INSTANTIATE

} // namespace halox::ops
