#pragma once
/// \file window_partition.hpp
/// How a sliding window (convolution or pooling) splits over the parts of one block-distributed
/// dimension: which outputs each part computes, which input positions those outputs read, and
/// the halo every part's block needs for that. The distributed operators of halox::ops size
/// their halos with this rule, and so does `halox.torch` (through the Python binding
/// `halox.window_partition`).
///
/// Everything is per dimension: a window acts on each spatial dimension independently and a
/// block distribution is a product of per-dimension partitions. The window rule is that of
/// window.hpp: output `o` reads the inputs `o * stride - pad_lo + j * dilation` for `j` in
/// `[0, kernel)`.

#include <halox/box.hpp>

#include <vector>

namespace halox::ops {

/// A sliding window along one spatial dimension.
struct window_1d {
  index_t in_extent = 1; ///< global input extent, > 0
  index_t kernel = 1;    ///< window taps, > 0
  index_t stride = 1;    ///< step between output positions, > 0
  index_t pad_lo = 0;    ///< padding before the first input position, >= 0
  index_t pad_hi = 0;    ///< padding after the last input position, >= 0
  index_t dilation = 1;  ///< step between taps, > 0
};

/// Which input positions a part's halo must reach.
enum class halo_reach {
  /// The positions the windows read, clipped to the input `[0, in_extent)`: the operator applies
  /// the padding itself (halox::ops's distributed operators).
  footprint,
  /// The positions the windows read, padding included: the padding is stored as halo cells that
  /// the exchange's boundary fill sets (a constant halo, or a periodic one), as `halox.torch`
  /// does.
  span
};

/// One dimension of a windowed operator split over `parts` parts.
struct window_partition_1d {
  index_t out_extent = 0;          ///< global output extent
  std::vector<index_t> out_starts; ///< `parts + 1` output part starts (the last: `out_extent`)
  /// Per part: the first input position its outputs read (as chosen by `halo_reach`); a part
  /// without outputs, or whose outputs read padding only, needs nothing (`need_lo == need_hi`).
  std::vector<index_t> need_lo;
  std::vector<index_t> need_hi; ///< per part: one past the last input position it reads
  /// Cells before every part's owned block: the most any part with cells and needs reaches
  /// below its block (one width for all parts, as a distribution carries one per side).
  index_t halo_lo = 0;
  index_t halo_hi = 0; ///< cells after every part's owned block, likewise
};

/// The split of window `w` over the parts whose input blocks start at `in_starts` (`parts + 1`
/// entries from 0 to `w.in_extent`, non-decreasing). `out_starts` gives the output blocks
/// (`parts + 1` entries from 0 to the output extent, non-decreasing); empty, each output goes to
/// the part that owns its anchor, the window's centre tap `o * stride - pad_lo +
/// (kernel - 1) * dilation / 2` clamped to the input (the rule of halox::ops's distributed
/// operators, which keeps a "same" convolution's output distributed like its input). The halo
/// widths are the smallest uniform ones that give every part with cells the inputs its outputs
/// read (`reach`). Throws `halox::error` (invalid_argument) on a bad window (as
/// `conv_output_extent`) or bad starts.
[[nodiscard]] window_partition_1d window_partition(window_1d const& w,
                                                   std::vector<index_t> const& in_starts,
                                                   std::vector<index_t> const& out_starts = {},
                                                   halo_reach reach = halo_reach::footprint);

} // namespace halox::ops
