#include "test_ops_util.hpp"

#include <halox/error.hpp>
#include <halox/ops/batch_norm.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace {

using namespace ops_test;
namespace ops = halox::ops;

TEST(OpsBatchNorm, HandChecked) {
  // One channel, values 1..4: mean 2.5, biased variance 1.25, unbiased 5/3.
  std::vector<double> x{1, 2, 3, 4}, y(4), rm{0.0}, rv{1.0}, gamma{2.0}, beta{0.5};
  ops::bn_params p;
  auto m = ops::batch_norm_forward<double>({x.data(), {2, 1, 2}}, gamma.data(), beta.data(),
                                           rm.data(), rv.data(), {y.data(), {2, 1, 2}}, p);
  double const is = 1.0 / std::sqrt(1.25 + 1e-5);
  EXPECT_DOUBLE_EQ(m.mean[0], 2.5);
  EXPECT_DOUBLE_EQ(m.invstd[0], is);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], 2.0 * (x[i] - 2.5) * is + 0.5, 1e-14);
  EXPECT_DOUBLE_EQ(rm[0], 0.25);
  EXPECT_DOUBLE_EQ(rv[0], 0.9 + 0.1 * 5.0 / 3.0);

  // Inference reads the running statistics and leaves them alone.
  p.training = false;
  auto mi = ops::batch_norm_forward<double>({x.data(), {2, 1, 2}}, gamma.data(), beta.data(),
                                            rm.data(), rv.data(), {y.data(), {2, 1, 2}}, p);
  EXPECT_DOUBLE_EQ(mi.mean[0], 0.25);
  EXPECT_NEAR(y[0], 2.0 * (1 - 0.25) / std::sqrt(rv[0] + 1e-5) + 0.5, 1e-14);
  EXPECT_DOUBLE_EQ(rm[0], 0.25);
}

// Statistics of pieces merged in any grouping equal those of the whole.
TEST(OpsBatchNorm, PartialStatisticsMerge) {
  std::vector<index_t> shape{4, 3, 5, 6};
  auto x = random_values(static_cast<std::size_t>(ops::element_count(shape)), 1, -3, 5);
  ops::const_tensor_ref<double> whole{x.data(), shape};
  auto all = ops::bn_partial_stats(whole);
  // Pieces along the batch and along a spatial dimension, merged in a scrambled order.
  std::vector<ops::bn_stats> parts;
  for (index_t n0 : {0, 1, 3})
    for (index_t w0 : {0, 2}) {
      index_t n1 = n0 == 0 ? 1 : (n0 == 1 ? 3 : 4), w1 = w0 == 0 ? 2 : 6;
      parts.push_back(
          ops::bn_partial_stats(ops::sub_box(whole, make_box({n0, 0, 0, w0}, {n1, 3, 5, w1}))));
    }
  parts.push_back({}); // an empty rank
  ops::bn_stats left, right;
  for (std::size_t i = 0; i < parts.size(); ++i)
    ops::bn_merge_stats(i % 2 ? left : right, parts[i]);
  ops::bn_merge_stats(right, left);
  ASSERT_EQ(right.count, all.count);
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(right.mean[c], all.mean[c], 1e-13);
    EXPECT_NEAR(right.m2[c], all.m2[c], 1e-11);
  }
}

// The *_into forms give the values of the returning forms in structures that held other data
// (another channel count), reusing their storage.
TEST(OpsBatchNorm, IntoFormsOverwriteReusedStructures) {
  std::vector<index_t> shape{3, 4, 5};
  auto const n = static_cast<std::size_t>(ops::element_count(shape));
  auto x = random_values(n, 2, -2, 3), dy = random_values(n, 3, -1, 1);
  ops::const_tensor_ref<double> xr{x.data(), shape}, dyr{dy.data(), shape};
  std::vector<double> rm1(4, 0.5), rv1(4, 2.0), rm2 = rm1, rv2 = rv1;

  ops::bn_stats s{99, std::vector<double>(9, 7.0), std::vector<double>(2, 7.0)};
  ops::bn_partial_stats_into<double>(xr, s);
  ops::bn_stats const want = ops::bn_partial_stats<double>(xr);
  EXPECT_EQ(s.count, want.count);
  EXPECT_EQ(s.mean, want.mean);
  EXPECT_EQ(s.m2, want.m2);

  ops::bn_moments m{std::vector<double>(1, 3.0), std::vector<double>(12, 3.0)};
  ops::bn_finalize_stats_into<double>(s, 1e-5, 0.1, rm1.data(), rv1.data(), m);
  ops::bn_moments const mw =
      ops::bn_finalize_stats<double>(want, 1e-5, 0.1, rm2.data(), rv2.data());
  EXPECT_EQ(m.mean, mw.mean);
  EXPECT_EQ(m.invstd, mw.invstd);
  EXPECT_EQ(rm1, rm2);
  EXPECT_EQ(rv1, rv2);

  ops::bn_moments im{std::vector<double>(6, 1.0), {}};
  ops::bn_inference_moments_into<double>(rm1.data(), rv1.data(), 4, 1e-5, im);
  ops::bn_moments const iw = ops::bn_inference_moments<double>(rm1.data(), rv1.data(), 4, 1e-5);
  EXPECT_EQ(im.mean, iw.mean);
  EXPECT_EQ(im.invstd, iw.invstd);

  ops::bn_grad_sums g{5, std::vector<double>(2, 1.0), std::vector<double>(8, 1.0)};
  ops::bn_backward_partial_into<double>(xr, dyr, m, g);
  ops::bn_grad_sums const gw = ops::bn_backward_partial<double>(xr, dyr, m);
  EXPECT_EQ(g.count, gw.count);
  EXPECT_EQ(g.sum_dy, gw.sum_dy);
  EXPECT_EQ(g.sum_dy_xhat, gw.sum_dy_xhat);
}

