#pragma once
// Geometry of deep (communication-avoiding) halos: pure, no MPI. A stencil that reads `radius`
// cells on each side along each dimension is run `depth` steps per halo exchange; the exchange
// fills a halo `depth * radius` wide, and step s (1..depth) recomputes the owned block grown by
// (depth - s) * radius on every side that has a neighbour, so that after the last step the owned
// block is exact. Sides at a non-periodic global boundary do not grow past the domain: the cells
// beyond it are boundary values, read but never computed.

#include <halox/box.hpp>
#include <halox/distribution.hpp>

#include "plan/overlap.hpp" // to_local: global boxes in a rank's buffer coordinates

#include <vector>

namespace halox::detail {

/// Validates a deep-halo request for a tensor of `shape` with per-dimension `options` (one per
/// dimension, or empty) and returns the options with the halo widths set to `depth * radius`.
/// Throws `halox::error` (invalid_argument) naming the bad value and the fix: depth below 1,
/// a radius vector of the wrong length, a negative radius, a halo width that overflows `int`,
/// a halo wider than a non-periodic extent, or options that set halo widths themselves.
[[nodiscard]] std::vector<dim_options> deep_halo_dims(std::vector<index_t> const& shape,
                                                      std::vector<int> const& radius, int depth,
                                                      std::vector<dim_options> options);

/// Region of `rank` that step `step` (0..depth) must compute, in global coordinates: the owned
/// block grown by (depth - step) * radius per side, clipped to [0, extent) on non-periodic
/// dimensions. Step 0 is the region valid right after the exchange; step `depth` is the owned
/// block. For a rank that owns nothing: its (empty) owned box, at every step. `dist` must carry
/// halos of at least depth * radius (as `deep_halo_dims` makes them).
[[nodiscard]] box deep_halo_region(distribution const& dist, int rank,
                                   std::vector<int> const& radius, int depth, int step);

/// Cells computed by `rank` over one cycle of `depth` steps (sum of the step regions' volumes).
[[nodiscard]] index_t deep_halo_cells(distribution const& dist, int rank,
                                      std::vector<int> const& radius, int depth);

} // namespace halox::detail
