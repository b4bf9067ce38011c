#pragma once
// Which blocks of a block distribution meet a global box: the search every planner that moves
// owned cells needs (redistribution, box gather). Pure geometry, no MPI.
//
// A block distribution is a product of per-dimension partitions, so the blocks meeting a box
// are the product of the parts meeting each of its ranges: found per dimension by binary search
// and visited with one odometer, O(log parts + blocks visited).

#include "common/strided_region.hpp"
#include <halox/distribution.hpp>

#include <algorithm>
#include <vector>

namespace halox::detail {

/// Half-open range `[first, last)` of parts along one dimension.
struct part_range {
  int first = 0;
  int last = 0;
};

/// Parts of `dist` along `d` whose blocks may intersect the global range `[lo, hi)`: every part
/// in the range starts before `hi` and ends after `lo` or is empty. Binary search: O(log parts).
[[nodiscard]] part_range overlapping_parts(distribution const& dist, int d, index_t lo, index_t hi);

/// Visits the product of per-dimension part lists in lexicographic order (dimension 0
/// outermost) as f(coords). Nothing when any list is empty.
template <class F> void for_each_part_product(std::vector<std::vector<int>> const& parts, F&& f) {
  int const nd = static_cast<int>(parts.size());
  for (auto const& p : parts)
    if (p.empty()) return;
  std::vector<std::size_t> i(static_cast<std::size_t>(nd), 0);
  coords_t c(static_cast<std::size_t>(nd));
  while (true) {
    for (int d = 0; d < nd; ++d) c[d] = parts[d][i[d]];
    f(static_cast<coords_t const&>(c));
    int d = nd - 1;
    while (d >= 0 && ++i[d] == parts[d].size()) i[d--] = 0;
    if (d < 0) return;
  }
}

/// Visits every non-empty block of `dist` that intersects `b` (a global box), in lexicographic
/// order of grid coordinates (dimension 0 outermost), as f(grid rank, global intersection box).
template <class F> void for_each_overlap(distribution const& dist, box const& b, F&& f) {
  int const nd = dist.ndim();
  std::vector<std::vector<int>> parts(static_cast<std::size_t>(nd));
  for (int d = 0; d < nd; ++d) {
    part_range const r = overlapping_parts(dist, d, b.lo[d], b.hi[d]);
    for (int p = r.first; p < r.last; ++p) parts[d].push_back(p);
  }
  for_each_part_product(parts, [&](coords_t const& c) {
    box g;
    g.nd = nd;
    for (int d = 0; d < nd; ++d) {
      index_t const s = dist.part_start(d, c[d]);
      g.lo[d] = std::max(b.lo[d], s);
      g.hi[d] = std::min(b.hi[d], s + dist.part_size(d, c[d]));
    }
    if (!g.empty()) f(dist.rank_of(c), g); // empty parts inside the range own nothing
  });
}

/// Global box `g` in the local allocated coordinates of `rank`'s buffer on `dist`.
[[nodiscard]] box to_local(distribution const& dist, int rank, box const& g);

} // namespace halox::detail
