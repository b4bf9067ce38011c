#pragma once
/// \file relu.hpp
/// Reference ReLU, forward and backward, on tensors of any rank and layout.
///
/// Pointwise, so a distributed caller applies it to its owned block with no halo. Instantiated
/// for `float` and `double`.

#include <halox/ops/tensor_ref.hpp>

namespace halox::ops {

/// y = max(x, 0) (NaN propagates). `y` has x's shape and may be `x` itself.
template <class T> void relu_forward(const_tensor_ref<T> x, tensor_ref<T> y);

/// dx = 0 where x <= 0, else dy: the gradient at 0 is 0 and a NaN input passes dy through, as
/// in PyTorch. `x` may equally be the forward output y (same sign pattern). `dx` may be `dy`.
template <class T>
void relu_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy, tensor_ref<T> dx);

} // namespace halox::ops
