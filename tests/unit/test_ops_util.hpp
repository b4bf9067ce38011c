#pragma once
// Shared helpers of the operator unit tests: random data, contiguous tensors, and deliberately
// naive reference operators (direct loops over the definitions, scatter form for gradients),
// written independently of the library's gather/GEMM kernels.

#include <halox/error.hpp>
#include <halox/ops/ops.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace ops_test {

using halox::index_t;

/// Uniform random values in [lo, hi).
inline std::vector<double> random_values(std::size_t n, std::uint64_t seed, double lo = -1.0,
                                         double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = u(gen);
  return v;
}

/// Calls f(idx) for every index of `ext` in row-major order (once for an empty extent list).
inline void for_each_index(std::vector<index_t> const& ext,
                           std::function<void(std::vector<index_t> const&)> const& f) {
  for (index_t e : ext)
    if (e <= 0) return;
  std::vector<index_t> i(ext.size(), 0);
  while (true) {
    f(i);
    int d = static_cast<int>(ext.size()) - 1;
    while (d >= 0 && ++i[d] == ext[d]) i[d--] = 0;
    if (d < 0) return;
  }
}

/// Row-major offset of `idx` in a contiguous tensor of `shape`.
inline index_t flat(std::vector<index_t> const& shape, std::vector<index_t> const& idx) {
  index_t o = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) o = o * shape[d] + idx[d];
  return o;
}

/// A convolution or pooling configuration with every per-dimension value spelled out.
struct window_cfg {
  std::vector<index_t> kernel, stride, pad_lo, pad_hi, dilation;
  int nsp() const { return static_cast<int>(kernel.size()); }
};

inline std::vector<index_t> out_extent(std::vector<index_t> const& in, window_cfg const& c) {
  std::vector<index_t> o(in.size());
  for (std::size_t d = 0; d < in.size(); ++d)
    o[d] =
        (in[d] + c.pad_lo[d] + c.pad_hi[d] - c.dilation[d] * (c.kernel[d] - 1) - 1) / c.stride[d] +
        1;
  return o;
}

inline halox::ops::conv_params conv_params_of(window_cfg const& c) {
  return {c.stride, c.pad_lo, c.pad_hi, c.dilation};
}

/// Global input position of output `o` and tap `k`; `valid` false when it is padding.
inline std::vector<index_t> tap(std::vector<index_t> const& o, std::vector<index_t> const& k,
                                std::vector<index_t> const& in, window_cfg const& c, bool& valid) {
  std::vector<index_t> g(o.size());
  valid = true;
  for (std::size_t d = 0; d < o.size(); ++d) {
    g[d] = o[d] * c.stride[d] - c.pad_lo[d] + k[d] * c.dilation[d];
    valid = valid && g[d] >= 0 && g[d] < in[d];
  }
  return g;
}

