#pragma once
// The box-gather planner: pure geometry, no MPI. Every rank of a block distribution receives one
// global box of the tensor (a product of per-dimension ranges chosen by its grid coordinates)
// into a private, contiguous row-major workspace. Boxes may overlap each other and reach into any
// rank's block, and a rank that owns nothing may still need one; that is what separates a
// gather from a halo exchange, whose received cells surround an owned block.
//
// Cost is O(sum of grid extents + peers) per rank: the senders are found by plan/overlap.hpp,
// the receivers by one scan of the need ranges per dimension.

#include "plan/schedule.hpp"

#include "common/strided_region.hpp"
#include <halox/distribution.hpp>

#include <vector>

namespace halox::detail {

/// Per-dimension need ranges: `need[d][p]` is the global range along dimension d that every
/// rank with grid coordinate p along d receives.
using need_ranges = std::vector<std::vector<index_range>>;

/// Throws `halox::error` (invalid_argument) unless `need` has one list per dimension of `dist`,
/// one range per part, and every non-empty range lies inside the global extent.
void check_need(distribution const& dist, need_ranges const& need);

/// The global box `rank` receives: the product of its ranges, or the canonical empty box
/// (`[0, 0)` in every dimension) when any of them is empty.
[[nodiscard]] box needed_box(distribution const& dist, int rank, need_ranges const& need);

/// The gather schedule of `rank`. Slot 0 is the source buffer (local allocated coordinates,
/// `strides`; empty: row-major), slot 1 the workspace: row-major, shaped like `needed_box`
/// (its coordinates are relative to the box's low corner). The cells the rank owns and needs
/// itself are local copies; when `self_copy` is given, only their parts inside those global
/// boxes are copied (a caller that reads the rest in place skips the copy).
[[nodiscard]] schedule plan_box_gather(distribution const& dist, int rank,
                                       std::vector<index_t> const& strides, need_ranges const& need,
                                       std::vector<box> const* self_copy = nullptr);

} // namespace halox::detail
