#include "test_ops_util.hpp"

#include <halox/error.hpp>
#include <halox/ops/ops.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <type_traits>

namespace {

using namespace ops_test;
namespace ops = halox::ops;

TEST(OpsRelu, ForwardBackwardStridedAndInPlace) {
  std::vector<double> x{-1, 0, 2, std::nan(""), -0.5, 3}, y(6), dy{1, 2, 3, 4, 5, 6}, dx(6);
  ops::relu_forward<double>({x.data(), {1, 1, 2, 3}}, {y.data(), {1, 1, 2, 3}});
  EXPECT_EQ(y[0], 0.0);
  EXPECT_EQ(y[1], 0.0);
  EXPECT_EQ(y[2], 2.0);
  EXPECT_TRUE(std::isnan(y[3]));
  ops::relu_backward<double>({x.data(), {6}}, {dy.data(), {6}}, {dx.data(), {6}});
  // Gradient 0 at x <= 0; a NaN input passes the gradient through (PyTorch's rule).
  EXPECT_EQ(dx, (std::vector<double>{0, 0, 3, 4, 0, 6}));
  // A strided view (every other column) in place.
  std::vector<double> z{-1, -2, 3, -4, 5, -6};
  ops::tensor_ref<double> odd{z.data() + 1, {3}, {2}};
  ops::relu_forward<double>(odd, odd);
  EXPECT_EQ(z, (std::vector<double>{-1, 0, 3, 0, 5, 0}));
  EXPECT_THROW(ops::relu_forward<double>({x.data(), {6}}, {y.data(), {2, 3}}), halox::error);
  EXPECT_THROW(ops::relu_forward<double>({x.data(), {6}, {1, 1}}, {y.data(), {6}}), halox::error);
}

TEST(OpsTensorRef, ViewsAndConversions) {
  std::vector<float> buf(2 * 3 * 4);
  ops::tensor_ref<float> t{buf.data(), {2, 3, 4}};
  EXPECT_EQ(t.strides, (std::vector<index_t>{12, 4, 1}));
  EXPECT_EQ(t.size(), 24);
  ops::const_tensor_ref<float> c = t; // mutable -> read-only
  EXPECT_EQ(c.data, buf.data());
  auto s = ops::sub_box(t, make_box({1, 1, 2}, {2, 3, 4}));
  EXPECT_EQ(s.data, buf.data() + 12 + 4 + 2);
  EXPECT_EQ(s.shape, (std::vector<index_t>{1, 2, 2}));
  EXPECT_EQ(s.strides, t.strides);
  ops::const_block_ref<float> b = ops::block_ref<float>{t, {5, 7}};
  EXPECT_EQ(b.origin, (std::vector<index_t>{5, 7}));
}

// Shapes and strides are held inline: copying a view allocates nothing, they convert to and from
// std::vector, and a rank beyond the limit is an error naming it.
TEST(OpsTensorRef, DimsHoldUpToMaxRankInline) {
  ops::dims d{4, 3, 2};
  static_assert(std::is_trivially_copyable_v<ops::dims>);
  static_assert(std::is_trivially_copyable_v<ops::tensor_ref<float>>);
  std::vector<index_t> const v = d;
  EXPECT_EQ(v, (std::vector<index_t>{4, 3, 2}));
  EXPECT_EQ(ops::dims(v), d);
  EXPECT_NE(ops::dims({4, 3}), d);
  d.push_back(5);
  d.resize(6, 1);
  EXPECT_EQ(d.to_vector(), (std::vector<index_t>{4, 3, 2, 5, 1, 1}));
  EXPECT_EQ(ops::element_count(d), 120);
  EXPECT_EQ(ops::contiguous_strides(d), (ops::dims{30, 10, 5, 1, 1, 1}));
  ops::dims full(ops::dims::capacity, 2);
  try {
    full.push_back(2);
    ADD_FAILURE() << "a ninth dimension was accepted";
  } catch (halox::error const& e) {
    EXPECT_NE(e.message().find("9 dimensions"), std::string::npos) << e.what();
    EXPECT_NE(e.message().find("rank <= 8"), std::string::npos) << e.what();
  }
  EXPECT_THROW((ops::tensor_ref<float>{nullptr, std::vector<index_t>(9, 1)}), halox::error);
}

// Footprints cover every position a window actually reads (input) or every output whose
// window touches the box (output), checked by brute force over random parameters.
TEST(OpsWindow, FootprintsCoverBruteForce) {
  std::mt19937_64 gen(3);
  auto pick = [&](int lo, int hi) {
    return static_cast<index_t>(std::uniform_int_distribution<int>(lo, hi)(gen));
  };
  for (int trial = 0; trial < 300; ++trial) {
    index_t in = pick(1, 12), k = pick(1, 5), s = pick(1, 3), d = pick(1, 3);
    index_t pl = pick(0, 3), ph = pick(0, 3);
    if (d * (k - 1) + 1 > in + pl + ph) continue;
    ops::conv_params p{{s}, {pl}, {ph}, {d}};
    index_t out = ops::conv_output_extent(in, k, s, pl, ph, d);
    index_t o0 = pick(0, static_cast<int>(out - 1)),
            o1 = pick(static_cast<int>(o0 + 1), static_cast<int>(out));
    auto fp = ops::conv_input_footprint(make_box({o0}, {o1}), {in}, {k}, p);
    index_t i0 = pick(0, static_cast<int>(in - 1)),
            i1 = pick(static_cast<int>(i0 + 1), static_cast<int>(in));
    auto ofp = ops::conv_output_footprint(make_box({i0}, {i1}), {in}, {k}, p);
    for (index_t o = 0; o < out; ++o)
      for (index_t j = 0; j < k; ++j) {
        index_t g = o * s - pl + j * d;
        if (g < 0 || g >= in) continue;
        if (o >= o0 && o < o1) EXPECT_TRUE(g >= fp.lo[0] && g < fp.hi[0]);
        if (g >= i0 && g < i1) EXPECT_TRUE(o >= ofp.lo[0] && o < ofp.hi[0]);
      }
    // Tight without dilation gaps or clipping: the footprint is the window span.
    EXPECT_GE(fp.lo[0], 0);
    EXPECT_LE(fp.hi[0], in);
    EXPECT_GE(ofp.lo[0], 0);
    EXPECT_LE(ofp.hi[0], out);
  }
  // A 3x3 "same" convolution needs a one-cell halo.
  auto fp = ops::conv_input_footprint(make_box({2, 2}, {4, 5}), {8, 8}, {3, 3}, {{}, {1}, {1}, {}});
  EXPECT_EQ(fp.lo[0], 1);
  EXPECT_EQ(fp.hi[0], 5);
  EXPECT_EQ(fp.lo[1], 1);
  EXPECT_EQ(fp.hi[1], 6);
}

// Large enough for the kernels to use their OpenMP path; pieces small enough to run serially.
TEST(OpsConv, ParallelPathEqualsSerialPieces) {
  std::vector<index_t> xs{4, 16, 20, 20}, ws{16, 16, 3, 3}, ys{4, 16, 20, 20};
  auto x = random_values(static_cast<std::size_t>(ops::element_count(xs)), 1);
  auto w = random_values(static_cast<std::size_t>(ops::element_count(ws)), 2);
  auto dy = random_values(static_cast<std::size_t>(ops::element_count(ys)), 3);
  ops::conv_params p{{}, {1}, {1}, {}};
  std::vector<double> y(dy.size()), dx(x.size()), dw(w.size());
  ops::conv_forward<double>({x.data(), xs}, {w.data(), ws}, nullptr, {y.data(), ys}, p);
  ops::conv_backward_data<double>({dy.data(), ys}, {w.data(), ws}, {dx.data(), xs}, p);
  ops::conv_backward_weights<double>({x.data(), xs}, {dy.data(), ys}, {dw.data(), ws}, p);
  std::vector<double> y2(y.size()), dx2(dx.size()), dw2(dw.size(), 0.0);
  for (index_t r = 0; r < 20; ++r) {
    auto b = make_box({r, 0}, {r + 1, 20});
    ops::conv_forward_box<double>({{x.data(), xs}}, {20, 20}, {w.data(), ws}, nullptr,
                                  {{y2.data(), ys}}, b, p);
    ops::conv_backward_data_box<double>({{dy.data(), ys}}, {20, 20}, {w.data(), ws},
                                        {{dx2.data(), xs}}, b, p);
    ops::conv_backward_weights_box<double>({{x.data(), xs}}, {20, 20}, {{dy.data(), ys}},
                                           {dw2.data(), ws}, b, p);
  }
  EXPECT_EQ(max_abs_diff(y2, y), 0.0);
  EXPECT_EQ(max_abs_diff(dx2, dx), 0.0);
  EXPECT_LE(max_abs_diff(dw2, dw), 1e-10);
}

} // namespace
