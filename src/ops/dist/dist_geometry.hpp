#pragma once
// Geometry of the distributed windowed operators (convolution, pooling): pure arithmetic, no
// MPI, unit-tested in tests/unit/test_dist_ops_geometry.cpp.
//
// Everything is separable: a window acts on each spatial dimension independently, a block
// distribution is a product of per-dimension partitions, and every footprint of a box is the
// product of per-dimension footprints. So the whole geometry is computed one dimension at a
// time on half-open ranges, and boxes are assembled from the ranges at the end.
//
// The formulas are those of the serial kernels (src/ops/window.cpp), which check that each
// buffer they are given covers the footprints they compute; the unit test compares the two.

#include "common/strided_region.hpp"
#include <halox/ops/window.hpp>

#include <functional>
#include <string>
#include <vector>

namespace halox::ops::detail {

/// A half-open range along one dimension (the core's type, so need ranges pass straight to a
/// box_gather_plan); `intersect` of two of them comes with it.
using range1 = index_range;

/// A sliding window along one spatial dimension: output `o` reads the inputs
/// `o * s - pl + j * dil` for `j` in `[0, k)`; positions outside `[0, in)` are padding.
struct win1 {
  index_t in = 1;  ///< global input extent
  index_t out = 1; ///< global output extent
  index_t k = 1;   ///< kernel taps
  index_t s = 1;   ///< stride
  index_t pl = 0;  ///< padding before
  index_t ph = 0;  ///< padding after
  index_t dil = 1; ///< dilation

  /// Distance from the first to the last tap of a window.
  [[nodiscard]] index_t span() const noexcept { return (k - 1) * dil; }
};

/// Per-dimension windows of a convolution of `in_extent` with a kernel of `kernel` taps
/// (validated by the serial geometry; throws `halox::error` on bad parameters).
[[nodiscard]] std::vector<win1> conv_windows(std::vector<index_t> const& in_extent,
                                             std::vector<index_t> const& kernel,
                                             conv_params const& p);
/// Per-dimension windows of pooling over `in_extent`.
[[nodiscard]] std::vector<win1> pool_windows(std::vector<index_t> const& in_extent,
                                             pool_params const& p);

/// Inputs read by the outputs `out` (window spans, clipped to the input; `{0, 0}` when empty).
[[nodiscard]] range1 input_footprint(win1 const& w, range1 out);
/// Outputs whose windows touch the inputs `in` (clipped to the output; `{0, 0}` when empty).
[[nodiscard]] range1 output_footprint(win1 const& w, range1 in);

/// The input position that decides which part computes output `o`: the centre tap
/// `o * s - pl + floor(span / 2)`, clamped to `[0, in)`. Non-decreasing in `o`.
[[nodiscard]] index_t anchor(win1 const& w, index_t o) noexcept;

/// Output part starts (`parts + 1` entries) from the input part starts: part `p` computes the
/// outputs whose anchor it owns. Empty input parts get empty output parts; so may non-empty
/// ones (fewer outputs than parts, or stride larger than the part).
[[nodiscard]] std::vector<index_t> output_starts(win1 const& w,
                                                 std::vector<index_t> const& in_starts);

/// Halo widths along one dimension.
struct halo1 {
  index_t lo = 0; ///< cells before the owned range
  index_t hi = 0; ///< cells after it
};

/// The smallest uniform halo such that every part's allocated range contains the range it needs:
/// the maximum, over the non-empty parts `p`, of how far `need[p]` reaches outside `owned[p]`.
[[nodiscard]] halo1 halo_for(std::vector<range1> const& owned, std::vector<range1> const& need);

/// Outputs of `out` (owned by a part that owns the inputs `in`) whose input footprint lies in
/// `in`: they can be computed before the halo arrives. Contiguous, possibly empty.
[[nodiscard]] range1 forward_interior(win1 const& w, range1 out, range1 in);
/// Inputs of `in` whose output footprint lies in `out` (the outputs the same part owns): their
/// gradient needs no dy from other parts. Contiguous, possibly empty.
[[nodiscard]] range1 backward_interior(win1 const& w, range1 in, range1 out);

/// The range of every part from the `parts + 1` part starts of one dimension.
[[nodiscard]] std::vector<range1> ranges_of(std::vector<index_t> const& starts);

/// A spatial box (nd = ranges.size()) from per-dimension ranges; empty in every dimension (the
/// canonical `[0, 0)`) when any range is empty.
[[nodiscard]] box make_box(std::vector<range1> const& ranges);

/// `outer` minus `inner` (inner inside outer, or empty) as disjoint boxes: for each dimension d
/// in order, the slab below and the slab above `inner` along d, spanning `inner` along the
/// dimensions before d and `outer` along those after. The whole `outer` when `inner` is empty;
/// nothing when `outer` is empty.
[[nodiscard]] std::vector<box> boundary_boxes(box const& outer, box const& inner);

/// `a / b` rounded down and up, for b > 0 and any sign of a.
[[nodiscard]] index_t floor_div(index_t a, index_t b) noexcept;
[[nodiscard]] index_t ceil_div(index_t a, index_t b) noexcept;

/// "[lo, hi) x [lo, hi)" for messages and describe().
[[nodiscard]] std::string box_str(box const& b);

} // namespace halox::ops::detail
