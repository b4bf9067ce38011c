#include "test_ops_util.hpp"

#include <halox/error.hpp>
#include <halox/ops/pool.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace {

using namespace ops_test;
namespace ops = halox::ops;
using halox::box;

struct pool_case {
  char const* name;
  std::vector<index_t> x_shape;
  window_cfg win;
  bool max;
  bool include_pad;

  std::vector<index_t> in() const { return {x_shape.begin() + 2, x_shape.end()}; }
  std::vector<index_t> y_shape() const {
    return cat({x_shape[0], x_shape[1]}, out_extent(in(), win));
  }
  ops::pool_params params() const {
    ops::pool_params p;
    p.kind = max ? ops::pool_kind::max : ops::pool_kind::average;
    p.kernel = win.kernel;
    p.stride = win.stride;
    p.pad_lo = win.pad_lo;
    p.pad_hi = win.pad_hi;
    p.dilation = win.dilation;
    p.count_include_pad = include_pad;
    return p;
  }
};

std::vector<pool_case> cases() {
  return {
      {"max_2x2_s2", {2, 3, 8, 6}, {{2, 2}, {2, 2}, {0, 0}, {0, 0}, {1, 1}}, true, true},
      {"max_3x3_s2_pad1", {2, 2, 9, 8}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}}, true, true},
      {"max_dilated", {1, 2, 9, 9}, {{3, 2}, {1, 2}, {2, 1}, {2, 1}, {2, 2}}, true, true},
      {"avg_3x3_pad1_incl", {2, 2, 7, 6}, {{3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, false, true},
      {"avg_3x3_s2_pad1_excl",
       {2, 2, 7, 6},
       {{3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}},
       false,
       false},
      {"avg_global_7x7", {2, 4, 7, 7}, {{7, 7}, {7, 7}, {0, 0}, {0, 0}, {1, 1}}, false, true},
      {"max_global_7x7", {2, 4, 7, 7}, {{7, 7}, {1, 1}, {0, 0}, {0, 0}, {1, 1}}, true, true},
      {"max_3d",
       {1, 2, 5, 6, 7},
       {{3, 3, 2}, {2, 2, 1}, {1, 1, 0}, {1, 1, 1}, {1, 1, 1}},
       true,
       true},
      {"avg_3d_asym_excl",
       {2, 1, 5, 6, 5},
       {{2, 3, 2}, {2, 1, 2}, {1, 0, 0}, {0, 1, 1}, {1, 1, 1}},
       false,
       false},
      {"max_1d", {2, 2, 10}, {{4}, {3}, {2}, {1}, {1}}, true, true},
  };
}

template <class T> void check_against_naive(pool_case const& c, double tol) {
  SCOPED_TRACE(c.name);
  auto xd = random_values(static_cast<std::size_t>(ops::element_count(c.x_shape)), 3);
  auto dyd = random_values(static_cast<std::size_t>(ops::element_count(c.y_shape())), 4);
  auto x = as<T>(xd), dy = as<T>(dyd);
  std::vector<T> y(dy.size()), dx(x.size());
  ASSERT_EQ(ops::pool_output_shape(c.x_shape, c.params()), c.y_shape());
  ops::pool_forward<T>({x.data(), c.x_shape}, {y.data(), c.y_shape()}, c.params());
  ops::pool_backward<T>({x.data(), c.x_shape}, {dy.data(), c.y_shape()}, {dx.data(), c.x_shape},
                        c.params());
  // The naive reference runs on the rounded inputs so ties and winners agree.
  std::vector<double> xr(x.begin(), x.end()), dyr(dy.begin(), dy.end());
  EXPECT_LE(max_abs_diff(y, naive_pool(xr, c.x_shape, c.win, c.max, c.include_pad)), tol);
  EXPECT_LE(max_abs_diff(dx, naive_pool_backward(xr, c.x_shape, dyr, c.win, c.max, c.include_pad)),
            tol);
}

