#include "test_ops_util.hpp"

#include <halox/error.hpp>
#include <halox/ops/conv.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace {

using namespace ops_test;
namespace ops = halox::ops;
using halox::box;

struct conv_case {
  char const* name;
  std::vector<index_t> x_shape; // [N, Cin, in...]
  index_t cout;
  window_cfg win;
  bool bias;

  std::vector<index_t> w_shape() const { return cat({cout, x_shape[1]}, win.kernel); }
  std::vector<index_t> in() const { return {x_shape.begin() + 2, x_shape.end()}; }
  std::vector<index_t> y_shape() const { return cat({x_shape[0], cout}, out_extent(in(), win)); }
};

std::vector<conv_case> cases() {
  return {
      {"same_3x3", {2, 3, 8, 7}, 4, {{3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, true},
      {"even_4x2_stride2_asym", {2, 3, 9, 6}, 5, {{4, 2}, {2, 2}, {1, 0}, {2, 1}, {1, 1}}, true},
      {"valid_dilated", {1, 2, 9, 10}, 3, {{3, 3}, {1, 1}, {0, 0}, {0, 0}, {2, 2}}, false},
      {"even_2x2_stride2_valid", {3, 2, 6, 8}, 2, {{2, 2}, {2, 2}, {0, 0}, {0, 0}, {1, 1}}, true},
      {"mixed_3d",
       {1, 2, 5, 6, 4},
       3,
       {{3, 2, 3}, {1, 2, 1}, {1, 0, 2}, {0, 1, 1}, {1, 1, 2}},
       true},
      {"strided_3d",
       {2, 1, 6, 5, 7},
       2,
       {{2, 3, 3}, {2, 2, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}},
       false},
      {"one_d", {2, 2, 11}, 3, {{3}, {3}, {2}, {1}, {1}}, true},
  };
}

struct data {
  std::vector<double> x, w, b, dy;
};
data make_data(conv_case const& c, std::uint64_t seed) {
  data d;
  d.x = random_values(static_cast<std::size_t>(ops::element_count(c.x_shape)), seed);
  d.w = random_values(static_cast<std::size_t>(ops::element_count(c.w_shape())), seed + 1);
  if (c.bias) d.b = random_values(static_cast<std::size_t>(c.cout), seed + 2);
  d.dy = random_values(static_cast<std::size_t>(ops::element_count(c.y_shape())), seed + 3);
  return d;
}

template <class T> void check_against_naive(conv_case const& c, double tol) {
  SCOPED_TRACE(c.name);
  data d = make_data(c, 11);
  auto x = as<T>(d.x), w = as<T>(d.w), b = as<T>(d.b), dy = as<T>(d.dy);
  std::vector<T> y(static_cast<std::size_t>(ops::element_count(c.y_shape())));
  std::vector<T> dx(x.size()), dw(w.size()), db(b.size());
  auto p = conv_params_of(c.win);
  ASSERT_EQ(ops::conv_output_shape(c.x_shape, c.w_shape(), p), c.y_shape());

  ops::conv_forward<T>({x.data(), c.x_shape}, {w.data(), c.w_shape()}, c.bias ? b.data() : nullptr,
                       {y.data(), c.y_shape()}, p);
  ops::conv_backward_data<T>({dy.data(), c.y_shape()}, {w.data(), c.w_shape()},
                             {dx.data(), c.x_shape}, p);
  ops::conv_backward_weights<T>({x.data(), c.x_shape}, {dy.data(), c.y_shape()},
                                {dw.data(), c.w_shape()}, p);
  if (c.bias) ops::conv_backward_bias<T>({dy.data(), c.y_shape()}, db.data());

  std::vector<double> rdx, rdw, rdb;
  auto ry = naive_conv(d.x, c.x_shape, d.w, c.w_shape(), d.b, c.win);
  naive_conv_backward(d.x, c.x_shape, d.w, c.w_shape(), d.dy, c.win, rdx, rdw, rdb);
  EXPECT_LE(max_abs_diff(y, ry), tol);
  EXPECT_LE(max_abs_diff(dx, rdx), tol);
  EXPECT_LE(max_abs_diff(dw, rdw), tol);
  if (c.bias) EXPECT_LE(max_abs_diff(db, rdb), tol);
}

TEST(OpsConv, HandChecked2x2) {
  // x = 1..9 on a 3x3 grid, w = [[1, 0], [0, -1]]: y[i][j] = x[i][j] - x[i+1][j+1].
  std::vector<double> x{1, 2, 3, 4, 5, 6, 7, 8, 9}, w{1, 0, 0, -1}, y(4), b{0.5};
  ops::conv_forward<double>({x.data(), {1, 1, 3, 3}}, {w.data(), {1, 1, 2, 2}}, b.data(),
                            {y.data(), {1, 1, 2, 2}}, {});
  for (double v : y) EXPECT_DOUBLE_EQ(v, -3.5);

  // With padding 1 the corners see one real input each.
  std::vector<double> yp(16);
  ops::conv_forward<double>({x.data(), {1, 1, 3, 3}}, {w.data(), {1, 1, 2, 2}}, nullptr,
                            {yp.data(), {1, 1, 4, 4}}, {{}, {1}, {1}, {}});
  EXPECT_DOUBLE_EQ(yp[0], -1.0); // 0 - x[0][0]
  EXPECT_DOUBLE_EQ(yp[15], 9.0); // x[2][2] - 0
  EXPECT_DOUBLE_EQ(yp[5], -4.0); // x[0][0] - x[1][1]
}

TEST(OpsConv, MatchesNaiveDouble) {
  for (auto const& c : cases()) check_against_naive<double>(c, 1e-12);
}

TEST(OpsConv, MatchesNaiveFloat) {
  for (auto const& c : cases()) check_against_naive<float>(c, 2e-5);
}

// Computes the output piece by piece, each from a separate input block holding exactly the
// piece's footprint (as a rank with halos would), and compares with the whole computation.
// Forward and backward-data sum the same terms in the same order for every position, so they
// match bit for bit; weight and bias gradients summed over pieces differ by rounding only.
TEST(OpsConv, SubBoxesEqualWholeForwardAndBackward) {
  for (auto const& c : cases()) {
    SCOPED_TRACE(c.name);
    data d = make_data(c, 23);
    auto p = conv_params_of(c.win);
    auto ys = c.y_shape();
    auto in = c.in();
    std::vector<index_t> out(ys.begin() + 2, ys.end());
    std::vector<double> y(static_cast<std::size_t>(ops::element_count(ys)));
    ops::conv_forward<double>({d.x.data(), c.x_shape}, {d.w.data(), c.w_shape()},
                              c.bias ? d.b.data() : nullptr, {y.data(), ys}, p);
    std::vector<double> dx(d.x.size()), dw(d.w.size()), db(static_cast<std::size_t>(c.cout));
    ops::conv_backward_data<double>({d.dy.data(), ys}, {d.w.data(), c.w_shape()},
                                    {dx.data(), c.x_shape}, p);
    ops::conv_backward_weights<double>({d.x.data(), c.x_shape}, {d.dy.data(), ys},
                                       {dw.data(), c.w_shape()}, p);
    ops::conv_backward_bias<double>({d.dy.data(), ys}, db.data());

    // Forward and weight gradient over pieces of the output.
    std::vector<std::vector<index_t>> ocuts;
    for (index_t e : out) ocuts.push_back({1, e - 1});
    std::vector<double> y2(y.size(), std::nan("")), dw2(dw.size(), 0.0), db2(db.size(), 0.0);
    for (box const& ob : partition(out, ocuts)) {
      box fp = ops::conv_input_footprint(ob, in, c.win.kernel, p);
      auto xl = extract(d.x, c.x_shape, lo_of(fp), ext_of(fp));
      ops::const_block_ref<double> xb{{xl.data(), cat({c.x_shape[0], c.x_shape[1]}, ext_of(fp))},
                                      lo_of(fp)};
      // y: a separate buffer exactly the size of the piece.
      std::vector<index_t> yls = cat({ys[0], ys[1]}, ext_of(ob));
      std::vector<double> yl(static_cast<std::size_t>(ops::element_count(yls)));
      ops::conv_forward_box<double>(xb, in, {d.w.data(), c.w_shape()},
                                    c.bias ? d.b.data() : nullptr, {{yl.data(), yls}, lo_of(ob)},
                                    ob, p);
      EXPECT_EQ(max_abs_diff(yl, extract(y, ys, lo_of(ob), ext_of(ob))), 0.0);
      // And in place, into the whole y.
      ops::conv_forward_box<double>(xb, in, {d.w.data(), c.w_shape()},
                                    c.bias ? d.b.data() : nullptr, {{y2.data(), ys}}, ob, p);
      auto dyl = extract(d.dy, ys, lo_of(ob), ext_of(ob));
      ops::conv_backward_weights_box<double>(xb, in, {{dyl.data(), yls}, lo_of(ob)},
                                             {dw2.data(), c.w_shape()}, ob, p);
      ops::conv_backward_bias_box<double>({{dyl.data(), yls}, lo_of(ob)}, ob, db2.data());
    }
    EXPECT_EQ(max_abs_diff(y2, y), 0.0);
    EXPECT_LE(max_abs_diff(dw2, dw), 1e-12);
    EXPECT_LE(max_abs_diff(db2, db), 1e-12);

    // Backward-data over pieces of the input, each from a dy block of its output footprint.
    std::vector<std::vector<index_t>> icuts;
    for (index_t e : in) icuts.push_back({2, e - 1});
    std::vector<double> dx2(dx.size(), std::nan(""));
    for (box const& ib : partition(in, icuts)) {
      box fp = ops::conv_output_footprint(ib, in, c.win.kernel, p);
      auto dyl = extract(d.dy, ys, lo_of(fp), ext_of(fp));
      ops::conv_backward_data_box<double>(
          {{dyl.data(), cat({ys[0], ys[1]}, ext_of(fp))}, lo_of(fp)}, in, {d.w.data(), c.w_shape()},
          {{dx2.data(), c.x_shape}}, ib, p);
    }
    EXPECT_EQ(max_abs_diff(dx2, dx), 0.0);
  }
}

// The input lives in a larger buffer whose halo (outside the global input) holds NaN: padding
// must come from the geometry, never from memory. The view is strided (a sub-block).
TEST(OpsConv, HaloedStridedInputNeverReadsPaddingFromMemory) {
  conv_case c = cases()[1];
  data d = make_data(c, 5);
  auto p = conv_params_of(c.win);
  auto ys = c.y_shape();
  std::vector<double> y(static_cast<std::size_t>(ops::element_count(ys)));
  ops::conv_forward<double>({d.x.data(), c.x_shape}, {d.w.data(), c.w_shape()}, d.b.data(),
                            {y.data(), ys}, p);
  index_t const h = 3;
  std::vector<index_t> big{c.x_shape[0], c.x_shape[1], c.x_shape[2] + 2 * h, c.x_shape[3] + 2 * h};
  std::vector<double> buf(static_cast<std::size_t>(ops::element_count(big)), std::nan(""));
  for_each_index(c.x_shape, [&](std::vector<index_t> const& i) {
    buf[flat(big, {i[0], i[1], i[2] + h, i[3] + h})] = d.x[flat(c.x_shape, i)];
  });
  ops::const_tensor_ref<double> whole{buf.data(), big};
  ops::const_block_ref<double> xb{whole, {-h, -h}};
  std::vector<double> y2(y.size());
  ops::conv_forward_box<double>(xb, c.in(), {d.w.data(), c.w_shape()}, d.b.data(),
                                {{y2.data(), ys}}, make_box({0, 0}, {ys[2], ys[3]}), p);
  EXPECT_EQ(max_abs_diff(y2, y), 0.0);

  // The same through sub_box: the owned part only, strides of the big buffer.
  auto owned = ops::sub_box(
      whole, make_box({0, 0, h, h}, {big[0], big[1], h + c.x_shape[2], h + c.x_shape[3]}));
  std::vector<double> y3(y.size());
  ops::conv_forward<double>(owned, {d.w.data(), c.w_shape()}, d.b.data(), {y3.data(), ys}, p);
  EXPECT_LE(max_abs_diff(y3, y), 1e-12);
}

// Central differences of L = sum(y * r) in double.
TEST(OpsConv, GradientsMatchFiniteDifferences) {
  for (int ci : {1, 4}) {
    conv_case c = cases()[static_cast<std::size_t>(ci)];
    SCOPED_TRACE(c.name);
    data d = make_data(c, 41);
    auto p = conv_params_of(c.win);
    auto ys = c.y_shape();
    auto loss = [&](std::vector<double> const& x, std::vector<double> const& w,
                    std::vector<double> const& b) {
      std::vector<double> y(static_cast<std::size_t>(ops::element_count(ys)));
      ops::conv_forward<double>({x.data(), c.x_shape}, {w.data(), c.w_shape()}, b.data(),
                                {y.data(), ys}, p);
      double s = 0;
      for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * d.dy[i];
      return s;
    };
    std::vector<double> dx(d.x.size()), dw(d.w.size()), db(d.b.size());
    ops::conv_backward_data<double>({d.dy.data(), ys}, {d.w.data(), c.w_shape()},
                                    {dx.data(), c.x_shape}, p);
    ops::conv_backward_weights<double>({d.x.data(), c.x_shape}, {d.dy.data(), ys},
                                       {dw.data(), c.w_shape()}, p);
    ops::conv_backward_bias<double>({d.dy.data(), ys}, db.data());
    double const h = 1e-5;
    auto fd = [&](std::vector<double>& v, std::size_t i) {
      double const keep = v[i];
      v[i] = keep + h;
      double up = loss(d.x, d.w, d.b);
      v[i] = keep - h;
      double down = loss(d.x, d.w, d.b);
      v[i] = keep;
      return (up - down) / (2 * h);
    };
    for (std::size_t i = 0; i < d.x.size(); i += 7) EXPECT_NEAR(fd(d.x, i), dx[i], 1e-8);
    for (std::size_t i = 0; i < d.w.size(); i += 5) EXPECT_NEAR(fd(d.w, i), dw[i], 1e-8);
    for (std::size_t i = 0; i < d.b.size(); ++i) EXPECT_NEAR(fd(d.b, i), db[i], 1e-8);
  }
}

TEST(OpsConv, ErrorsNameTheValueAndTheFix) {
  std::vector<double> x(2 * 3 * 6 * 6), w(4 * 3 * 3 * 3), y(2 * 4 * 4 * 4);
  ops::const_tensor_ref<double> xr{x.data(), {2, 3, 6, 6}}, wr{w.data(), {4, 3, 3, 3}};
  ops::tensor_ref<double> yr{y.data(), {2, 4, 4, 4}};
  // Channel mismatch.
  expect_error(
      [&] {
        ops::conv_forward<double>(xr, {w.data(), {4, 2, 3, 3}}, nullptr, yr, {});
      },
      {"3 channels", "[4, 2, 3, 3]", "[Cout, 3, k...]"});
  // Kernel larger than the padded input.
  expect_error(
      [&] {
        ops::conv_forward<double>(xr, {w.data(), {1, 3, 7, 1}}, nullptr, yr, {});
      },
      {"dilated kernel extent 7", "padded input 6"});
  // Non-positive stride and dilation.
  expect_error(
      [&] {
        ops::conv_forward<double>(xr, wr, nullptr, yr, {{0}, {}, {}, {}});
      },
      {"stride", ">= 1"});
  expect_error(
      [&] {
        ops::conv_forward<double>(xr, wr, nullptr, yr, {{}, {}, {}, {-1}});
      },
      {"dilation", ">= 1"});
  expect_error(
      [&] {
        ops::conv_forward<double>(xr, wr, nullptr, yr, {{}, {-1}, {}, {}});
      },
      {"pad_lo", ">= 0"});
  expect_error(
      [&] {
        ops::conv_forward<double>(xr, wr, nullptr, yr, {{1, 1, 1}, {}, {}, {}});
      },
      {"stride", "3 entries for 2 spatial dimensions"});
  // Wrong ranks.
  expect_error(
      [&] {
        ops::conv_forward<double>({x.data(), {6, 6}}, wr, nullptr, yr, {});
      },
      {"rank 2", "NCHW"});
  expect_error(
      [&] {
        ops::conv_forward<double>(xr, {w.data(), {4, 3, 3}}, nullptr, yr, {});
      },
      {"[4, 3, 3]", "[Cout, Cin, k...]"});
  // Output shape inconsistent with the formula: the expected shape is named.
  expect_error(
      [&] {
        ops::conv_forward<double>(xr, wr, nullptr, {y.data(), {2, 4, 5, 5}}, {});
      },
      {"[2, 4, 5, 5]", "expected [2, 4, 4, 4]"});
  expect_error(
      [&] {
        ops::conv_backward_data<double>({y.data(), {2, 4, 3, 4}}, wr, {x.data(), {2, 3, 6, 6}}, {});
      },
      {"expected [2, 4, 4, 4]"});
  // A block that misses part of the footprint, and a box outside the output.
  expect_error(
      [&] {
        ops::conv_forward_box<double>({{x.data(), {2, 3, 3, 6}}, {0, 0}}, {6, 6}, wr, nullptr, {yr},
                                      make_box({0, 0}, {4, 4}), {});
      },
      {"x covers global [0, 3) x [0, 6)", "needs [0, 6) x [0, 6)", "halo"});
  expect_error(
      [&] {
        ops::conv_forward_box<double>({xr}, {6, 6}, wr, nullptr, {yr}, make_box({0, 0}, {5, 4}),
                                      {});
      },
      {"out_box [0, 5) x [0, 4)", "not inside the global output [0, 4) x [0, 4)"});
  // Shape helper.
  EXPECT_EQ(ops::conv_output_extent(7, 3, 2, 1, 1, 1), 4);
  EXPECT_EQ(ops::conv_output_extent(8, 4, 1, 1, 2, 1), 8);
  EXPECT_EQ(ops::conv_output_extent(9, 3, 1, 0, 0, 2), 5);
  expect_error([] { (void)ops::conv_output_extent(2, 5, 1, 1, 1, 1); }, {"kernel extent 5"});
}

} // namespace
