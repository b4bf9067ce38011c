#include "ops/dist_exchange.hpp"

#include "core/plan_engine.hpp"

#include <halox/error.hpp>

#include <sstream>

namespace halox::ops::detail {

namespace {

using halox::detail::local_copy;
using halox::detail::message;
using halox::detail::region;
using halox::detail::schedule;
using halox::detail::slot_layout;

// Visits the product of per-dimension candidate lists in row-major order as f(coords).
template <class F> void for_each_coords(std::vector<std::vector<int>> const& cand, F&& f) {
  int const nd = static_cast<int>(cand.size());
  for (auto const& c : cand)
    if (c.empty()) return;
  std::vector<std::size_t> i(static_cast<std::size_t>(nd), 0);
  coords_t c(static_cast<std::size_t>(nd));
  while (true) {
    for (int d = 0; d < nd; ++d) c[d] = cand[d][i[d]];
    f(c);
    int d = nd - 1;
    while (d >= 0 && ++i[d] == cand[d].size()) i[d--] = 0;
    if (d < 0) return;
  }
}

box shifted_by(box const& g, box const& origin_of, index_t sign) {
  index_t delta[max_dims];
  for (int d = 0; d < g.nd; ++d) delta[d] = sign * origin_of.lo[d];
  return shifted(g, delta);
}

std::uint64_t geometry_key(distribution const& dist, std::vector<std::vector<range1>> const& need) {
  std::uint64_t h = dist.hash() ^ 0x6f7073u; // distinct from the halo plans of the same tensor
  auto mix = [&](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (auto const& dim : need)
    for (auto const& r : dim) {
      mix(static_cast<std::uint64_t>(r.lo));
      mix(static_cast<std::uint64_t>(r.hi));
    }
  return h;
}

} // namespace

box_gather::box_gather(tensor_desc const& src, std::vector<std::vector<range1>> need,
                       backend method, tune_options const& tune,
                       std::vector<box> const* self_copy) {
  distribution const& dist = src.dist();
  int const nd = dist.ndim(), me = src.grid().rank();
  HALOX_REQUIRE(static_cast<int>(need.size()) == nd, errc::internal,
                "box_gather: need has " + std::to_string(need.size()) + " dimensions, tensor " +
                    std::to_string(nd));
  for (int d = 0; d < nd; ++d)
    HALOX_REQUIRE(static_cast<int>(need[d].size()) == dist.parts()[d], errc::internal,
                  "box_gather: need ranges do not match the parts of dim " + std::to_string(d));

  coords_t const my = dist.coords_of(me);
  std::vector<range1> mine(static_cast<std::size_t>(nd));
  for (int d = 0; d < nd; ++d) mine[d] = need[d][my[d]];
  mine_ = make_box(mine);
  for (int d = 0; d < nd; ++d) {
    shape_.push_back(mine[d].size());
    origin_.push_back(mine[d].lo);
  }
  elements_ = mine_.volume();

  schedule sch;
  slot_layout src_slot, ws_slot;
  src_slot.type = ws_slot.type = dist.type();
  src_slot.elem_size = ws_slot.elem_size = size_of(dist.type());
  src_slot.strides = src.strides();
  src_slot.elements = src.local_elements();
  ws_slot.strides.assign(static_cast<std::size_t>(nd), 1);
  for (int d = nd - 1; d > 0; --d) ws_slot.strides[d - 1] = ws_slot.strides[d] * shape_[d];
  ws_slot.elements = elements_;
  sch.slots = {src_slot, ws_slot};

  box const owned = dist.owned_box(me);
  box const alloc = dist.allocated_box(me);
  // Sends: every rank whose needed box meets my owned block; the one to myself is a copy.
  if (!owned.empty()) {
    std::vector<std::vector<int>> cand(static_cast<std::size_t>(nd));
    for (int d = 0; d < nd; ++d)
      for (int q = 0; q < dist.parts()[d]; ++q)
        if (!intersect(need[d][q], {owned.lo[d], owned.hi[d]}).empty()) cand[d].push_back(q);
    for_each_coords(cand, [&](coords_t const& c) {
      std::vector<range1> g(static_cast<std::size_t>(nd));
      for (int d = 0; d < nd; ++d) g[d] = intersect(need[d][c[d]], {owned.lo[d], owned.hi[d]});
      box const gb = make_box(g);
      int const peer = dist.rank_of(c);
      region const from{0, shifted_by(gb, alloc, -1)};
      if (peer == me && self_copy == nullptr) {
        sch.copies.push_back(local_copy{from, region{1, shifted_by(gb, mine_, -1)}});
      } else if (peer == me) {
        for (box const& part : *self_copy) {
          box const pb = intersect(gb, part);
          if (!pb.empty())
            sch.copies.push_back(local_copy{region{0, shifted_by(pb, alloc, -1)},
                                            region{1, shifted_by(pb, mine_, -1)}});
        }
      } else
        sch.sends.push_back(message{peer, {from}, 0});
    });
  }
  // Receives: every other rank whose owned block meets my needed box.
  if (!mine_.empty()) {
    std::vector<std::vector<int>> cand(static_cast<std::size_t>(nd));
    for (int d = 0; d < nd; ++d)
      for (int q = 0; q < dist.parts()[d]; ++q) {
        range1 const own{dist.part_start(d, q), dist.part_start(d, q) + dist.part_size(d, q)};
        if (!intersect(own, mine[d]).empty()) cand[d].push_back(q);
      }
    for_each_coords(cand, [&](coords_t const& c) {
      int const peer = dist.rank_of(c);
      if (peer == me) return;
      box const gb = intersect(dist.owned_box(peer), mine_);
      sch.recvs.push_back(message{peer, {region{1, shifted_by(gb, mine_, -1)}}, 0});
    });
  }
  sch.finalize();

  halox::detail::engine_options eo;
  eo.method = method;
  eo.tune = tune;
  engine_ = std::make_unique<halox::detail::plan_engine>(context::of(src.grid().comm()), std::move(sch), eo,
                                                         geometry_key(dist, need));
}

box_gather::~box_gather() = default;
box_gather::box_gather(box_gather&&) noexcept = default;
box_gather& box_gather::operator=(box_gather&&) noexcept = default;

void box_gather::start(void const* src, void* ws) {
  // The engine's slots are mutable because the same executors also write (reverse exchanges);
  // a forward gather only reads slot 0. The executor keeps the slot array until wait(), so it
  // lives in the object.
  bufs_[0] = const_cast<void*>(src);
  bufs_[1] = ws;
  engine_->start(bufs_, false, halox::detail::combine_op::replace, nullptr);
}

void box_gather::wait() { engine_->wait(nullptr); }

std::size_t box_gather::bytes_sent() const noexcept { return engine_->forward().send_bytes(); }

std::string box_gather::summary() const {
  std::ostringstream os;
  os << "dy gather of " << box_str(mine_) << ": " << engine_->summary();
  return os.str();
}

} // namespace halox::ops::detail
