#pragma once
/// \file conv.hpp
/// Reference convolution (cross-correlation, as in PyTorch), forward and backward, for 1 to 3
/// spatial dimensions, groups = 1.
///
/// Shapes: x [N, Cin, in...], w [Cout, Cin, k...], bias [Cout], y [N, Cout, out...] with `out`
/// from `conv_output_shape`. Instantiated for `float` and `double`; call with the element type
/// spelled out when arguments mix mutable and read-only views, e.g.
/// `conv_forward<float>(x, w, nullptr, y, p)`.
///
/// The `*_box` forms compute part of a result from buffers placed in global coordinates (see
/// `block_ref`): this is what a spatially distributed layer calls on its local block plus
/// halos, first for the interior (while the halo exchange runs) and then for the boundary.
/// Reads outside the global input are zero padding and never touch memory; every other read
/// must fall inside the given buffer, or `halox::error` (invalid_argument) names the missing
/// region. The whole-tensor forms are the same kernels over the whole output.

#include <halox/box.hpp>
#include <halox/ops/tensor_ref.hpp>
#include <halox/ops/window.hpp>

#include <vector>

namespace halox::ops {

/// y = conv(x, w) + bias over the whole tensor. `bias` may be null. Throws when the shapes or
/// parameters are inconsistent, naming the expected shape.
template <class T> void conv_forward(const_tensor_ref<T> x, const_tensor_ref<T> w, T const* bias,
                                     tensor_ref<T> y, conv_params const& p);

/// Computes the outputs in `out_box` (global output coordinates, one entry per spatial dim).
///
/// `in_extent` is the global input extent (spatial dims). Output position `o` reads global
/// input `o * stride - pad_lo + k * dilation`, found in `x` at that minus `x.origin`;
/// `x` must cover `conv_input_footprint(out_box, ...)` and `y` must cover `out_box`. Outputs
/// of `y` outside `out_box` are not touched.
template <class T> void conv_forward_box(const_block_ref<T> x, dims const& in_extent,
                                         const_tensor_ref<T> w, T const* bias, block_ref<T> y,
                                         box const& out_box, conv_params const& p);

/// dx = gradient of the loss with respect to x, given dy, over the whole tensor (overwrites dx).
template <class T> void conv_backward_data(const_tensor_ref<T> dy, const_tensor_ref<T> w,
                                           tensor_ref<T> dx, conv_params const& p);

/// Computes dx on `in_box` (global input coordinates), overwriting it there.
///
/// Each dx position gathers every dy position whose window reads it; `dy` must cover
/// `conv_output_footprint(in_box, ...)` (positions outside the global output need not be
/// present) and `dx` must cover `in_box`.
template <class T> void conv_backward_data_box(const_block_ref<T> dy, dims const& in_extent,
                                               const_tensor_ref<T> w, block_ref<T> dx,
                                               box const& in_box, conv_params const& p);

/// dw = gradient with respect to the weights over the whole tensor (overwrites dw).
template <class T> void conv_backward_weights(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                              tensor_ref<T> dw, conv_params const& p);

/// Adds to dw the weight gradient contributed by the outputs in `out_box` (global output
/// coordinates) of every sample.
///
/// Accumulates, so the contributions of disjoint boxes (interior and boundary, or different
/// ranks before an all-reduce) sum to the whole-tensor gradient. `x` must cover
/// `conv_input_footprint(out_box, ...)` and `dy` must cover `out_box`. Sums run in double.
template <class T> void conv_backward_weights_box(const_block_ref<T> x, dims const& in_extent,
                                                  const_block_ref<T> dy, tensor_ref<T> dw,
                                                  box const& out_box, conv_params const& p);

/// db[c] = sum of dy over batch and space (overwrites db, length Cout).
template <class T> void conv_backward_bias(const_tensor_ref<T> dy, T* db);

/// Adds to db the sum of dy over the batch and the outputs in `out_box` (global output
/// coordinates); `dy` must cover `out_box`. Sums run in double.
template <class T> void conv_backward_bias_box(const_block_ref<T> dy, box const& out_box, T* db);

} // namespace halox::ops
