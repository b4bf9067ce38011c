// LRN across channels: hand-computed values, a finite-difference gradient check, the
// channel-block kernels against the whole tensor, parameter errors, and the oneDNN provider
// against the reference kernels.
#include "test_ops_util.hpp"

#include <halox/ops/lrn.hpp>
#include <halox/ops/provider.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace {

namespace ops = halox::ops;
using halox::index_t;
using ops_test::random_values;

template <class T> std::vector<T> as(std::vector<double> const& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Direct definition, one value at a time (PyTorch's window: size/2 below, (size-1)/2 above).
double naive_lrn(std::vector<double> const& x, index_t n, index_t c, index_t hw, index_t i,
                 index_t ch, index_t pos, ops::lrn_params const& p) {
  double sum = 0;
  for (index_t j = ch - p.size / 2; j <= ch + (p.size - 1) / 2; ++j)
    if (j >= 0 && j < c) sum += x[(i * c + j) * hw + pos] * x[(i * c + j) * hw + pos];
  (void)n;
  return x[(i * c + ch) * hw + pos] * std::pow(p.k + p.alpha / p.size * sum, -p.beta);
}

TEST(OpsLrn, HandComputedValues) {
  // One sample, 3 channels, one position: x = 1, 2, 3, size 3, alpha 3, beta 1, k 1, so
  // s_c = 1 + (sum of squares over the window): s = 1+1+4, 1+1+4+9, 1+4+9.
  std::vector<double> x{1, 2, 3}, y(3);
  ops::lrn_params p{3, 3.0, 1.0, 1.0};
  ops::lrn_forward<double>({x.data(), {1, 3, 1}}, {y.data(), {1, 3, 1}}, p);
  EXPECT_DOUBLE_EQ(y[0], 1.0 / 6);
  EXPECT_DOUBLE_EQ(y[1], 2.0 / 15);
  EXPECT_DOUBLE_EQ(y[2], 3.0 / 14);
  // Even size 2: the window is [c-1, c]: s = 1+1, 1+1+4, 1+4+9 with alpha/size = 1.
  ops::lrn_params q{2, 2.0, 1.0, 1.0};
  ops::lrn_forward<double>({x.data(), {1, 3}}, {y.data(), {1, 3}}, q);
  EXPECT_DOUBLE_EQ(y[0], 1.0 / 2);
  EXPECT_DOUBLE_EQ(y[1], 2.0 / 6);
  EXPECT_DOUBLE_EQ(y[2], 3.0 / 14);
}

TEST(OpsLrn, MatchesDefinitionOnStridedViews) {
  for (int size : {1, 2, 3, 4, 5, 7}) {
    ops::lrn_params p{size, 0.7, 0.75, 1.5};
    index_t const n = 2, c = 6, h = 3, w = 4, hw = h * w;
    auto x = random_values(static_cast<std::size_t>(n * c * hw), 11 + size, -2, 2);
    // y inside a larger buffer: padded rows.
    std::vector<double> ybuf(static_cast<std::size_t>(n * c * h * (w + 3)), -7);
    ops::tensor_ref<double> y(ybuf.data(), {n, c, h, w}, {c * h * (w + 3), h * (w + 3), w + 3, 1});
    ops::lrn_forward<double>({x.data(), {n, c, h, w}}, y, p);
    for (index_t i = 0; i < n; ++i)
      for (index_t ch = 0; ch < c; ++ch)
        for (index_t a = 0; a < h; ++a)
          for (index_t b = 0; b < w; ++b)
            EXPECT_NEAR(ybuf[((i * c + ch) * h + a) * (w + 3) + b],
                        naive_lrn(x, n, c, hw, i, ch, a * w + b, p), 1e-14)
                << "size " << size;
  }
}

TEST(OpsLrn, GradientMatchesFiniteDifferences) {
  for (int size : {2, 3, 5}) {
    ops::lrn_params p{size, 0.9, 0.75, 1.2};
    std::vector<index_t> const shape{2, 5, 3};
    auto x = random_values(30, 100 + size, -1.5, 1.5);
    auto dy = random_values(30, 200 + size);
    std::vector<double> dx(30), y(30);
    ops::lrn_backward<double>({x.data(), shape}, {dy.data(), shape}, {dx.data(), shape}, p);
    auto loss = [&](std::vector<double> const& xx) {
      ops::lrn_forward<double>({xx.data(), shape}, {y.data(), shape}, p);
      double l = 0;
      for (std::size_t i = 0; i < y.size(); ++i) l += y[i] * dy[i];
      return l;
    };
    double const h = 1e-6;
    for (std::size_t i = 0; i < x.size(); ++i) {
      auto xp = x, xm = x;
      xp[i] += h;
      xm[i] -= h;
      EXPECT_NEAR(dx[i], (loss(xp) - loss(xm)) / (2 * h), 1e-8) << "size " << size << " at " << i;
    }
  }
}

template <class T> void check_channel_blocks() {
  for (int size : {1, 2, 4, 5}) {
    ops::lrn_params p{size, 1e-2, 0.75, 2.0};
    index_t const n = 2, c = 9, s = 5;
    std::vector<index_t> const shape{n, c, s};
    auto x = as<T>(random_values(static_cast<std::size_t>(n * c * s), 7, -3, 3));
    auto dy = as<T>(random_values(x.size(), 8));
    std::vector<T> y(x.size()), dx(x.size()), yb(x.size()), dxb(x.size());
    ops::lrn_forward<T>({x.data(), shape}, {y.data(), shape}, p);
    ops::lrn_backward<T>({x.data(), shape}, {dy.data(), shape}, {dx.data(), shape}, p);
    auto st = ops::contiguous_strides(shape);
    auto view = [&](auto* data, index_t lo, index_t hi) {
      using V = std::remove_pointer_t<decltype(data)>;
      return ops::tensor_ref<V>(data + lo * st[1], {n, hi - lo, s}, st);
    };
    std::vector<double> terms(x.size());
    // Blocks [0, 4) and [4, 9), each reading only the channels its windows reach.
    for (auto [lo, hi] : {std::pair<index_t, index_t>{0, 4}, {4, 9}}) {
      index_t const xl = std::max<index_t>(0, lo - size / 2);
      index_t const xh = std::min<index_t>(c, hi + (size - 1) / 2);
      ops::lrn_forward_channels<T>(view(static_cast<T const*>(x.data()), xl, xh), xl, c,
                                   view(yb.data(), lo, hi), lo, p);
    }
    EXPECT_EQ(y, yb) << "size " << size;
    // Terms for every channel block, then dx per block.
    for (auto [lo, hi] : {std::pair<index_t, index_t>{0, 4}, {4, 9}}) {
      index_t const xl = std::max<index_t>(0, lo - size / 2);
      index_t const xh = std::min<index_t>(c, hi + (size - 1) / 2);
      ops::lrn_backward_terms<T>(view(static_cast<T const*>(x.data()), xl, xh), xl, c,
                                 view(static_cast<T const*>(dy.data()), lo, hi),
                                 view(terms.data(), lo, hi), lo, p);
    }
    for (auto [lo, hi] : {std::pair<index_t, index_t>{0, 4}, {4, 9}}) {
      index_t const xl = std::max<index_t>(0, lo - size / 2);
      index_t const xh = std::min<index_t>(c, hi + (size - 1) / 2);
      index_t const tl = std::max<index_t>(0, lo - (size - 1) / 2);
      index_t const th = std::min<index_t>(c, hi + size / 2);
      ops::lrn_backward_apply<T>(view(static_cast<T const*>(x.data()), xl, xh), xl, c,
                                 view(static_cast<T const*>(dy.data()), lo, hi),
                                 view(static_cast<double const*>(terms.data()), tl, th), tl,
                                 view(dxb.data(), lo, hi), lo, p);
    }
    EXPECT_EQ(dx, dxb) << "size " << size;
  }
}

TEST(OpsLrn, ChannelBlocksGiveTheWholeTensorsBitsFloat) { check_channel_blocks<float>(); }
TEST(OpsLrn, ChannelBlocksGiveTheWholeTensorsBitsDouble) { check_channel_blocks<double>(); }

void expect_error(std::function<void()> const& f, std::vector<std::string> const& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (halox::error const& e) {
    EXPECT_EQ(e.code(), halox::errc::invalid_argument);
    for (auto const& s : parts)
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what() << " lacks " << s;
  }
}

TEST(OpsLrn, BadParametersAndShapesAreClearErrors) {
  std::vector<float> x(24), y(24);
  std::vector<index_t> const shape{1, 4, 6};
  auto run = [&](ops::lrn_params p) {
    return [&, p] { ops::lrn_forward<float>({x.data(), shape}, {y.data(), shape}, p); };
  };
  expect_error(run({0, 1e-4, 0.75, 1}), {"size = 0", "size >= 1"});
  expect_error(run({5, -1, 0.75, 1}), {"alpha = -1", "alpha >= 0"});
  expect_error(run({5, 1e-4, NAN, 1}), {"beta = nan", "finite beta"});
  expect_error(run({5, 1e-4, 0.75, 0}), {"k = 0", "k > 0"});
  expect_error(
      [&] {
        ops::lrn_forward<float>({x.data(), shape}, {y.data(), {1, 4, 5}}, {});
      },
      {"[1, 4, 5]", "[1, 4, 6]", "must match"});
  expect_error(
      [&] {
        ops::lrn_backward<float>({x.data(), shape}, {y.data(), {1, 3, 8}}, {y.data(), shape}, {});
      },
      {"dy", "[1, 3, 8]"});
  expect_error(
      [&] {
        ops::lrn_forward<float>({x.data(), {24}}, {y.data(), {24}}, {});
      },
      {"rank >= 2"});
  // A channel block whose windows reach past the channels x holds.
  expect_error(
      [&] {
        ops::lrn_forward_channels<float>({x.data(), {1, 2, 6}}, 2, 8, {y.data(), {1, 2, 6}}, 2, {});
      },
      {"holds channels [2, 4)", "needs [0, 6)"});
}

TEST(OpsLrn, ReferenceProviderRunsLrn) {
  ops::local_kernels<double> k(ops::compute_provider::reference);
  std::vector<double> x{1, 2, 3}, y(3);
  k.lrn_forward({x.data(), {1, 3}}, {y.data(), {1, 3}}, {3, 3.0, 1.0, 1.0});
  EXPECT_DOUBLE_EQ(y[1], 2.0 / 15);
}

// The vectorised kernels on haloed views: x, dy, y and dx each inside its own larger buffer (rows
// of different padding, a spare row and channel), so the contiguous runs are single rows that the
// kernels pack together, and a write outside the views would show in the padding.
TEST(OpsLrn, OnednnOnHaloedViewsMatchesReference) {
  if (!ops::provider_built(ops::compute_provider::onednn)) GTEST_SKIP() << "oneDNN not built";
  ops::local_kernels<float> dn(ops::compute_provider::onednn);
  std::vector<index_t> const shape{3, 16, 7, 14};
  ops::lrn_params const p{5, 1e-2, 0.75, 2.0};
  auto const n = static_cast<std::size_t>(ops::element_count(shape));
  auto const x = as<float>(random_values(n, 5, -3, 3)), dy = as<float>(random_values(n, 6));
  std::vector<float> y_ref(n), dx_ref(n);
  ops::lrn_forward<float>({x.data(), shape}, {y_ref.data(), shape}, p);
  ops::lrn_backward<float>({x.data(), shape}, {dy.data(), shape}, {dx_ref.data(), shape}, p);
  // A view of `shape` in a buffer with `pad` extra columns per row, one extra row and channel.
  struct haloed {
    std::vector<index_t> strides;
    std::vector<float> buf;
    haloed(std::vector<index_t> const& s, index_t pad, float fill) {
      index_t const w = s[3] + pad, hw = (s[2] + 1) * w, chw = (s[1] + 1) * hw;
      strides = {chw, hw, w, 1};
      buf.assign(static_cast<std::size_t>(s[0] * chw), fill);
    }
    float& at(std::vector<index_t> const& s, std::size_t i) {
      auto k = static_cast<index_t>(i);
      index_t off = 0;
      for (int d = 3; d >= 0; --d) {
        off += (k % s[static_cast<std::size_t>(d)]) * strides[static_cast<std::size_t>(d)];
        k /= s[static_cast<std::size_t>(d)];
      }
      return buf[static_cast<std::size_t>(off)];
    }
  };
  float const fill = -123.f;
  haloed xh(shape, 2, 0.f), dyh(shape, 5, 0.f), yh(shape, 4, fill), dxh(shape, 3, fill);
  for (std::size_t i = 0; i < n; ++i) xh.at(shape, i) = x[i], dyh.at(shape, i) = dy[i];
  dn.lrn_forward({xh.buf.data(), shape, xh.strides}, {yh.buf.data(), shape, yh.strides}, p);
  dn.lrn_backward({xh.buf.data(), shape, xh.strides}, {dyh.buf.data(), shape, dyh.strides},
                  {dxh.buf.data(), shape, dxh.strides}, p);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(yh.at(shape, i), y_ref[i], 1e-5 * std::max(1.f, std::abs(y_ref[i]))) << "y " << i;
    ASSERT_NEAR(dxh.at(shape, i), dx_ref[i], 1e-5 * std::max(1.f, std::abs(dx_ref[i])))
        << "dx " << i;
  }
  std::size_t untouched = 0;
  for (auto* h : {&yh, &dxh})
    untouched += static_cast<std::size_t>(std::count(h->buf.begin(), h->buf.end(), fill));
  EXPECT_EQ(untouched, yh.buf.size() + dxh.buf.size() - 2 * n); // the padding kept its value
}

TEST(OpsLrn, OnednnMatchesReference) {
  if (!ops::provider_built(ops::compute_provider::onednn)) GTEST_SKIP() << "oneDNN not built";
  ops::local_kernels<float> dn(ops::compute_provider::onednn);
  struct cfg {
    std::vector<index_t> shape;
    ops::lrn_params p;
  };
  std::vector<cfg> const cfgs{
      {{2, 7, 5, 6}, {5, 1e-4, 0.75, 2.0}},  {{2, 16, 4, 3}, {5, 0.5, 0.75, 1.0}},
      {{1, 9, 3, 4, 5}, {3, 2.0, 0.5, 1.5}}, {{3, 6, 10}, {1, 0.3, 1.0, 1.0}},
      {{2, 8, 4, 4}, {4, 0.5, 0.75, 1.0}}, // even: one channel more below than above
      {{4, 10}, {5, 0.5, 0.75, 1.0}}};     // rank 2
  for (auto const& c : cfgs) {
    auto const n = static_cast<std::size_t>(ops::element_count(c.shape));
    auto x = as<float>(random_values(n, 3, -3, 3)), dy = as<float>(random_values(n, 4));
    std::vector<float> y0(n), y1(n), dx0(n), dx1(n);
    ops::lrn_forward<float>({x.data(), c.shape}, {y0.data(), c.shape}, c.p);
    ops::lrn_backward<float>({x.data(), c.shape}, {dy.data(), c.shape}, {dx0.data(), c.shape}, c.p);
    dn.lrn_forward({x.data(), c.shape}, {y1.data(), c.shape}, c.p);
    dn.lrn_backward({x.data(), c.shape}, {dy.data(), c.shape}, {dx1.data(), c.shape}, c.p);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(y1[i], y0[i], 1e-5 * std::max(1.f, std::abs(y0[i])))
          << "y at " << i << " size " << c.p.size;
      ASSERT_NEAR(dx1[i], dx0[i], 1e-5 * std::max(1.f, std::abs(dx0[i])))
          << "dx at " << i << " size " << c.p.size;
    }
  }
  EXPECT_NE(dn.describe().find("lrn: halox vectorised kernels"), std::string::npos)
      << dn.describe();
}

} // namespace
