#pragma once
/// \file window.hpp
/// Sliding-window geometry shared by convolution and pooling: parameters, output shapes, and
/// the footprints that tell a distributed caller which halo a sub-box of work needs.
///
/// Along one spatial dimension, output position `o` reads input positions
/// `o * stride - pad_lo + k * dilation` for `k` in `[0, kernel)`. Positions outside
/// `[0, in_extent)` are padding. The output extent is
/// `(in + pad_lo + pad_hi - dilation * (kernel - 1) - 1) / stride + 1` (floor division), i.e.
/// PyTorch's rule with `ceil_mode=False`.

#include <halox/box.hpp>
#include <halox/ops/dims.hpp>

#include <vector>

namespace halox::ops {

/// Convolution parameters, one entry per spatial dimension.
///
/// Each vector may be empty (the default: stride 1, padding 0, dilation 1), hold one value
/// (used for every spatial dimension), or hold one value per spatial dimension.
struct conv_params {
  std::vector<index_t> stride;   ///< step between output positions, > 0
  std::vector<index_t> pad_lo;   ///< zero padding before the first input position, >= 0
  std::vector<index_t> pad_hi;   ///< zero padding after the last input position, >= 0
  std::vector<index_t> dilation; ///< step between kernel taps, > 0
};

/// Pooling flavour.
enum class pool_kind {
  max,    ///< maximum over the window; padding never wins
  average ///< mean over the window, divisor set by `pool_params::count_include_pad`
};

/// Pooling parameters; vectors follow the same empty / one / per-dimension rule as
/// `conv_params`, except that `kernel` is required and an empty `stride` means "equal to
/// kernel" (PyTorch's default).
struct pool_params {
  pool_kind kind = pool_kind::max; ///< max or average
  std::vector<index_t> kernel;     ///< window size, > 0 (required)
  std::vector<index_t> stride;     ///< step between windows; empty: the kernel size
  std::vector<index_t> pad_lo;     ///< padding before the first input position, >= 0
  std::vector<index_t> pad_hi;     ///< padding after the last input position, >= 0
  std::vector<index_t> dilation;   ///< step between window taps, > 0
  /// Average pooling only: divide by the full window size including padded positions (true,
  /// PyTorch's default, chosen so that models port unchanged) or by the number of real input
  /// positions in the window (false).
  bool count_include_pad = true;
};

/// Output extent along one dimension; throws `halox::error` (invalid_argument) when a
/// parameter is out of range or the dilated kernel is larger than the padded input.
[[nodiscard]] index_t conv_output_extent(index_t in, index_t kernel, index_t stride, index_t pad_lo,
                                         index_t pad_hi, index_t dilation);

/// Output shape [N, Cout, out...] of a convolution of `x_shape` [N, Cin, in...] with weights
/// `w_shape` [Cout, Cin, k...]; checks ranks, channels and parameters.
[[nodiscard]] std::vector<index_t> conv_output_shape(dims const& x_shape, dims const& w_shape,
                                                     conv_params const& p);

/// Output shape [N, C, out...] of pooling `x_shape` [N, C, in...]; checks ranks and parameters.
[[nodiscard]] std::vector<index_t> pool_output_shape(dims const& x_shape, pool_params const& p);

/// Global input box (spatial dims, clipped to `[0, in_extent)`) that a convolution reads to
/// compute the output box `out_box`: the halo a distributed forward needs. It is the span of
/// the windows (taps skipped by dilation or stride inside it are included); when the outputs
/// read padding only it is empty, returned as `[0, 0)` in every dimension.
[[nodiscard]] box conv_input_footprint(box const& out_box, dims const& in_extent,
                                       dims const& kernel, conv_params const& p);

/// The input positions the windows of `out_box` read, padding included: `conv_input_footprint`
/// before clipping to `[0, in_extent)`, so `lo` is negative and `hi` beyond the extent where
/// windows reach into padding. A caller that stores padding as halo cells (a halo exchange with
/// a constant boundary fill, as `halox.torch` does) sizes its halos from it. An empty `out_box`
/// gives `[0, 0)` in every dimension.
[[nodiscard]] box conv_input_span(box const& out_box, dims const& in_extent, dims const& kernel,
                                  conv_params const& p);

/// Global output box (clipped to the output extent) of every output position whose window
/// touches the input box `in_box`: the part of dy that backward-data needs for `in_box`.
/// Empty results are `[0, 0)` in every dimension.
[[nodiscard]] box conv_output_footprint(box const& in_box, dims const& in_extent,
                                        dims const& kernel, conv_params const& p);

/// As `conv_input_footprint`, for pooling windows.
[[nodiscard]] box pool_input_footprint(box const& out_box, dims const& in_extent,
                                       pool_params const& p);

/// As `conv_input_span`, for pooling windows.
[[nodiscard]] box pool_input_span(box const& out_box, dims const& in_extent, pool_params const& p);

/// As `conv_output_footprint`, for pooling windows.
[[nodiscard]] box pool_output_footprint(box const& in_box, dims const& in_extent,
                                        pool_params const& p);

} // namespace halox::ops
