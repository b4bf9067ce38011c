#pragma once
/// \file dist_relu.hpp
/// ReLU on the owned block of a distributed tensor.

#include <halox/ops/dist_common.hpp>
#include <halox/ops/provider.hpp>

#include <memory>

namespace halox::ops {

/// ReLU (as `relu_forward` / `relu_backward`) on a distributed tensor of any rank, for `T` =
/// float or double.
///
/// Pointwise, so purely local: no communication, and halo cells are never read or written.
/// Buffers may have any halo widths and strides (typically the haloed input of the next
/// convolution, which the ReLU then fills in place before that layer's exchange).
template <class T> class dist_relu {
public:
  /// `x` gives the blocks (shape, dtype, grid and part sizes) that buffers must have. Of `o`
  /// only `provider` and `threads` apply. Not collective.
  explicit dist_relu(tensor_desc const& x, dist_options const& o = {});

  /// y = max(x, 0) on the owned block; `y` may be `x`.
  void forward(tensor_view const& x, tensor_view const& y) const;
  /// dx = dy where x > 0, else 0, on the owned block; `x` may be the forward output; `dx` may
  /// be `dy`.
  void backward(tensor_view const& x, tensor_view const& dy, tensor_view const& dx) const;
  /// What this operator's kernels use on this rank (see `memory_use`); ReLU itself keeps
  /// nothing between calls.
  [[nodiscard]] memory_use memory() const;

private:
  tensor_desc desc_;
  std::shared_ptr<local_kernels<T>> kernels_; // shared by copies; calls are not thread-safe
};

} // namespace halox::ops
