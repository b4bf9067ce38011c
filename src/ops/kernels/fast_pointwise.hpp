#pragma once
// Vectorised host kernels for the element-wise and batch-norm passes (float and double): the
// same functions as relu.hpp and batch_norm.hpp, computed one contiguous run at a time
// (`for_each_run`) with SIMD loops, so they run at memory speed on haloed and strided views.
// The fast host providers (oneDNN) use them; the reference provider keeps the plain loops as
// the oracle. Per element, the forward and backward-data formulas are those of the reference
// (same double arithmetic, so ReLU, bn_apply and bn_backward_apply give bitwise the reference's
// results); the sums of the statistics and gradient sums are formed in another order (SIMD
// lanes), which changes only their rounding.

#include <halox/ops/batch_norm.hpp>
#include <halox/ops/tensor_ref.hpp>

namespace halox::ops::detail {

/// As `relu_forward`; `y` may be `x`.
template <class T> void fast_relu_forward(const_tensor_ref<T> x, tensor_ref<T> y);
/// As `relu_backward`; `dx` may be `dy`.
template <class T>
void fast_relu_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy, tensor_ref<T> dx);
/// As `bn_partial_stats`: per channel the mean, then the sum of squared deviations from it.
template <class T> void fast_bn_partial_stats(const_tensor_ref<T> x, bn_stats& s);
/// As `bn_apply`; with `relu`, y = max(bn(x), 0) in the same pass.
template <class T> void fast_bn_apply(const_tensor_ref<T> x, bn_moments const& m, T const* gamma,
                                      T const* beta, tensor_ref<T> y, bool relu);
/// As `bn_backward_partial`.
template <class T> void fast_bn_backward_partial(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                                 bn_moments const& m, bn_grad_sums& s);
/// As `bn_backward_apply`.
template <class T> void fast_bn_backward_apply(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                               bn_moments const& m, T const* gamma,
                                               bn_grad_sums const& total, bool training,
                                               tensor_ref<T> dx);

} // namespace halox::ops::detail
