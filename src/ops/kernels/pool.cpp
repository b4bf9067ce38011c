#include "ops/kernels/geometry.hpp"
#include "ops/kernels/parallel.hpp"

#include <halox/error.hpp>
#include <halox/ops/pool.hpp>

#include <cmath>
#include <string>

namespace halox::ops {
namespace detail {
namespace {

constexpr auto bad = errc::invalid_argument;

// One window, evaluated at output position o. Taps are visited in row-major order; `visit`
// receives each real (non-padding) tap's global position.
template <class F> void for_each_tap(window3 const& w, index_t const (&o)[s3], F&& visit) {
  for (index_t k0 = 0; k0 < w.k[0]; ++k0) {
    index_t g0 = o[0] * w.s[0] - w.pl[0] + k0 * w.d[0];
    if (g0 < 0 || g0 >= w.in[0]) continue;
    for (index_t k1 = 0; k1 < w.k[1]; ++k1) {
      index_t g1 = o[1] * w.s[1] - w.pl[1] + k1 * w.d[1];
      if (g1 < 0 || g1 >= w.in[1]) continue;
      for (index_t k2 = 0; k2 < w.k[2]; ++k2) {
        index_t g2 = o[2] * w.s[2] - w.pl[2] + k2 * w.d[2];
        if (g2 < 0 || g2 >= w.in[2]) continue;
        visit(g0, g1, g2);
      }
    }
  }
}

// Global position of the window's winner: the first maximum in tap order, a NaN overriding
// any number (PyTorch's rule). Every window has a real tap (checked by pool_window).
template <class T> void argmax(window3 const& w, block3<T const> const& x, index_t n, index_t c,
                               index_t const (&o)[s3], index_t (&best)[s3]) {
  T m = T(0);
  bool first = true;
  for_each_tap(w, o, [&](index_t g0, index_t g1, index_t g2) {
    T const v = x.data[x.offset(n, c, g0, g1, g2)];
    if (first || v > m || std::isnan(v)) {
      m = v;
      best[0] = g0;
      best[1] = g1;
      best[2] = g2;
    }
    first = false;
  });
}

template <class T> void forward_kernel(window3 const& w, pool_params const& p,
                                       block3<T const> const& x, block3<T> const& y,
                                       box3 const& ob) {
  index_t const planes = x.n * x.c;
  parallel_for(planes, use_threads(planes * ob.volume() * w.kvol()), [&](index_t pl) {
    index_t const n = pl / x.c, c = pl % x.c;
    index_t o[s3];
    for (o[0] = ob.lo[0]; o[0] < ob.hi[0]; ++o[0])
      for (o[1] = ob.lo[1]; o[1] < ob.hi[1]; ++o[1])
        for (o[2] = ob.lo[2]; o[2] < ob.hi[2]; ++o[2]) {
          T r;
          if (p.kind == pool_kind::max) {
            index_t g[s3];
            argmax(w, x, n, c, o, g);
            r = x.data[x.offset(n, c, g[0], g[1], g[2])];
          } else {
            double s = 0;
            for_each_tap(w, o, [&](index_t g0, index_t g1, index_t g2) {
              s += static_cast<double>(x.data[x.offset(n, c, g0, g1, g2)]);
            });
            r = static_cast<T>(s / static_cast<double>(avg_divisor(w, o, p.count_include_pad)));
          }
          y.data[y.offset(n, c, o[0], o[1], o[2])] = r;
        }
  });
}

bool inside(box3 const& b, index_t g0, index_t g1, index_t g2) {
  return g0 >= b.lo[0] && g0 < b.hi[0] && g1 >= b.lo[1] && g1 < b.hi[1] && g2 >= b.lo[2] &&
         g2 < b.hi[2];
}

// Scatter restricted to the box: every output whose window touches ib adds its gradient to
// the taps that lie in ib. Planes are independent, so they run in parallel.
template <class T> void backward_kernel(window3 const& w, pool_params const& p,
                                        block3<T const> const& x, block3<T const> const& dy,
                                        block3<T> const& dx, box3 const& ib) {
  box3 const ob = output_footprint(w, ib);
  index_t const planes = dx.n * dx.c;
  parallel_for(planes, use_threads(planes * ob.volume() * w.kvol()), [&](index_t pl) {
    index_t const n = pl / dx.c, c = pl % dx.c;
    for (index_t i0 = ib.lo[0]; i0 < ib.hi[0]; ++i0)
      for (index_t i1 = ib.lo[1]; i1 < ib.hi[1]; ++i1)
        for (index_t i2 = ib.lo[2]; i2 < ib.hi[2]; ++i2)
          dx.data[dx.offset(n, c, i0, i1, i2)] = T(0);
    index_t o[s3];
    for (o[0] = ob.lo[0]; o[0] < ob.hi[0]; ++o[0])
      for (o[1] = ob.lo[1]; o[1] < ob.hi[1]; ++o[1])
        for (o[2] = ob.lo[2]; o[2] < ob.hi[2]; ++o[2]) {
          T const g = dy.data[dy.offset(n, c, o[0], o[1], o[2])];
          if (p.kind == pool_kind::max) {
            index_t a[s3];
            argmax(w, x, n, c, o, a);
            if (inside(ib, a[0], a[1], a[2])) dx.data[dx.offset(n, c, a[0], a[1], a[2])] += g;
          } else {
            T const share = g / static_cast<T>(avg_divisor(w, o, p.count_include_pad));
            for_each_tap(w, o, [&](index_t g0, index_t g1, index_t g2) {
              if (inside(ib, g0, g1, g2)) dx.data[dx.offset(n, c, g0, g1, g2)] += share;
            });
          }
        }
  });
}

void require_match(char const* op, char const* a, dims const& sa, char const* b, dims const& sb) {
  HALOX_REQUIRE(sa[0] == sb[0] && sa[1] == sb[1], bad,
                std::string(op) + ": " + a + " " + fmt(sa) + " and " + b + " " + fmt(sb) +
                    " must have the same batch and channel extents");
}

template <class T> void forward_impl(char const* op, const_block_ref<T> const& x,
                                     dims const& in_extent, block_ref<T> const& y,
                                     box const& out_box, pool_params const& p) {
  int const nsp = spatial_dims(op, "x", x.ref.rank());
  block3<T const> xb = to_block3(op, "x", x, nsp);
  block3<T> yb = to_block3(op, "y", y, nsp);
  require_match(op, "y", y.ref.shape, "x", x.ref.shape);
  HALOX_REQUIRE(static_cast<int>(in_extent.size()) == nsp, bad,
                std::string(op) + ": in_extent " + fmt(in_extent) +
                    " needs one entry per spatial dimension (" + std::to_string(nsp) + ")");
  window3 w = pool_window(op, in_extent, p);
  box3 ob = to_box3(op, "out_box", out_box, nsp);
  require_inside(op, "out_box", ob, w, false);
  require_covers(op, "y", yb, ob, nsp, "out_box");
  require_covers(op, "x", xb, input_footprint(w, ob), nsp, "the input footprint of out_box");
  forward_kernel(w, p, xb, yb, ob);
}

template <class T> void backward_impl(char const* op, const_block_ref<T> const& x,
                                      const_block_ref<T> const& dy, dims const& in_extent,
                                      block_ref<T> const& dx, box const& in_box,
                                      pool_params const& p) {
  int const nsp = spatial_dims(op, "dx", dx.ref.rank());
  block3<T> dxb = to_block3(op, "dx", dx, nsp);
  block3<T const> dyb = to_block3(op, "dy", dy, nsp);
  require_match(op, "dy", dy.ref.shape, "dx", dx.ref.shape);
  HALOX_REQUIRE(static_cast<int>(in_extent.size()) == nsp, bad,
                std::string(op) + ": in_extent " + fmt(in_extent) +
                    " needs one entry per spatial dimension (" + std::to_string(nsp) + ")");
  window3 w = pool_window(op, in_extent, p);
  box3 ib = to_box3(op, "in_box", in_box, nsp);
  require_inside(op, "in_box", ib, w, true);
  require_covers(op, "dx", dxb, ib, nsp, "in_box");
  box3 ob = output_footprint(w, ib);
  require_covers(op, "dy", dyb, ob, nsp, "the output footprint of in_box");
  block3<T const> xb;
  if (p.kind == pool_kind::max) {
    xb = to_block3(op, "x", x, nsp);
    require_match(op, "x", x.ref.shape, "dx", dx.ref.shape);
    require_covers(op, "x", xb, input_footprint(w, ob), nsp,
                   "max pooling (the windows of the output footprint of in_box)");
  }
  backward_kernel(w, p, xb, dyb, dxb, ib);
}

} // namespace
} // namespace detail

template <class T> void pool_forward_box(const_block_ref<T> x, dims const& in_extent,
                                         block_ref<T> y, box const& out_box, pool_params const& p) {
  detail::forward_impl("pool_forward_box", x, in_extent, y, out_box, p);
}

template <class T> void pool_forward(const_tensor_ref<T> x, tensor_ref<T> y, pool_params const& p) {
  char const* op = "pool_forward";
  auto expected = detail::pool_shape(op, x.shape, p);
  detail::check_ref(op, "y", y);
  detail::require_shape(op, "y", y.shape, expected, "(from x " + detail::fmt(x.shape) + ")");
  detail::forward_impl(op, const_block_ref<T>(x), detail::spatial_extent(x.shape), block_ref<T>(y),
                       detail::spatial_box(expected), p);
}

template <class T> void pool_backward_box(const_block_ref<T> x, const_block_ref<T> dy,
                                          dims const& in_extent, block_ref<T> dx, box const& in_box,
                                          pool_params const& p) {
  detail::backward_impl("pool_backward_box", x, dy, in_extent, dx, in_box, p);
}

template <class T> void pool_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                      tensor_ref<T> dx, pool_params const& p) {
  char const* op = "pool_backward";
  detail::check_ref(op, "dx", dx);
  detail::check_ref(op, "dy", dy);
  auto expected = detail::pool_shape(op, dx.shape, p);
  detail::require_shape(op, "dy", dy.shape, expected,
                        "(the forward output for dx " + detail::fmt(dx.shape) + ")");
  if (p.kind == pool_kind::max)
    detail::require_shape(op, "x", x.shape, dx.shape, "(max pooling needs the forward input)");
  detail::backward_impl(op, const_block_ref<T>(x), const_block_ref<T>(dy),
                        detail::spatial_extent(dx.shape), block_ref<T>(dx),
                        detail::spatial_box(dx.shape), p);
}

#define HALOX_INSTANTIATE(T)                                                                       \
  template void pool_forward(const_tensor_ref<T>, tensor_ref<T>, pool_params const&);              \
  template void pool_forward_box(const_block_ref<T>, dims const&, block_ref<T>, box const&,        \
                                 pool_params const&);                                              \
  template void pool_backward(const_tensor_ref<T>, const_tensor_ref<T>, tensor_ref<T>,             \
                              pool_params const&);                                                 \
  template void pool_backward_box(const_block_ref<T>, const_block_ref<T>, dims const&,             \
                                  block_ref<T>, box const&, pool_params const&);
HALOX_INSTANTIATE(float)
HALOX_INSTANTIATE(double)
#undef HALOX_INSTANTIATE

} // namespace halox::ops