// A large common offset: (count, mean, M2) keeps the variance where sum/sum-of-squares fails.
TEST(OpsBatchNorm, MergedVarianceIsStableUnderLargeOffsets) {
  std::vector<index_t> shape{8, 1, 64};
  auto x = random_values(static_cast<std::size_t>(ops::element_count(shape)), 2);
  for (auto& v : x) v += 1e9;
  ops::const_tensor_ref<double> whole{x.data(), shape};
  ops::bn_stats s;
  for (index_t n = 0; n < 8; ++n)
    ops::bn_merge_stats(
        s, ops::bn_partial_stats(ops::sub_box(whole, make_box({n, 0, 0}, {n + 1, 1, 64}))));
  double mean = 0, m2 = 0;
  for (double v : x) mean += (v - 1e9);
  mean /= static_cast<double>(x.size());
  for (double v : x) m2 += ((v - 1e9) - mean) * ((v - 1e9) - mean);
  EXPECT_NEAR(s.m2[0] / m2, 1.0, 1e-6);
}

// The distributed recipe (partials, merge, finalize, apply; backward partials, merge, apply) on
// two halves of the tensor equals the one-call serial functions.
TEST(OpsBatchNorm, SplitRecipeEqualsSerial) {
  std::vector<index_t> shape{2, 3, 4, 6};
  auto x = random_values(static_cast<std::size_t>(ops::element_count(shape)), 3);
  auto dy = random_values(x.size(), 4);
  auto gamma = random_values(3, 5, 0.5, 1.5), beta = random_values(3, 6);
  std::vector<double> rm(3, 0.0), rv(3, 1.0), rm2 = rm, rv2 = rv;
  std::vector<double> y(x.size()), dx(x.size()), dg(3), dbt(3);
  ops::bn_params p;
  auto m = ops::batch_norm_forward<double>({x.data(), shape}, gamma.data(), beta.data(), rm.data(),
                                           rv.data(), {y.data(), shape}, p);
  ops::batch_norm_backward<double>({x.data(), shape}, {dy.data(), shape}, m, gamma.data(),
                                   {dx.data(), shape}, dg.data(), dbt.data(), p);

  ops::const_tensor_ref<double> xw{x.data(), shape}, dyw{dy.data(), shape};
  std::vector<double> y2(x.size()), dx2(x.size()), dg2(3), dbt2(3);
  ops::tensor_ref<double> yw{y2.data(), shape}, dxw{dx2.data(), shape};
  halox::box halves[2] = {make_box({0, 0, 0, 0}, {2, 3, 4, 2}),
                          make_box({0, 0, 0, 2}, {2, 3, 4, 6})};
  ops::bn_stats s;
  for (auto const& h : halves) ops::bn_merge_stats(s, ops::bn_partial_stats(ops::sub_box(xw, h)));
  auto m2 = ops::bn_finalize_stats<double>(s, p.eps, p.momentum, rm2.data(), rv2.data());
  for (auto const& h : halves)
    ops::bn_apply<double>(ops::sub_box(xw, h), m2, gamma.data(), beta.data(), ops::sub_box(yw, h));
  ops::bn_grad_sums g;
  for (auto const& h : halves)
    ops::bn_merge_grad_sums(
        g, ops::bn_backward_partial(ops::sub_box(xw, h), ops::sub_box(dyw, h), m2));
  for (auto const& h : halves)
    ops::bn_backward_apply<double>(ops::sub_box(xw, h), ops::sub_box(dyw, h), m2, gamma.data(), g,
                                   true, ops::sub_box(dxw, h));
  ops::bn_param_grads<double>(g, dg2.data(), dbt2.data());
  EXPECT_LE(max_abs_diff(y2, y), 1e-13);
  EXPECT_LE(max_abs_diff(dx2, dx), 1e-13);
  EXPECT_LE(max_abs_diff(dg2, dg), 1e-12);
  EXPECT_LE(max_abs_diff(dbt2, dbt), 1e-12);
  EXPECT_LE(max_abs_diff(rm2, rm), 1e-15);
  EXPECT_LE(max_abs_diff(rv2, rv), 1e-15);
}

