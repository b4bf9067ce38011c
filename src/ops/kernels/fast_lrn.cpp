// Vectorised host LRN across channels (see fast_lrn.hpp). The tensor is walked as chunks of up
// to `ch` contiguous positions (a run of for_each_run, cut to fit the cache); for a chunk, every
// channel's values are at hand, so a channel's window sum is `size` SIMD adds of squares kept in
// scratch, and backward computes the scale, its power and the window terms of all channels in
// one sweep and dx in a second, without the forward pass and workspace a library LRN needs.
// Compiled with -fno-math-errno (CMakeLists.txt) so that sqrt vectorises.
#include "ops/kernels/fast_lrn.hpp"

#include "ops/kernels/elementwise.hpp"
#include "ops/kernels/geometry.hpp"
#include "ops/kernels/parallel.hpp"
#include "ops/kernels/per_channel.hpp"
#include "ops/kernels/scratch.hpp"
#include "ops/kernels/simd_clones.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

// The chunk kernels are square-root and division bound, so the vector width counts: they are
// compiled for AVX-512 and AVX2 besides the baseline (simd_clones.hpp).

namespace halox::ops::detail {
namespace {

// s^-beta for s > 0. AlexNet's beta = 0.75 and the other common values run as square roots and
// a division, which vectorise; any other beta calls pow per value.
enum class power { three_quarters, half, one, general };

power power_of(double beta) {
  if (beta == 0.75) return power::three_quarters;
  if (beta == 0.5) return power::half;
  if (beta == 1.0) return power::one;
  return power::general;
}

// Calls f(std::integral_constant<power, P>) with the P of `beta`.
template <class F> void with_power(double beta, F&& f) {
  switch (power_of(beta)) {
  case power::three_quarters: return f(std::integral_constant<power, power::three_quarters>{});
  case power::half: return f(std::integral_constant<power, power::half>{});
  case power::one: return f(std::integral_constant<power, power::one>{});
  case power::general: return f(std::integral_constant<power, power::general>{});
  }
}

// s^-beta and s^(-beta-1) together, with one division (forward uses the first only; the
// compiler drops the second there).
template <class T, power P> inline void neg_pows(T s, T beta, T& pw, T& pw1) {
  if constexpr (P == power::three_quarters) {
    T const u = T(1) / std::sqrt(s);
    pw = u * std::sqrt(u);
    pw1 = pw * u * u;
  } else if constexpr (P == power::half) {
    T const u = T(1) / std::sqrt(s);
    pw = u;
    pw1 = u * u * u;
  } else if constexpr (P == power::one) {
    pw = T(1) / s;
    pw1 = pw * pw;
  } else {
    pw = std::pow(s, -beta);
    pw1 = pw / s;
  }
}

constexpr index_t max_chunk = 256;

// Positions per chunk: the scratch of a chunk (three arrays of C x ch values) stays within
// about 200 KB, so a chunk's passes run from the cache.
index_t chunk_for(index_t channels) {
  index_t const c = std::max<index_t>(channels, 1);
  return std::clamp<index_t>((16384 / c) / 8 * 8, 8, max_chunk);
}

// The channel-window constants of one call, in T.
template <class T> struct consts {
  T a, k, beta, coef; // alpha / size, k, beta, 2 alpha beta / size
  int lo, hi;         // channels below and above a channel that its window reads
  explicit consts(lrn_params const& p)
      : a(static_cast<T>(p.alpha / p.size)), k(static_cast<T>(p.k)), beta(static_cast<T>(p.beta)),
        coef(static_cast<T>(2.0 * p.alpha * p.beta / p.size)), lo(lrn_reach_lo(p)),
        hi(lrn_reach_hi(p)) {}
};

// sq[c * ch + i] = x_c[i]^2 for the m positions of a chunk.
template <class T> void squares(T const* x, index_t sx, index_t C, index_t m, index_t ch, T* sq) {
  for (index_t c = 0; c < C; ++c) {
    T const* xc = x + c * sx;
    T* q = sq + c * ch;
#pragma omp simd
    for (index_t i = 0; i < m; ++i) q[i] = xc[i] * xc[i];
  }
}

// acc = sum of v[j * ch + i] over the channels j in [lo, hi), in increasing j (the reference's
// order).
template <class T>
void window_sum(T const* v, index_t lo, index_t hi, index_t m, index_t ch, T* acc) {
  T const* first = v + lo * ch;
#pragma omp simd
  for (index_t i = 0; i < m; ++i) acc[i] = first[i];
  for (index_t j = lo + 1; j < hi; ++j) {
    T const* vj = v + j * ch;
#pragma omp simd
    for (index_t i = 0; i < m; ++i) acc[i] += vj[i];
  }
}

template <class T, power P>
HALOX_SIMD_CLONES void forward_chunk(T const* x, index_t sx, T* y, index_t sy, index_t C, index_t m,
                                     index_t ch, consts<T> const& q, T* sq) {
  squares(x, sx, C, m, ch, sq);
  T acc[max_chunk];
  for (index_t c = 0; c < C; ++c) {
    window_sum(sq, std::max<index_t>(0, c - q.lo), std::min<index_t>(C, c + q.hi + 1), m, ch, acc);
    T const* xc = x + c * sx;
    T* yc = y + c * sy;
#pragma omp simd
    for (index_t i = 0; i < m; ++i) {
      T pw, pw1;
      neg_pows<T, P>(q.k + q.a * acc[i], q.beta, pw, pw1);
      yc[i] = xc[i] * pw;
    }
  }
}

// dx_c = dy_c s_c^-beta - coef x_c sum over the channels j whose window holds c of
// dy_j x_j s_j^(-beta-1).
template <class T, power P>
HALOX_SIMD_CLONES void backward_chunk(T const* x, index_t sx, T const* dy, index_t sd, T* dx,
                                      index_t so, index_t C, index_t m, index_t ch,
                                      consts<T> const& q, T* sq, T* r, T* t) {
  squares(x, sx, C, m, ch, sq);
  T acc[max_chunk];
  for (index_t c = 0; c < C; ++c) {
    window_sum(sq, std::max<index_t>(0, c - q.lo), std::min<index_t>(C, c + q.hi + 1), m, ch, acc);
    T const* xc = x + c * sx;
    T const* dc = dy + c * sd;
    T* rc = r + c * ch;
    T* tc = t + c * ch;
#pragma omp simd
    for (index_t i = 0; i < m; ++i) {
      T pw, pw1;
      neg_pows<T, P>(q.k + q.a * acc[i], q.beta, pw, pw1);
      rc[i] = pw;
      tc[i] = dc[i] * xc[i] * pw1;
    }
  }
  for (index_t c = 0; c < C; ++c) {
    // The channels whose window holds c: [c - hi, c + lo].
    window_sum(t, std::max<index_t>(0, c - q.hi), std::min<index_t>(C, c + q.lo + 1), m, ch, acc);
    T const* xc = x + c * sx;
    T const* dc = dy + c * sd;
    T const* rc = r + c * ch;
    T* oc = dx + c * so;
#pragma omp simd
    for (index_t i = 0; i < m; ++i) oc[i] = dc[i] * rc[i] - q.coef * xc[i] * acc[i];
  }
}

// Calls f(oa, ob, oc, m) for every chunk of up to `ch` positions, with the element offsets of
// its channel 0 in the three layouts. Threads take whole samples, on large tensors only (as the
// other host kernels decide).
template <class F> void for_each_chunk(per_channel const& a, per_channel const& b,
                                       per_channel const& c, index_t ch, F&& f) {
  auto sample = [&](index_t n) {
    for_each_run(a.rest, a.rest_strides, b.rest_strides, c.rest_strides,
                 [&](index_t oa, index_t ob, index_t oc, index_t len) {
                   for (index_t i = 0; i < len; i += ch)
                     f(n * a.sn + oa + i, n * b.sn + ob + i, n * c.sn + oc + i,
                       std::min(ch, len - i));
                 });
  };
  parallel_for(a.n, a.n > 1 && use_threads(a.n * a.c * a.inner), sample);
}

template <class T, power P> void forward_all(const_tensor_ref<T> const& x, tensor_ref<T> const& y,
                                             per_channel const& gx, per_channel const& gy,
                                             consts<T> const& q) {
  index_t const ch = chunk_for(gx.c);
  for_each_chunk(gx, gy, gy, ch, [&](index_t ox, index_t oy, index_t, index_t m) {
    T* sq = thread_scratch<T, struct fast_lrn_sq>(static_cast<std::size_t>(gx.c * ch));
    forward_chunk<T, P>(x.data + ox, gx.sc, y.data + oy, gy.sc, gx.c, m, ch, q, sq);
  });
}

template <class T, power P>
void backward_all(const_tensor_ref<T> const& x, const_tensor_ref<T> const& dy,
                  tensor_ref<T> const& dx, per_channel const& gx, per_channel const& gd,
                  per_channel const& go, consts<T> const& q) {
  index_t const ch = chunk_for(gx.c);
  for_each_chunk(gx, gd, go, ch, [&](index_t ox, index_t od, index_t oo, index_t m) {
    auto const len = static_cast<std::size_t>(gx.c * ch);
    T* sq = thread_scratch<T, struct fast_lrn_sq>(len);
    T* r = thread_scratch<T, struct fast_lrn_r>(len);
    T* t = thread_scratch<T, struct fast_lrn_t>(len);
    backward_chunk<T, P>(x.data + ox, gx.sc, dy.data + od, gd.sc, dx.data + oo, go.sc, gx.c, m, ch,
                         q, sq, r, t);
  });
}

} // namespace

char const* fast_lrn_isa() { return simd_clone_isa(); }

template <class T>
void fast_lrn_forward(const_tensor_ref<T> x, tensor_ref<T> y, lrn_params const& p) {
  char const* op = "lrn_forward";
  check_lrn_params(p, op);
  auto const gx = split(op, "x", x);
  auto const gy = split(op, "y", y);
  require_same(op, "y", y.shape, "x", x.shape);
  if (x.size() == 0) return;
  consts<T> const q(p);
  with_power(p.beta, [&](auto P) { forward_all<T, decltype(P)::value>(x, y, gx, gy, q); });
}

template <class T> void fast_lrn_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                          tensor_ref<T> dx, lrn_params const& p) {
  char const* op = "lrn_backward";
  check_lrn_params(p, op);
  auto const gx = split(op, "x", x);
  auto const gd = split(op, "dy", dy);
  auto const go = split(op, "dx", dx);
  require_same(op, "dy", dy.shape, "x", x.shape);
  require_same(op, "dx", dx.shape, "x", x.shape);
  if (x.size() == 0) return;
  consts<T> const q(p);
  with_power(p.beta,
             [&](auto P) { backward_all<T, decltype(P)::value>(x, dy, dx, gx, gd, go, q); });
}

#define HALOX_INSTANTIATE(T)                                                                       \
  template void fast_lrn_forward(const_tensor_ref<T>, tensor_ref<T>, lrn_params const&);           \
  template void fast_lrn_backward(const_tensor_ref<T>, const_tensor_ref<T>, tensor_ref<T>,         \
                                  lrn_params const&);
HALOX_INSTANTIATE(float)
HALOX_INSTANTIATE(double)
#undef HALOX_INSTANTIATE

} // namespace halox::ops::detail
