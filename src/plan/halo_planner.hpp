#pragma once
// The halo planner: pure geometry, no MPI. For the calling rank of a block distribution it
// lists which owned boxes go to which peer's halo, which halo boxes come from which peer, which
// are copied from itself (periodic wrap onto oneself) and which lie outside a non-periodic
// global boundary. Cost is O(sum of grid extents + regions) per rank: no all-gather of domains.

#include "plan/schedule.hpp"

#include <halox/distribution.hpp>

namespace halox::detail {

/// One piece of a rank's allocated range along one dimension.
struct segment {
  index_t local_lo = 0;  ///< first local (allocated) index
  index_t len = 0;       ///< number of cells
  index_t global_lo = 0; ///< first global index after periodic wrapping (if not boundary)
  int owner = -1;        ///< part owning these cells (-1: outside a non-periodic boundary)
  bool owned = false;    ///< this is the rank's own block, not halo
};

/// Segments of part `p`'s allocated range along dimension `d` (empty if the part owns nothing),
/// split at part boundaries and at the periodic wrap, in increasing local order.
[[nodiscard]] std::vector<segment> dim_segments(distribution const& dist, int d, int p);

/// Halo-exchange schedule of `rank` for one tensor (one slot with the given strides; empty
/// strides: row-major). Boundary halo boxes are listed in `fills` when `fill_boundary`.
[[nodiscard]] schedule plan_halo(distribution const& dist, int rank,
                                 std::vector<index_t> const& strides, bool fill_boundary);

} // namespace halox::detail
