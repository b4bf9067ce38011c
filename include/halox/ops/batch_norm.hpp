#pragma once
/// \file batch_norm.hpp
/// Reference batch normalisation over [N, C, ...] tensors (any rank >= 2), split into steps
/// so that a distributed caller can combine per-rank partial results before normalising.
///
/// Training forward, distributed:
/// ```
/// bn_stats s = bn_partial_stats<T>(local_x);       // per rank
/// /* combine every rank's s with bn_merge_stats (e.g. allgather, or an MPI user op) */
/// bn_moments m = bn_finalize_stats<T>(s, eps, momentum, running_mean, running_var);
/// bn_apply<T>(local_x, m, gamma, beta, local_y);
/// ```
/// Training backward, distributed:
/// ```
/// bn_grad_sums g = bn_backward_partial<T>(local_x, local_dy, m);
/// /* sum every rank's g with bn_merge_grad_sums (plain MPI_SUM on the arrays works) */
/// bn_backward_apply<T>(local_x, local_dy, m, gamma, g, true, local_dx);
/// bn_param_grads<T>(g, dgamma, dbeta);
/// ```
/// Statistics are carried as (count, mean, M2) per channel, M2 being the sum of squared
/// deviations from the mean. Unlike (sum, sum of squares), merging two such triples (Chan et
/// al.) involves no cancellation, so the variance stays accurate when |mean| >> std; each
/// block is itself reduced in two passes (mean, then deviations). All sums run in double.
/// Normalisation uses the biased variance M2 / count; the running variance is updated with the
/// unbiased M2 / (count - 1), as in PyTorch. Instantiated for `float` and `double`.

#include <halox/box.hpp>
#include <halox/ops/tensor_ref.hpp>

#include <vector>

namespace halox::ops {

/// Per-channel partial statistics of a block of values.
struct bn_stats {
  index_t count = 0;        ///< values per channel in the block (N times the spatial volume)
  std::vector<double> mean; ///< per-channel mean
  std::vector<double> m2;   ///< per-channel sum of squared deviations from `mean`
};

/// Normalisation constants per channel: y = (x - mean) * invstd * gamma + beta.
struct bn_moments {
  std::vector<double> mean;   ///< per-channel mean (batch or running)
  std::vector<double> invstd; ///< per-channel 1 / sqrt(var + eps)
};

/// Per-channel partial sums of the backward pass.
struct bn_grad_sums {
  index_t count = 0;               ///< values per channel that contributed
  std::vector<double> sum_dy;      ///< sum of dy (the gradient of beta)
  std::vector<double> sum_dy_xhat; ///< sum of dy * (x - mean) * invstd (the gradient of gamma)
};

/// Settings of the one-call convenience functions.
struct bn_params {
  double eps = 1e-5;     ///< added to the variance before the square root
  double momentum = 0.1; ///< running = (1 - momentum) * running + momentum * batch value
  bool training = true;  ///< batch statistics (true) or running statistics (false)
};

/// (count, mean, M2) of each channel of `x` [N, C, ...].
template <class T> [[nodiscard]] bn_stats bn_partial_stats(const_tensor_ref<T> x);
/// The same into `out`, reusing its storage: allocates nothing once `out` has held as many
/// channels (the `*_into` forms serve layers that run every step).
template <class T> void bn_partial_stats_into(const_tensor_ref<T> x, bn_stats& out);

/// Merges `other` into `into` (same channel count; either may be empty, count 0). Commutative
/// and associative up to rounding, so usable as the combine step of any reduction tree.
void bn_merge_stats(bn_stats& into, bn_stats const& other);

/// Batch moments from the merged statistics (biased variance); when `running_mean` and
/// `running_var` are non-null (length C) updates them with `momentum` and the unbiased
/// variance. Requires count >= 2 (one value per channel has no variance to learn).
template <class T> [[nodiscard]] bn_moments bn_finalize_stats(bn_stats const& total, double eps,
                                                              double momentum, T* running_mean,
                                                              T* running_var);
/// The same into `out`, reusing its storage.
template <class T> void bn_finalize_stats_into(bn_stats const& total, double eps, double momentum,
                                               T* running_mean, T* running_var, bn_moments& out);

/// Inference moments from running statistics (length `channels`).
template <class T> [[nodiscard]] bn_moments
bn_inference_moments(T const* running_mean, T const* running_var, index_t channels, double eps);
/// The same into `out`, reusing its storage.
template <class T> void bn_inference_moments_into(T const* running_mean, T const* running_var,
                                                  index_t channels, double eps, bn_moments& out);

/// y = (x - mean) * invstd * gamma + beta. `gamma` and `beta` may be null (1 and 0); `y` may
/// be `x` itself.
template <class T> void bn_apply(const_tensor_ref<T> x, bn_moments const& m, T const* gamma,
                                 T const* beta, tensor_ref<T> y);

/// Partial backward sums of a block: sum of dy and of dy * xhat per channel.
template <class T> [[nodiscard]] bn_grad_sums
bn_backward_partial(const_tensor_ref<T> x, const_tensor_ref<T> dy, bn_moments const& m);
/// The same into `out`, reusing its storage.
template <class T> void bn_backward_partial_into(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                                 bn_moments const& m, bn_grad_sums& out);

/// Adds `other` into `into` (same channel count; either may be empty).
void bn_merge_grad_sums(bn_grad_sums& into, bn_grad_sums const& other);

/// dx from the merged sums. Training: dx = gamma * invstd * (dy - sum_dy / M - xhat *
/// sum_dy_xhat / M) with M = total.count. Inference (the moments are constants):
/// dx = gamma * invstd * dy, and `total` is not read. `gamma` may be null (1); `dx` may be `dy`.
template <class T>
void bn_backward_apply(const_tensor_ref<T> x, const_tensor_ref<T> dy, bn_moments const& m,
                       T const* gamma, bn_grad_sums const& total, bool training, tensor_ref<T> dx);

/// dgamma = sum_dy_xhat and dbeta = sum_dy (overwritten; either pointer may be null).
template <class T> void bn_param_grads(bn_grad_sums const& total, T* dgamma, T* dbeta);

/// Serial forward in one call; returns the moments used, which the backward pass needs.
/// Training updates the running statistics when they are non-null; inference reads them.
template <class T> bn_moments batch_norm_forward(const_tensor_ref<T> x, T const* gamma,
                                                 T const* beta, T* running_mean, T* running_var,
                                                 tensor_ref<T> y, bn_params const& p);

/// Serial backward in one call: dx, and dgamma / dbeta when non-null (overwritten). `saved`
/// is what `batch_norm_forward` returned.
template <class T>
void batch_norm_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy, bn_moments const& saved,
                         T const* gamma, tensor_ref<T> dx, T* dgamma, T* dbeta, bn_params const& p);

} // namespace halox::ops