// Central differences of L = sum(y * r), training (batch statistics depend on x) and inference.
TEST(OpsBatchNorm, GradientsMatchFiniteDifferences) {
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "inference");
    std::vector<index_t> shape{3, 2, 3, 4};
    auto x = random_values(static_cast<std::size_t>(ops::element_count(shape)), 7);
    auto r = random_values(x.size(), 8);
    auto gamma = random_values(2, 9, 0.5, 1.5), beta = random_values(2, 10);
    std::vector<double> rm{0.1, -0.2}, rv{0.8, 1.3};
    ops::bn_params p;
    p.training = training;
    auto loss = [&] {
      std::vector<double> y(x.size()), rm_copy = rm, rv_copy = rv;
      (void)ops::batch_norm_forward<double>({x.data(), shape}, gamma.data(), beta.data(),
                                            rm_copy.data(), rv_copy.data(), {y.data(), shape}, p);
      double s = 0;
      for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * r[i];
      return s;
    };
    std::vector<double> y(x.size()), dx(x.size()), dg(2), dbt(2), rm_copy = rm, rv_copy = rv;
    auto m = ops::batch_norm_forward<double>({x.data(), shape}, gamma.data(), beta.data(),
                                             rm_copy.data(), rv_copy.data(), {y.data(), shape}, p);
    ops::batch_norm_backward<double>({x.data(), shape}, {r.data(), shape}, m, gamma.data(),
                                     {dx.data(), shape}, dg.data(), dbt.data(), p);
    double const h = 1e-6;
    auto fd = [&](std::vector<double>& v, std::size_t i) {
      double keep = v[i];
      v[i] = keep + h;
      double up = loss();
      v[i] = keep - h;
      double down = loss();
      v[i] = keep;
      return (up - down) / (2 * h);
    };
    for (std::size_t i = 0; i < x.size(); i += 3) EXPECT_NEAR(fd(x, i), dx[i], 1e-7) << i;
    for (std::size_t c = 0; c < 2; ++c) {
      EXPECT_NEAR(fd(gamma, c), dg[c], 1e-7);
      EXPECT_NEAR(fd(beta, c), dbt[c], 1e-7);
    }
  }
}

TEST(OpsBatchNorm, FloatAgreesWithDouble) {
  std::vector<index_t> shape{4, 3, 5, 5};
  auto xd = random_values(static_cast<std::size_t>(ops::element_count(shape)), 11);
  auto x = as<float>(xd);
  std::vector<float> y(x.size()), rm(3, 0.f), rv(3, 1.f);
  std::vector<double> yd(x.size()), rmd(3, 0.0), rvd(3, 1.0);
  std::vector<double> xr(x.begin(), x.end());
  ops::bn_params p;
  (void)ops::batch_norm_forward<float>({x.data(), shape}, nullptr, nullptr, rm.data(), rv.data(),
                                       {y.data(), shape}, p);
  (void)ops::batch_norm_forward<double>({xr.data(), shape}, nullptr, nullptr, rmd.data(),
                                        rvd.data(), {yd.data(), shape}, p);
  EXPECT_LE(max_abs_diff(y, yd), 1e-6);
  EXPECT_LE(max_abs_diff(rv, rvd), 1e-7);
}

TEST(OpsBatchNorm, Errors) {
  std::vector<double> x(6), y(6);
  ops::bn_params p;
  expect_error(
      [&] {
        (void)ops::batch_norm_forward<double>({x.data(), {1, 6}}, nullptr, nullptr, nullptr,
                                              nullptr, {y.data(), {1, 6}}, p);
      },
      {"1 value(s) per channel", "at least 2"});
  expect_error(
      [&] {
        (void)ops::batch_norm_forward<double>({x.data(), {6}}, nullptr, nullptr, nullptr, nullptr,
                                              {y.data(), {6}}, p);
      },
      {"[N, C, ...]"});
  expect_error(
      [&] {
        (void)ops::batch_norm_forward<double>({x.data(), {3, 2}}, nullptr, nullptr, nullptr,
                                              nullptr, {y.data(), {2, 3}}, p);
      },
      {"[2, 3]", "[3, 2]", "must match"});
  ops::bn_moments m{{0.0}, {1.0}};
  expect_error(
      [&] {
        ops::bn_apply<double>({x.data(), {3, 2}}, m, nullptr, nullptr, {y.data(), {3, 2}});
      },
      {"2 channels"});
  p.training = false;
  expect_error(
      [&] {
        (void)ops::batch_norm_forward<double>({x.data(), {3, 2}}, nullptr, nullptr, nullptr,
                                              nullptr, {y.data(), {3, 2}}, p);
      },
      {"running_mean and running_var must be non-null"});
}

} // namespace