TEST(OpsPool, HandChecked) {
  std::vector<double> x{1, 5, 2, 0, //
                        3, 4, 8, 1, //
                        0, 0, 1, 1, //
                        9, 0, 1, 7};
  std::vector<double> y(4);
  ops::pool_params mp;
  mp.kernel = {2};
  ops::pool_forward<double>({x.data(), {1, 1, 4, 4}}, {y.data(), {1, 1, 2, 2}}, mp);
  EXPECT_EQ(y, (std::vector<double>{5, 8, 9, 7}));

  ops::pool_params ap;
  ap.kind = ops::pool_kind::average;
  ap.kernel = {2};
  ops::pool_forward<double>({x.data(), {1, 1, 4, 4}}, {y.data(), {1, 1, 2, 2}}, ap);
  EXPECT_EQ(y, (std::vector<double>{13.0 / 4, 11.0 / 4, 9.0 / 4, 10.0 / 4}));

  // Padding 1, 3x3 window at the corner: 4 real values out of 9 padded positions.
  ap.kernel = {3};
  ap.stride = {3};
  ap.pad_lo = ap.pad_hi = {1};
  std::vector<double> y2(4);
  ops::pool_forward<double>({x.data(), {1, 1, 4, 4}}, {y2.data(), {1, 1, 2, 2}}, ap);
  EXPECT_DOUBLE_EQ(y2[0], 13.0 / 9);
  ap.count_include_pad = false;
  ops::pool_forward<double>({x.data(), {1, 1, 4, 4}}, {y2.data(), {1, 1, 2, 2}}, ap);
  EXPECT_DOUBLE_EQ(y2[0], 13.0 / 4);
}

TEST(OpsPool, MaxGradientGoesToTheFirstMaximum) {
  std::vector<double> x(9, 2.0), dy{1.0}, dx(9);
  ops::pool_params p;
  p.kernel = {3};
  ops::pool_backward<double>({x.data(), {1, 1, 3, 3}}, {dy.data(), {1, 1, 1, 1}},
                             {dx.data(), {1, 1, 3, 3}}, p);
  EXPECT_EQ(dx, (std::vector<double>{1, 0, 0, 0, 0, 0, 0, 0, 0}));
  // Overlapping windows (3x3, stride 1): a shared maximum collects every window's gradient.
  std::vector<double> x2{0, 0, 0, 0, //
                         0, 9, 0, 0, //
                         0, 0, 0, 0, //
                         0, 0, 0, 0};
  std::vector<double> dy2{1, 2, 3, 4}, dx2(16);
  p.stride = {1};
  ops::pool_backward<double>({x2.data(), {1, 1, 4, 4}}, {dy2.data(), {1, 1, 2, 2}},
                             {dx2.data(), {1, 1, 4, 4}}, p);
  EXPECT_DOUBLE_EQ(dx2[5], 10.0);
}

TEST(OpsPool, MatchesNaive) {
  for (auto const& c : cases()) {
    check_against_naive<double>(c, 1e-12);
    check_against_naive<float>(c, 1e-6);
  }
}

// Pieces of the output (forward) and of the input (backward) from blocks holding exactly the
// footprints the documentation names; every position sees the same operations, bit for bit.
TEST(OpsPool, SubBoxesEqualWhole) {
  for (auto const& c : cases()) {
    SCOPED_TRACE(c.name);
    auto p = c.params();
    auto in = c.in();
    auto ys = c.y_shape();
    std::vector<index_t> out(ys.begin() + 2, ys.end());
    auto x = random_values(static_cast<std::size_t>(ops::element_count(c.x_shape)), 7);
    auto dy = random_values(static_cast<std::size_t>(ops::element_count(ys)), 8);
    std::vector<double> y(dy.size()), dx(x.size());
    ops::pool_forward<double>({x.data(), c.x_shape}, {y.data(), ys}, p);
    ops::pool_backward<double>({x.data(), c.x_shape}, {dy.data(), ys}, {dx.data(), c.x_shape}, p);
    auto nc = std::vector<index_t>{c.x_shape[0], c.x_shape[1]};

    std::vector<std::vector<index_t>> ocuts, icuts;
    for (index_t e : out) ocuts.push_back({1, e - 1});
    for (index_t e : in) icuts.push_back({2, e - 2});
    std::vector<double> y2(y.size(), std::nan(""));
    for (box const& ob : partition(out, ocuts)) {
      box fp = ops::pool_input_footprint(ob, in, p);
      auto xl = extract(x, c.x_shape, lo_of(fp), ext_of(fp));
      ops::pool_forward_box<double>({{xl.data(), cat(nc, ext_of(fp))}, lo_of(fp)}, in,
                                    {{y2.data(), ys}}, ob, p);
    }
    EXPECT_EQ(max_abs_diff(y2, y), 0.0);

    std::vector<double> dx2(dx.size(), std::nan(""));
    for (box const& ib : partition(in, icuts)) {
      box ofp = ops::pool_output_footprint(ib, in, p);
      box ifp = ops::pool_input_footprint(ofp, in, p);
      auto dyl = extract(dy, ys, lo_of(ofp), ext_of(ofp));
      auto xl = extract(x, c.x_shape, lo_of(ifp), ext_of(ifp));
      ops::pool_backward_box<double>({{xl.data(), cat(nc, ext_of(ifp))}, lo_of(ifp)},
                                     {{dyl.data(), cat(nc, ext_of(ofp))}, lo_of(ofp)}, in,
                                     {{dx2.data(), c.x_shape}}, ib, p);
    }
    EXPECT_EQ(max_abs_diff(dx2, dx), 0.0);
  }
}

