#include "plan/halo_planner.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <map>

namespace halox::detail {

namespace {
index_t wrap(index_t g, index_t n) {
  index_t r = g % n;
  return r < 0 ? r + n : r;
}

// Calls f(choice) for every combination of one entry per dimension from `lists`, in
// lexicographic order (dimension 0 outermost). Both sides of an exchange enumerate their
// regions this way, which is what makes the per-peer region order agree without talking.
template <class T, class F>
void for_each_combination(std::vector<std::vector<T>> const& lists, F&& f) {
  int const nd = static_cast<int>(lists.size());
  for (auto const& l : lists)
    if (l.empty()) return;
  std::vector<std::size_t> idx(nd, 0);
  std::vector<T const*> choice(nd);
  while (true) {
    for (int d = 0; d < nd; ++d) choice[d] = &lists[d][idx[d]];
    f(choice);
    int d = nd - 1;
    while (d >= 0 && ++idx[d] == lists[d].size()) {
      idx[d] = 0;
      --d;
    }
    if (d < 0) return;
  }
}

// A segment of a peer's allocated range that this rank owns, tagged with the peer's part.
struct peer_segment {
  int part;
  segment seg;
};
} // namespace

std::vector<segment> dim_segments(distribution const& dist, int d, int p) {
  std::vector<segment> out;
  index_t const n = dist.shape()[d];
  index_t const s = dist.part_start(d, p);
  index_t const e = s + dist.part_size(d, p);
  if (e == s) return out;
  auto const& o = dist.options(d);
  index_t const alloc_lo = s - o.halo_lo;
  index_t const alloc_hi = e + o.halo_hi;
  index_t g = alloc_lo;
  while (g < alloc_hi) {
    segment seg;
    seg.local_lo = g - alloc_lo;
    if (g >= s && g < e) {
      seg.len = e - g;
      seg.global_lo = g;
      seg.owner = p;
      seg.owned = true;
    } else {
      // Halo: stop at the owned block (for the low side) or the allocation end.
      index_t const limit = g < s ? s : alloc_hi;
      if (!o.periodic && (g < 0 || g >= n)) {
        seg.len = (g < 0 ? std::min<index_t>(0, limit) : limit) - g;
        seg.global_lo = g;
        seg.owner = -1;
      } else {
        index_t const w = wrap(g, n);
        int const q = dist.part_of(d, w);
        index_t const part_end = dist.part_start(d, q) + dist.part_size(d, q);
        seg.len = std::min(part_end - w, limit - g);
        seg.global_lo = w;
        seg.owner = q;
      }
    }
    out.push_back(seg);
    g += seg.len;
  }
  return out;
}

schedule plan_halo(distribution const& dist, int rank, std::vector<index_t> const& strides_in,
                   bool fill_boundary) {
  int const nd = dist.ndim();
  schedule sch;
  slot_layout slot;
  slot.type = dist.type();
  slot.elem_size = size_of(dist.type());
  auto const shape = dist.local_shape(rank);
  slot.strides = strides_in.empty() ? dist.default_strides(rank) : strides_in;
  slot.elements = required_elements(shape, slot.strides);
  sch.slots.push_back(slot);
  if (dist.empty(rank)) return sch;

  auto const me = dist.coords_of(rank);
  auto local_box = [&](std::vector<segment const*> const& segs) {
    box b;
    b.nd = nd;
    for (int d = 0; d < nd; ++d) {
      b.lo[d] = segs[d]->local_lo;
      b.hi[d] = segs[d]->local_lo + segs[d]->len;
    }
    return b;
  };
  // Box of global cells `segs` inside the owner's (or my) allocation whose coords are `parts`.
  auto owner_local_box = [&](std::vector<segment const*> const& segs, coords_t const& parts) {
    box b;
    b.nd = nd;
    for (int d = 0; d < nd; ++d) {
      index_t const origin = dist.part_start(d, parts[d]) - dist.options(d).halo_lo;
      b.lo[d] = segs[d]->global_lo - origin;
      b.hi[d] = b.lo[d] + segs[d]->len;
    }
    return b;
  };

  // Receives, self copies and boundary fills: walk my own allocated box.
  std::vector<std::vector<segment>> mine(nd);
  for (int d = 0; d < nd; ++d) mine[d] = dim_segments(dist, d, me[d]);
  std::map<int, message> recvs;
  for_each_combination(mine, [&](std::vector<segment const*> const& segs) {
    bool all_owned = true, boundary = false;
    coords_t owner(nd);
    for (int d = 0; d < nd; ++d) {
      all_owned = all_owned && segs[d]->owned;
      boundary = boundary || segs[d]->owner < 0;
      owner[d] = segs[d]->owner;
    }
    if (all_owned) return;
    box const dst = local_box(segs);
    if (boundary) {
      if (fill_boundary) sch.fills.push_back({0, dst});
      return;
    }
    int const peer = dist.rank_of(owner);
    if (peer == rank) {
      sch.copies.push_back({{0, owner_local_box(segs, owner)}, {0, dst}});
    } else {
      auto& m = recvs[peer];
      m.peer = peer;
      m.regions.push_back({0, dst});
    }
  });

  // Sends: for each dimension, the pieces of every part's allocated range that I own. Only the
  // parts whose halo reaches into my block contribute; the product over dimensions is formed
  // from those alone.
  std::vector<std::vector<peer_segment>> theirs(nd);
  for (int d = 0; d < nd; ++d) {
    int const parts = dist.parts()[d];
    for (int q = 0; q < parts; ++q)
      for (auto const& seg : dim_segments(dist, d, q))
        if (seg.owner == me[d]) theirs[d].push_back({q, seg});
  }
  std::map<int, message> sends;
  for_each_combination(theirs, [&](std::vector<peer_segment const*> const& ps) {
    bool all_owned = true;
    coords_t peer_coords(nd);
    std::vector<segment const*> segs(nd);
    for (int d = 0; d < nd; ++d) {
      all_owned = all_owned && ps[d]->seg.owned;
      peer_coords[d] = ps[d]->part;
      segs[d] = &ps[d]->seg;
    }
    if (all_owned) return; // the peer's own block: that is me, nothing to send
    int const peer = dist.rank_of(peer_coords);
    if (peer == rank) return; // self wrap: handled as a local copy on the receive side
    auto& m = sends[peer];
    m.peer = peer;
    m.regions.push_back({0, owner_local_box(segs, me)});
  });

  for (auto& [p, m] : sends) sch.sends.push_back(std::move(m));
  for (auto& [p, m] : recvs) sch.recvs.push_back(std::move(m));
  sch.finalize();
  return sch;
}

} // namespace halox::detail
