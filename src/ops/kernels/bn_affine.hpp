#pragma once
// The batch-norm passes as per-channel affine maps, for providers that run them as tensor
// operations rather than loops (cuDNN: a multiply by a [1, C, 1, ...] operand, then an add):
//
//   forward        y  = scale * x + shift
//   backward-data  dx = a * dy + b * x + e
//
// The coefficients are computed here in double from the moments and the merged gradient sums, so
// that their algebra is unit-tested on the host against the reference loops (batch_norm.cpp).
// Both implementations validate their arguments with the same checks, declared here.

#include <halox/ops/batch_norm.hpp>

#include <cstddef>
#include <vector>

namespace halox::ops::detail {

/// Throws unless `m` holds `c` means and inverse deviations (`op` names the caller).
void require_moments(char const* op, bn_moments const& m, index_t c);
/// Throws unless `total` holds sums for `c` channels and a positive count.
void require_grad_sums(char const* op, bn_grad_sums const& total, index_t c);

/// Coefficients of y = scale * x + shift per channel. `gamma`/`beta` empty mean 1 and 0.
struct bn_forward_affine {
  std::vector<double> scale, shift;
};

inline bn_forward_affine bn_forward_coefficients(bn_moments const& m,
                                                 std::vector<double> const& gamma,
                                                 std::vector<double> const& beta) {
  std::size_t const c = m.mean.size();
  bn_forward_affine f;
  f.scale.resize(c);
  f.shift.resize(c);
  for (std::size_t i = 0; i < c; ++i) {
    double const k = m.invstd[i] * (gamma.empty() ? 1.0 : gamma[i]);
    f.scale[i] = k;
    f.shift[i] = (beta.empty() ? 0.0 : beta[i]) - m.mean[i] * k;
  }
  return f;
}

/// Coefficients of dx = a * dy + b * x + e per channel. Training:
/// dx = k (dy - mean(dy) - xhat mean(dy xhat)), k = gamma invstd, xhat = (x - mean) invstd, so
/// a = k, b = -k invstd mean(dy xhat), e = -k mean(dy) - b mean. Inference: dx = k dy (b = e = 0).
struct bn_backward_affine {
  std::vector<double> a, b, e;
};

inline bn_backward_affine bn_backward_coefficients(bn_moments const& m,
                                                   std::vector<double> const& gamma,
                                                   bn_grad_sums const& total, bool training) {
  std::size_t const c = m.mean.size();
  bn_backward_affine r;
  r.a.resize(c);
  r.b.assign(c, 0.0);
  r.e.assign(c, 0.0);
  for (std::size_t i = 0; i < c; ++i) {
    double const k = m.invstd[i] * (gamma.empty() ? 1.0 : gamma[i]);
    r.a[i] = k;
    if (!training) continue;
    double const n = static_cast<double>(total.count);
    double const mdy = total.sum_dy[i] / n, mdyx = total.sum_dy_xhat[i] / n;
    r.b[i] = -k * m.invstd[i] * mdyx;
    r.e[i] = -k * mdy - r.b[i] * m.mean[i];
  }
  return r;
}

} // namespace halox::ops::detail
