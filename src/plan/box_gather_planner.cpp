#include "plan/box_gather_planner.hpp"

#include "plan/overlap.hpp"

#include <halox/error.hpp>

#include <string>

namespace halox::detail {

namespace {

box in_workspace(box const& g, box const& mine) {
  index_t delta[max_dims];
  for (int d = 0; d < g.nd; ++d) delta[d] = -mine.lo[d];
  return shifted(g, delta);
}

} // namespace

void check_need(distribution const& dist, need_ranges const& need) {
  int const nd = dist.ndim();
  HALOX_REQUIRE(static_cast<int>(need.size()) == nd, errc::invalid_argument,
                "box gather: the need ranges have " + std::to_string(need.size()) +
                    " dimensions but the tensor " + dist.str() + " has " + std::to_string(nd) +
                    "; pass one list of ranges per dimension");
  for (int d = 0; d < nd; ++d) {
    HALOX_REQUIRE(static_cast<int>(need[d].size()) == dist.parts()[d], errc::invalid_argument,
                  "box gather: dimension " + std::to_string(d) + " has " +
                      std::to_string(need[d].size()) + " need ranges but the grid has " +
                      std::to_string(dist.parts()[d]) + " parts along it; pass one range per part");
    for (std::size_t p = 0; p < need[d].size(); ++p) {
      index_range const r = need[d][p];
      HALOX_REQUIRE(r.empty() || (r.lo >= 0 && r.hi <= dist.shape()[d]), errc::invalid_argument,
                    "box gather: range [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) +
                        ") of part " + std::to_string(p) + " along dimension " + std::to_string(d) +
                        " leaves the global extent [0, " + std::to_string(dist.shape()[d]) +
                        "); clip it to the tensor");
    }
  }
}

box needed_box(distribution const& dist, int rank, need_ranges const& need) {
  int const nd = dist.ndim();
  coords_t const c = dist.coords_of(rank);
  box b;
  b.nd = nd;
  for (int d = 0; d < nd; ++d) {
    index_range const r = need[d][c[d]];
    if (r.empty()) return box{nd, {}, {}};
    b.lo[d] = r.lo;
    b.hi[d] = r.hi;
  }
  return b;
}

schedule plan_box_gather(distribution const& dist, int rank, std::vector<index_t> const& strides,
                         need_ranges const& need, std::vector<box> const* self_copy) {
  check_need(dist, need);
  int const nd = dist.ndim();
  box const mine = needed_box(dist, rank, need);
  coords_t const my = dist.coords_of(rank);

  schedule sch;
  slot_layout src, ws;
  src.type = ws.type = dist.type();
  src.elem_size = ws.elem_size = size_of(dist.type());
  src.strides = strides.empty() ? dist.default_strides(rank) : strides;
  src.elements = required_elements(dist.local_shape(rank), src.strides);
  ws.strides.assign(static_cast<std::size_t>(nd), 1);
  for (int d = nd - 1; d > 0; --d) ws.strides[d - 1] = ws.strides[d] * need[d][my[d]].size();
  ws.elements = mine.volume();
  sch.slots = {src, ws};

  // Sends: every rank whose needed box meets my block. The need ranges need not be monotone in
  // the part index, so the candidates along each dimension come from a scan, not a search.
  box const owned = dist.owned_box(rank);
  if (!owned.empty()) {
    std::vector<std::vector<int>> cand(static_cast<std::size_t>(nd));
    for (int d = 0; d < nd; ++d)
      for (int q = 0; q < dist.parts()[d]; ++q)
        if (!intersect(need[d][q], index_range{owned.lo[d], owned.hi[d]}).empty())
          cand[d].push_back(q);
    for_each_part_product(cand, [&](coords_t const& c) {
      int const peer = dist.rank_of(c);
      box const g = intersect(owned, needed_box(dist, peer, need));
      region const from{0, to_local(dist, rank, g)};
      if (peer != rank) {
        sch.sends.push_back(message{peer, {from}, 0});
      } else if (self_copy == nullptr) {
        sch.copies.push_back(local_copy{from, region{1, in_workspace(g, mine)}});
      } else {
        for (box const& part : *self_copy) {
          box const pg = intersect(g, part);
          if (!pg.empty())
            sch.copies.push_back(
                local_copy{region{0, to_local(dist, rank, pg)}, region{1, in_workspace(pg, mine)}});
        }
      }
    });
  }
  // Receives: every other rank whose block meets my needed box (mine came as a copy above).
  if (!mine.empty())
    for_each_overlap(dist, mine, [&](int q, box const& g) {
      if (q != rank) sch.recvs.push_back(message{q, {region{1, in_workspace(g, mine)}}, 0});
    });
  sch.finalize();
  return sch;
}

} // namespace halox::detail
