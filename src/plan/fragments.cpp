#include "plan/fragments.hpp"

#include <halox/error.hpp>

#include <algorithm>

namespace halox::detail {

std::vector<byte_range> cut_message(std::size_t bytes, std::size_t elem_size, std::size_t setting) {
  std::vector<byte_range> out;
  std::size_t fragment = setting;
  if (setting == 0 && bytes >= 2 * pipeline_min_fragment)
    fragment = std::max(pipeline_min_fragment,
                        (bytes + pipeline_target_fragments - 1) / pipeline_target_fragments);
  if (elem_size == 0 || fragment == 0 || fragment >= bytes) {
    out.push_back({0, bytes});
    return out;
  }
  // Whole elements per fragment, so that each side cuts its regions between elements.
  fragment = std::max(elem_size, fragment / elem_size * elem_size);
  for (std::size_t off = 0; off < bytes; off += fragment)
    out.push_back({off, std::min(fragment, bytes - off)});
  return out;
}

std::size_t message_elem_size(schedule const& s, message const& m) {
  std::size_t e = 0;
  for (auto const& r : m.regions) {
    std::size_t const re = s.slots[r.slot].elem_size;
    if (e != 0 && re != e) return 0;
    e = re;
  }
  return e;
}

namespace {

// Appends the boxes of elements [first, last) of `cur`, whose dimensions before `d` are already
// a single index each, in row-major order.
void range_from(box cur, int d, index_t first, index_t last, std::vector<box>& out) {
  if (first >= last) return;
  index_t inner = 1;
  for (int k = d + 1; k < cur.nd; ++k) inner *= cur.extent(k);
  index_t const lo = cur.lo[d];
  if (first % inner == 0 && last % inner == 0) {
    cur.lo[d] = lo + first / inner;
    cur.hi[d] = lo + last / inner;
    out.push_back(cur);
    return;
  }
  index_t const i0 = first / inner, i1 = (last - 1) / inner;
  auto fixed = [&](index_t i) {
    box b = cur;
    b.lo[d] = lo + i;
    b.hi[d] = lo + i + 1;
    return b;
  };
  if (i0 == i1) {
    range_from(fixed(i0), d + 1, first - i0 * inner, last - i0 * inner, out);
    return;
  }
  index_t mid_first = i0, mid_last = i1 + 1;
  if (first % inner != 0) {
    range_from(fixed(i0), d + 1, first % inner, inner, out);
    mid_first = i0 + 1;
  }
  if (last % inner != 0) mid_last = i1;
  if (mid_first < mid_last) {
    box b = cur;
    b.lo[d] = lo + mid_first;
    b.hi[d] = lo + mid_last;
    out.push_back(b);
  }
  if (last % inner != 0) range_from(fixed(i1), d + 1, 0, last % inner, out);
}

} // namespace

std::vector<box> box_range(box const& b, index_t first, index_t last) {
  HALOX_REQUIRE(first >= 0 && first <= last && last <= b.volume(), errc::internal,
                "box_range: elements [" + std::to_string(first) + ", " + std::to_string(last) +
                    ") of a box of " + std::to_string(b.volume()));
  std::vector<box> out;
  if (first == last) return out;
  if (b.nd == 0) {
    out.push_back(b);
    return out;
  }
  range_from(b, 0, first, last, out);
  return out;
}

std::vector<region> regions_of_range(schedule const& s, message const& m, byte_range r) {
  std::vector<region> out;
  std::size_t pos = 0;
  std::size_t const end = r.offset + r.bytes;
  for (auto const& reg : m.regions) {
    std::size_t const e = s.slots[reg.slot].elem_size;
    std::size_t const rb = region_bytes(s, reg);
    std::size_t const lo = std::max(r.offset, pos), hi = std::min(end, pos + rb);
    if (lo < hi) {
      HALOX_REQUIRE((lo - pos) % e == 0 && (hi - pos) % e == 0, errc::internal,
                    "a message fragment cuts an element of " + std::to_string(e) + " bytes");
      for (box const& b : box_range(reg.b, static_cast<index_t>((lo - pos) / e),
                                    static_cast<index_t>((hi - pos) / e)))
        out.push_back({reg.slot, b});
    }
    pos += rb;
    if (pos >= end) break;
  }
  return out;
}

} // namespace halox::detail
