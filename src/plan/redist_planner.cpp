#include "plan/redist_planner.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <limits>
#include <sstream>

namespace halox::detail {

namespace {
int plan_rank(redist_side const& s, int grid_rank) {
  return s.plan_ranks.empty() ? grid_rank : s.plan_ranks[grid_rank];
}

slot_layout layout_of(redist_side const& s) {
  distribution const& d = *s.dist;
  slot_layout l;
  l.type = d.type();
  l.elem_size = size_of(d.type());
  if (s.rank < 0) {
    // Not a member: the slot holds no region; unit strides keep the layout well formed.
    l.strides.assign(d.ndim(), 1);
    return l;
  }
  l.strides = s.strides.empty() ? d.default_strides(s.rank) : s.strides;
  l.elements = required_elements(d.local_shape(s.rank), l.strides);
  return l;
}

void check_side(redist_side const& s, char const* which) {
  HALOX_REQUIRE(s.dist != nullptr, errc::internal, std::string(which) + " distribution missing");
  HALOX_REQUIRE(s.rank >= -1 && s.rank < s.dist->nranks(), errc::internal,
                std::string(which) + " rank " + std::to_string(s.rank) + " outside its grid");
  HALOX_REQUIRE(s.plan_ranks.empty() || static_cast<int>(s.plan_ranks.size()) == s.dist->nranks(),
                errc::internal,
                std::string(which) + " rank map has " + std::to_string(s.plan_ranks.size()) +
                    " entries for a grid of " + std::to_string(s.dist->nranks()));
}

} // namespace

std::string shape_str(std::vector<index_t> const& shape) {
  std::ostringstream os;
  os << "[";
  for (std::size_t d = 0; d < shape.size(); ++d) os << (d ? "x" : "") << shape[d];
  os << "]";
  return os.str();
}

void check_same_tensor(distribution const& src, distribution const& dst) {
  HALOX_REQUIRE(src.shape() == dst.shape(), errc::invalid_argument,
                "the source global shape " + shape_str(src.shape()) +
                    " differs from the destination global shape " + shape_str(dst.shape()) +
                    "; a redistribution moves one global tensor, so both descriptors need the "
                    "same global shape");
  HALOX_REQUIRE(src.type() == dst.type(), errc::invalid_argument,
                std::string("the source dtype ") + to_string(src.type()) +
                    " differs from the destination dtype " + to_string(dst.type()) +
                    "; a redistribution does not convert elements, describe both sides with the "
                    "same dtype");
}

schedule plan_redistribution(redist_side const& src, redist_side const& dst) {
  check_side(src, "source");
  check_side(dst, "destination");
  check_same_tensor(*src.dist, *dst.dist);
  schedule sch;
  sch.slots = {layout_of(src), layout_of(dst)};

  int const me =
      src.rank >= 0 ? plan_rank(src, src.rank) : (dst.rank >= 0 ? plan_rank(dst, dst.rank) : -1);
  HALOX_REQUIRE(src.rank < 0 || dst.rank < 0 || plan_rank(dst, dst.rank) == me, errc::internal,
                "the source and destination rank maps disagree on the calling process");

  // Sends, and the local copy when the destination owner is this very process.
  if (src.rank >= 0 && !src.dist->empty(src.rank)) {
    for_each_overlap(*dst.dist, src.dist->owned_box(src.rank), [&](int q, box const& g) {
      region const from{0, to_local(*src.dist, src.rank, g)};
      int const peer = plan_rank(dst, q);
      if (peer == me)
        sch.copies.push_back({from, {1, to_local(*dst.dist, q, g)}});
      else
        sch.sends.push_back({peer, {from}, 0});
    });
  }
  // Receives; the part this process sends to itself was recorded above as the local copy.
  if (dst.rank >= 0 && !dst.dist->empty(dst.rank)) {
    for_each_overlap(*src.dist, dst.dist->owned_box(dst.rank), [&](int q, box const& g) {
      int const peer = plan_rank(src, q);
      if (peer != me) sch.recvs.push_back({peer, {{1, to_local(*dst.dist, dst.rank, g)}}, 0});
    });
  }
  sch.finalize();
  return sch;
}

std::vector<std::int64_t> encode_distribution(distribution const& dist) {
  std::vector<std::int64_t> out{dist.ndim(), static_cast<std::int64_t>(dist.type())};
  for (int d = 0; d < dist.ndim(); ++d) {
    auto const& o = dist.options(d);
    out.insert(out.end(), {dist.shape()[d], dist.parts()[d], o.halo_lo, o.halo_hi,
                           o.periodic ? 1 : 0, o.sizes.empty() ? 0 : 1});
    if (!o.sizes.empty())
      for (int p = 0; p < dist.parts()[d]; ++p) out.push_back(dist.part_size(d, p));
  }
  return out;
}

distribution decode_distribution(std::int64_t const* data, std::size_t n) {
  std::size_t pos = 0;
  auto next = [&]() -> std::int64_t {
    HALOX_REQUIRE(pos < n, errc::internal, "truncated distribution encoding");
    return data[pos++];
  };
  // Every value is range-checked before it is narrowed or sizes anything: the buffer came from
  // another process.
  auto next_int = [&](char const* what, std::int64_t lo, std::int64_t hi) {
    std::int64_t const v = next();
    HALOX_REQUIRE(v >= lo && v <= hi, errc::internal,
                  std::string("distribution encoding holds ") + what + " " + std::to_string(v) +
                      ", outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return v;
  };
  constexpr std::int64_t int_max = std::numeric_limits<int>::max();
  int const nd = static_cast<int>(next_int("rank", 1, max_dims));
  auto const type = static_cast<dtype>(next_int("dtype", 0, 255));
  std::vector<index_t> shape(nd);
  std::vector<int> parts(nd);
  std::vector<dim_options> opts(nd);
  for (int d = 0; d < nd; ++d) {
    shape[d] = next();
    parts[d] = static_cast<int>(next_int("part count", 1, max_grid_ranks));
    opts[d].halo_lo = static_cast<int>(next_int("halo width", 0, int_max));
    opts[d].halo_hi = static_cast<int>(next_int("halo width", 0, int_max));
    opts[d].periodic = next_int("periodic flag", 0, 1) != 0;
    if (next_int("explicit-sizes flag", 0, 1) != 0) {
      HALOX_REQUIRE(static_cast<std::size_t>(parts[d]) <= n - pos, errc::internal,
                    "truncated distribution encoding");
      opts[d].sizes.assign(data + pos, data + pos + parts[d]);
      pos += static_cast<std::size_t>(parts[d]);
    }
  }
  HALOX_REQUIRE(pos == n, errc::internal, "trailing data in distribution encoding");
  return distribution(std::move(shape), type, std::move(parts), std::move(opts));
}

} // namespace halox::detail
