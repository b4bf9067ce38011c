#include "plan/overlap.hpp"

namespace halox::detail {

namespace {
// First p in [0, n) for which pred(p) is false, given that pred is true on a prefix.
template <class Pred> int partition_point(int n, Pred pred) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int const mid = lo + (hi - lo) / 2;
    if (pred(mid))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}
} // namespace

part_range overlapping_parts(distribution const& dist, int d, index_t lo, index_t hi) {
  int const n = dist.parts()[d];
  part_range r;
  r.first =
      partition_point(n, [&](int p) { return dist.part_start(d, p) + dist.part_size(d, p) <= lo; });
  r.last = partition_point(n, [&](int p) { return dist.part_start(d, p) < hi; });
  if (r.last < r.first) r.last = r.first;
  return r;
}

box to_local(distribution const& dist, int rank, box const& g) {
  auto const c = dist.coords_of(rank);
  index_t delta[max_dims];
  for (int d = 0; d < dist.ndim(); ++d)
    delta[d] = dist.options(d).halo_lo - dist.part_start(d, c[d]);
  return shifted(g, delta);
}

} // namespace halox::detail
