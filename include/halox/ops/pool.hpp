#pragma once
/// \file pool.hpp
/// Reference max and average pooling, forward and backward, for 1 to 3 spatial dimensions.
///
/// Shapes: x [N, C, in...], y [N, C, out...] with `out` from `pool_output_shape`. Windows may
/// overlap (kernel > stride) and may cover the whole image (global pooling). Max pooling
/// ignores padding and routes the gradient to the first maximum in window order (row-major
/// over the taps), as PyTorch does; a NaN counts as the maximum. Average pooling divides by
/// the window size or by the number of real inputs, per `pool_params::count_include_pad`.
/// Instantiated for `float` and `double`.

#include <halox/box.hpp>
#include <halox/ops/tensor_ref.hpp>
#include <halox/ops/window.hpp>

#include <vector>

namespace halox::ops {

/// y = pool(x) over the whole tensor.
template <class T> void pool_forward(const_tensor_ref<T> x, tensor_ref<T> y, pool_params const& p);

/// Computes the outputs in `out_box` (global output coordinates); `x` must cover
/// `pool_input_footprint(out_box, ...)` and `y` must cover `out_box`.
template <class T> void pool_forward_box(const_block_ref<T> x, dims const& in_extent,
                                         block_ref<T> y, box const& out_box, pool_params const& p);

/// dx = gradient with respect to x over the whole tensor (overwrites dx). Max pooling reads x
/// to find the winners again; average pooling ignores x (it may be an empty view).
template <class T> void pool_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                      tensor_ref<T> dx, pool_params const& p);

/// Computes dx on `in_box` (global input coordinates), overwriting it there.
///
/// Every output whose window touches `in_box` contributes, so `dy` must cover
/// `pool_output_footprint(in_box, ...)`; for max pooling `x` must also cover the input
/// footprint of that output box (the windows are re-evaluated to find their maxima). `x` is
/// ignored for average pooling.
template <class T> void pool_backward_box(const_block_ref<T> x, const_block_ref<T> dy,
                                          dims const& in_extent, block_ref<T> dx, box const& in_box,
                                          pool_params const& p);

} // namespace halox::ops