TEST(OpsPool, GradientsMatchFiniteDifferences) {
  for (auto const& c : cases()) {
    SCOPED_TRACE(c.name);
    auto p = c.params();
    auto ys = c.y_shape();
    // Distinct, well separated values keep the max winners stable under the perturbation.
    auto x = random_values(static_cast<std::size_t>(ops::element_count(c.x_shape)), 9);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<double>(i % 97) * 0.01 + x[i] * 1e-3;
    auto r = random_values(static_cast<std::size_t>(ops::element_count(ys)), 10);
    auto loss = [&] {
      std::vector<double> y(r.size());
      ops::pool_forward<double>({x.data(), c.x_shape}, {y.data(), ys}, p);
      double s = 0;
      for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * r[i];
      return s;
    };
    std::vector<double> dx(x.size());
    ops::pool_backward<double>({x.data(), c.x_shape}, {r.data(), ys}, {dx.data(), c.x_shape}, p);
    double const h = 1e-7;
    for (std::size_t i = 0; i < x.size(); i += 5) {
      double keep = x[i];
      x[i] = keep + h;
      double up = loss();
      x[i] = keep - h;
      double down = loss();
      x[i] = keep;
      EXPECT_NEAR((up - down) / (2 * h), dx[i], 1e-6) << "element " << i;
    }
  }
}

TEST(OpsPool, Errors) {
  std::vector<double> x(1 * 2 * 6 * 6), y(1 * 2 * 3 * 3);
  ops::pool_params p;
  expect_error(
      [&] {
        ops::pool_forward<double>({x.data(), {1, 2, 6, 6}}, {y.data(), {1, 2, 3, 3}}, p);
      },
      {"kernel is empty"});
  p.kernel = {2};
  expect_error(
      [&] {
        ops::pool_forward<double>({x.data(), {1, 2, 6, 6}}, {y.data(), {1, 2, 2, 3}}, p);
      },
      {"expected [1, 2, 3, 3]"});
  expect_error(
      [&] {
        ops::pool_forward<double>({x.data(), {1, 2, 6, 6}}, {y.data(), {1, 3, 3, 3}}, p);
      },
      {"expected [1, 2, 3, 3]"});
  // A window made only of padding has no maximum.
  p.kernel = {2};
  p.stride = {1};
  p.pad_lo = {2};
  expect_error([&] { (void)ops::pool_output_shape({1, 2, 6, 6}, p); }, {"only of padding"});
  p.kind = ops::pool_kind::average; // fine when padding counts
  EXPECT_EQ(ops::pool_output_shape({1, 2, 6, 6}, p), (std::vector<index_t>{1, 2, 7, 7}));
  p.count_include_pad = false;
  expect_error([&] { (void)ops::pool_output_shape({1, 2, 6, 6}, p); }, {"only of padding"});
  p = {};
  p.kernel = {7};
  expect_error(
      [&] {
        (void)ops::pool_output_shape({1, 2, 6, 6}, p);
      },
      {"larger than the padded input"});
  p.kernel = {2, 2, 2};
  expect_error([&] { (void)ops::pool_output_shape({1, 2, 6, 6}, p); }, {"3 entries for 2"});
}

} // namespace