inline std::vector<index_t> cat(std::vector<index_t> a, std::vector<index_t> const& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// y = conv(x, w) + b, x [N, Cin, in...], w [Cout, Cin, k...]; returns y contiguous.
inline std::vector<double> naive_conv(std::vector<double> const& x, std::vector<index_t> const& xs,
                                      std::vector<double> const& w, std::vector<index_t> const& ws,
                                      std::vector<double> const& b, window_cfg const& c) {
  std::vector<index_t> in(xs.begin() + 2, xs.end()), out = out_extent(in, c);
  std::vector<index_t> ys = cat({xs[0], ws[0]}, out);
  std::vector<double> y(static_cast<std::size_t>(halox::ops::element_count(ys)));
  for (index_t n = 0; n < xs[0]; ++n)
    for (index_t co = 0; co < ws[0]; ++co)
      for_each_index(out, [&](std::vector<index_t> const& o) {
        double s = b.empty() ? 0.0 : b[co];
        for (index_t ci = 0; ci < xs[1]; ++ci)
          for_each_index(c.kernel, [&](std::vector<index_t> const& k) {
            bool valid;
            auto g = tap(o, k, in, c, valid);
            if (valid) s += x[flat(xs, cat({n, ci}, g))] * w[flat(ws, cat({co, ci}, k))];
          });
        y[flat(ys, cat({n, co}, o))] = s;
      });
  return y;
}

/// Gradients of sum(y * dy) for y = conv(x, w) + b, by scattering every product.
inline void naive_conv_backward(std::vector<double> const& x, std::vector<index_t> const& xs,
                                std::vector<double> const& w, std::vector<index_t> const& ws,
                                std::vector<double> const& dy, window_cfg const& c,
                                std::vector<double>& dx, std::vector<double>& dw,
                                std::vector<double>& db) {
  std::vector<index_t> in(xs.begin() + 2, xs.end()), out = out_extent(in, c);
  std::vector<index_t> ys = cat({xs[0], ws[0]}, out);
  dx.assign(x.size(), 0.0);
  dw.assign(w.size(), 0.0);
  db.assign(static_cast<std::size_t>(ws[0]), 0.0);
  for (index_t n = 0; n < xs[0]; ++n)
    for (index_t co = 0; co < ws[0]; ++co)
      for_each_index(out, [&](std::vector<index_t> const& o) {
        double const g = dy[flat(ys, cat({n, co}, o))];
        db[co] += g;
        for (index_t ci = 0; ci < xs[1]; ++ci)
          for_each_index(c.kernel, [&](std::vector<index_t> const& k) {
            bool valid;
            auto p = tap(o, k, in, c, valid);
            if (!valid) return;
            index_t const xi = flat(xs, cat({n, ci}, p)), wi = flat(ws, cat({co, ci}, k));
            dx[xi] += g * w[wi];
            dw[wi] += g * x[xi];
          });
      });
}

/// Pooling forward; max picks the first maximum in tap order.
inline std::vector<double> naive_pool(std::vector<double> const& x, std::vector<index_t> const& xs,
                                      window_cfg const& c, bool max, bool include_pad) {
  std::vector<index_t> in(xs.begin() + 2, xs.end()), out = out_extent(in, c);
  std::vector<index_t> ys = cat({xs[0], xs[1]}, out);
  std::vector<double> y(static_cast<std::size_t>(halox::ops::element_count(ys)));
  for (index_t n = 0; n < xs[0]; ++n)
    for (index_t ch = 0; ch < xs[1]; ++ch)
      for_each_index(out, [&](std::vector<index_t> const& o) {
        double best = -INFINITY, sum = 0;
        index_t real = 0, padded = 0;
        bool first = true;
        for_each_index(c.kernel, [&](std::vector<index_t> const& k) {
          bool valid;
          auto g = tap(o, k, in, c, valid);
          bool in_padded = true;
          for (std::size_t d = 0; d < g.size(); ++d)
            in_padded = in_padded && g[d] >= -c.pad_lo[d] && g[d] < in[d] + c.pad_hi[d];
          padded += in_padded ? 1 : 0;
          if (!valid) return;
          double v = x[flat(xs, cat({n, ch}, g))];
          if (first || v > best) best = v;
          first = false;
          sum += v;
          ++real;
        });
        y[flat(ys, cat({n, ch}, o))] =
            max ? best : sum / static_cast<double>(include_pad ? padded : real);
      });
  return y;
}

/// Pooling backward by scattering: max routes to the first maximum, average spreads evenly.
inline std::vector<double> naive_pool_backward(std::vector<double> const& x,
                                               std::vector<index_t> const& xs,
                                               std::vector<double> const& dy, window_cfg const& c,
                                               bool max, bool include_pad) {
  std::vector<index_t> in(xs.begin() + 2, xs.end()), out = out_extent(in, c);
  std::vector<index_t> ys = cat({xs[0], xs[1]}, out);
  std::vector<double> dx(x.size(), 0.0);
  for (index_t n = 0; n < xs[0]; ++n)
    for (index_t ch = 0; ch < xs[1]; ++ch)
      for_each_index(out, [&](std::vector<index_t> const& o) {
        double const g = dy[flat(ys, cat({n, ch}, o))];
        double best = 0;
        index_t arg = -1, real = 0, padded = 0;
        std::vector<index_t> taps;
        for_each_index(c.kernel, [&](std::vector<index_t> const& k) {
          bool valid;
          auto p = tap(o, k, in, c, valid);
          bool in_padded = true;
          for (std::size_t d = 0; d < p.size(); ++d)
            in_padded = in_padded && p[d] >= -c.pad_lo[d] && p[d] < in[d] + c.pad_hi[d];
          padded += in_padded ? 1 : 0;
          if (!valid) return;
          index_t xi = flat(xs, cat({n, ch}, p));
          taps.push_back(xi);
          ++real;
          if (arg < 0 || x[xi] > best) {
            best = x[xi];
            arg = xi;
          }
        });
        if (max) {
          dx[arg] += g;
        } else {
          double share = g / static_cast<double>(include_pad ? padded : real);
          for (index_t xi : taps) dx[xi] += share;
        }
      });
  return dx;
}

/// Largest |a - b| over two equally long arrays.
template <class A, class B> double max_abs_diff(A const& a, B const& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return m;
}

/// Copies `v` to another element type.
template <class T> std::vector<T> as(std::vector<double> const& v) {
  return std::vector<T>(v.begin(), v.end());
}

/// Copies the spatial box [lo, lo + ext) of a contiguous [N, C, in...] tensor into a new
/// contiguous buffer (the local block a rank would hold, halo included).
inline std::vector<double> extract(std::vector<double> const& x, std::vector<index_t> const& xs,
                                   std::vector<index_t> const& lo,
                                   std::vector<index_t> const& ext) {
  std::vector<index_t> bs = cat({xs[0], xs[1]}, ext);
  std::vector<double> r(static_cast<std::size_t>(halox::ops::element_count(bs)));
  for_each_index(bs, [&](std::vector<index_t> const& i) {
    std::vector<index_t> g = i;
    for (std::size_t d = 0; d < lo.size(); ++d) g[2 + d] += lo[d];
    r[flat(bs, i)] = x[flat(xs, g)];
  });
  return r;
}

/// Spatial box with the given bounds.
inline halox::box make_box(std::vector<index_t> const& lo, std::vector<index_t> const& hi) {
  halox::box b;
  b.nd = static_cast<int>(lo.size());
  for (int d = 0; d < b.nd; ++d) {
    b.lo[d] = lo[d];
    b.hi[d] = hi[d];
  }
  return b;
}

/// Splits [0, ext) per dimension at the given cut points and returns every product box:
/// what a rank does when it computes interior and boundary pieces separately.
inline std::vector<halox::box> partition(std::vector<index_t> const& ext,
                                         std::vector<std::vector<index_t>> const& cuts) {
  std::vector<std::vector<std::pair<index_t, index_t>>> ranges(ext.size());
  for (std::size_t d = 0; d < ext.size(); ++d) {
    index_t prev = 0;
    for (index_t c : cuts[d]) {
      if (c > prev && c < ext[d]) {
        ranges[d].push_back({prev, c});
        prev = c;
      }
    }
    ranges[d].push_back({prev, ext[d]});
  }
  std::vector<index_t> counts;
  for (auto const& r : ranges) counts.push_back(static_cast<index_t>(r.size()));
  std::vector<halox::box> boxes;
  for_each_index(counts, [&](std::vector<index_t> const& i) {
    std::vector<index_t> lo, hi;
    for (std::size_t d = 0; d < i.size(); ++d) {
      lo.push_back(ranges[d][i[d]].first);
      hi.push_back(ranges[d][i[d]].second);
    }
    boxes.push_back(make_box(lo, hi));
  });
  return boxes;
}

/// Low and high corners of a box as vectors.
inline std::vector<index_t> lo_of(halox::box const& b) {
  return std::vector<index_t>(b.lo, b.lo + b.nd);
}
inline std::vector<index_t> ext_of(halox::box const& b) {
  std::vector<index_t> e(b.nd);
  for (int d = 0; d < b.nd; ++d) e[d] = b.extent(d);
  return e;
}

/// Runs `f`, expects halox::error (invalid_argument) whose message contains every `parts`.
template <class F> void expect_error(F&& f, std::vector<std::string> const& parts) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (halox::error const& e) {
    EXPECT_EQ(e.code(), halox::errc::invalid_argument);
    for (auto const& s : parts)
      EXPECT_NE(e.message().find(s), std::string::npos)
          << "missing '" << s << "' in: " << e.message();
  }
}

} // namespace ops_test
