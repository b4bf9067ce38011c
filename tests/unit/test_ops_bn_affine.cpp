// The per-channel affine forms of the batch-norm passes (src/ops/bn_affine.hpp), which the cudnn
// provider evaluates with cuDNN tensor operations, against the reference loops: forward
// y = scale * x + shift and backward dx = a * dy + b * x + e, in training and inference, with and
// without gamma and beta.
#include "ops/kernels/bn_affine.hpp"

#include <halox/ops/batch_norm.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace {

namespace ops = halox::ops;
using halox::index_t;

std::vector<double> rnd(std::size_t n, unsigned seed, double lo, double hi) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

double max_rel(std::vector<double> const& got, std::vector<double> const& want) {
  double scale = 1, err = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < got.size(); ++i) err = std::max(err, std::abs(got[i] - want[i]));
  return err / scale;
}

struct bn_case {
  std::vector<index_t> shape; // [N, C, spatial]
  bool gamma_beta;
  bool training;
};

class BnAffine : public ::testing::TestWithParam<bn_case> {};

TEST_P(BnAffine, MatchesTheReferenceLoops) {
  bn_case const& c = GetParam();
  index_t const n = c.shape[0], ch = c.shape[1], s = c.shape[2];
  std::size_t const total = static_cast<std::size_t>(n * ch * s);
  // A large mean against a small spread: the case where a sloppy formula loses digits.
  std::vector<double> x = rnd(total, 1, 99.0, 101.0), dy = rnd(total, 2, -1.0, 1.0);
  std::vector<double> gamma, beta;
  if (c.gamma_beta) {
    gamma = rnd(static_cast<std::size_t>(ch), 3, 0.5, 2.0);
    beta = rnd(static_cast<std::size_t>(ch), 4, -1.0, 1.0);
  }
  ops::const_tensor_ref<double> const xr(x.data(), c.shape), dyr(dy.data(), c.shape);
  ops::bn_moments m;
  std::vector<double> rm(static_cast<std::size_t>(ch), 100.0),
      rv(static_cast<std::size_t>(ch), 0.3);
  if (c.training)
    m = ops::bn_finalize_stats<double>(ops::bn_partial_stats<double>(xr), 1e-5, 0.1, nullptr,
                                       nullptr);
  else
    m = ops::bn_inference_moments<double>(rm.data(), rv.data(), ch, 1e-5);
  ops::bn_grad_sums const sums = ops::bn_backward_partial<double>(xr, dyr, m);

  std::vector<double> y_ref(total), dx_ref(total);
  ops::bn_apply<double>(xr, m, gamma.empty() ? nullptr : gamma.data(),
                        beta.empty() ? nullptr : beta.data(), {y_ref.data(), c.shape});
  ops::bn_backward_apply<double>(xr, dyr, m, gamma.empty() ? nullptr : gamma.data(), sums,
                                 c.training, {dx_ref.data(), c.shape});

  auto const f = halox::ops::detail::bn_forward_coefficients(m, gamma, beta);
  auto const b = halox::ops::detail::bn_backward_coefficients(m, gamma, sums, c.training);
  std::vector<double> y(total), dx(total);
  for (index_t i = 0; i < n; ++i)
    for (index_t k = 0; k < ch; ++k)
      for (index_t j = 0; j < s; ++j) {
        std::size_t const o = static_cast<std::size_t>((i * ch + k) * s + j);
        std::size_t const kk = static_cast<std::size_t>(k);
        y[o] = f.scale[kk] * x[o] + f.shift[kk];
        dx[o] = b.a[kk] * dy[o] + b.b[kk] * x[o] + b.e[kk];
      }
  // Forward: exact up to rounding. Backward: b * x + e cancels (x ~ 100, dx ~ 1), which costs
  // about log10(100 / spread) digits; double keeps well over 10.
  EXPECT_LT(max_rel(y, y_ref), 1e-12);
  EXPECT_LT(max_rel(dx, dx_ref), 1e-10);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BnAffine,
                         ::testing::Values(bn_case{{4, 3, 50}, true, true},
                                           bn_case{{2, 5, 17}, false, true},
                                           bn_case{{3, 2, 8}, true, false},
                                           bn_case{{1, 4, 64}, false, false}),
                         [](::testing::TestParamInfo<bn_case> const& info) {
                           // Names from the case itself (ctest lists them stably).
                           bn_case const& c = info.param;
                           return std::to_string(c.shape[0]) + "x" + std::to_string(c.shape[1]) +
                                  "x" + std::to_string(c.shape[2]) +
                                  (c.gamma_beta ? "_affine" : "_plain") +
                                  (c.training ? "_training" : "_inference");
                         });

} // namespace
