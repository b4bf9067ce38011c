#pragma once
// Host side of the CUDA pack path: turns a schedule into the descriptor batches of the pack and
// unpack kernels, once, at plan time. Plain C++ and header-only, so the unit tests check it in
// every build, with or without CUDA.
//
// The packed stream of an executor is one device buffer: [send messages | receive messages |
// local-copy scratch], each message and each copy starting on a 16-byte boundary so that region
// alignment inside a message is the same on both ranks' sides and the widest words stay usable.
//
// Overlapping destinations. In a reverse exchange one owned cell can receive several
// contributions (a corner cell from the face, edge and corner neighbours, or twice from one
// peer when halos are wide). The unpack regions are therefore coloured into conflict levels: a
// region takes the lowest level that no earlier overlapping region (same slot, intersecting
// boxes) holds. Each level is one launch, in order on the stream, so no two threads ever combine
// into the same cell concurrently and no atomics are needed: every dtype, uint8 and the 16-bit
// floats included, combines with the same code as the CPU, and the order of contributions is
// fixed at plan time, so results are deterministic run to run (bit-identical to a host unpack
// of the regions in batch order). A 2-D corner needs 3 levels, a 3-D one 7 or 8; forward
// exchanges have no overlaps, hence one launch.

#include "exec/cuda/pack_desc.hpp"
#include "plan/schedule.hpp"

#include "common/dtype_dispatch.hpp"

#include "common/half.hpp"
#include <halox/error.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace halox::detail::gpu {

/// A launch of a batch: regions [first, last), blocks [block_lo, block_hi).
struct launch_range {
  int first = 0, last = 0;
  index_t block_lo = 0, block_hi = 0;
};

/// The descriptors of one kernel direction and the launches that run them, in order.
struct desc_batch {
  std::vector<region_desc> regions;
  std::vector<launch_range> launches;
  std::vector<int> source; ///< per descriptor: its index among the batch's non-empty regions in
                           ///< schedule order (receives, copies, fills)
};

/// Where each message and local copy lives in the packed stream (bytes from its base).
struct stream_layout {
  std::vector<index_t> send_offset;    ///< per schedule send
  std::vector<index_t> recv_offset;    ///< per schedule receive
  std::vector<index_t> copy_offset;    ///< per local copy
  index_t send_bytes = 0;              ///< the send area is [0, send_bytes)
  index_t recv_lo = 0, recv_bytes = 0; ///< the receive area is [recv_lo, recv_lo + recv_bytes)
  index_t total = 0;                   ///< bytes of the whole stream buffer
};

namespace batch_detail {

inline index_t align16(index_t v) { return (v + 15) / 16 * 16; }

inline bool boxes_overlap(box const& a, box const& b) { return !intersect(a, b).empty(); }

// Element value `v` converted to `t`, repeated over the 16 pattern bytes.
inline void fill_pattern(dtype t, std::size_t e, double v, unsigned char* out) {
  unsigned char one[8] = {};
  visit_dtype(t, [&](auto tag) {
    auto const x = tag.from_double(v);
    std::memcpy(one, &x, sizeof x);
  });
  for (int i = 0; i < max_word; ++i) out[i] = one[static_cast<std::size_t>(i) % e];
}

// Descriptor of region `r` whose packed bytes start at `stream_offset` (ignored for fills).
inline region_desc describe(schedule const& s, region const& r, index_t stream_offset,
                            region_kind kind, double fill_value) {
  HALOX_REQUIRE(r.slot >= 0 && r.slot < static_cast<int>(s.slots.size()), errc::internal,
                "region of slot " + std::to_string(r.slot) + " in a schedule of " +
                    std::to_string(s.slots.size()) + " slots");
  slot_layout const& sl = s.slots[static_cast<std::size_t>(r.slot)];
  std::size_t const e = sl.elem_size;
  HALOX_REQUIRE(e == 1 || e == 2 || e == 4 || e == 8, errc::unsupported,
                "element size " + std::to_string(e) + " is not supported by the CUDA kernels");
  region_desc d;
  d.sr = make_region(r.b, sl.strides.data());
  auto const ei = static_cast<index_t>(e);
  d.elem_size = static_cast<std::int32_t>(e);
  d.bytes = d.sr.elements() * ei;
  d.run_bytes = d.sr.run * ei;
  d.slot = r.slot;
  d.type = static_cast<std::uint8_t>(sl.type);
  d.kind = static_cast<std::uint8_t>(kind);
  d.narrow = d.bytes < (index_t{1} << 32) ? 1 : 0;
  auto mag = [](index_t v) { return static_cast<std::uint64_t>(v < 0 ? -v : v); };
  int w = pow2_divisor(mag(d.run_bytes));
  w = std::min(w, pow2_divisor(mag(d.sr.offset * ei)));
  for (int k = 0; k < d.sr.nloops; ++k) w = std::min(w, pow2_divisor(mag(d.sr.stride[k] * ei)));
  if (kind == region_kind::copy) {
    d.stream_offset = stream_offset;
    d.stream_align = static_cast<std::uint8_t>(pow2_divisor(mag(stream_offset)));
    w = std::min<int>(w, d.stream_align);
  } else {
    fill_pattern(sl.type, e, fill_value, d.fill);
  }
  d.word = static_cast<std::uint8_t>(w);
  return d;
}

// Numbers the blocks of `regs` (in order) from 0 and makes one launch per run of equal `level`.
inline desc_batch finish(std::vector<region_desc> regs, std::vector<int> const& level) {
  desc_batch b;
  std::vector<std::size_t> order(regs.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return level[x] < level[y]; });
  index_t block = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    region_desc d = regs[order[k]];
    d.block_begin = block;
    int const i = static_cast<int>(k);
    if (k == 0 || level[order[k]] != level[order[k - 1]])
      b.launches.push_back({i, i, block, block});
    block += chunks_of(d.bytes);
    b.launches.back().last = i + 1;
    b.launches.back().block_hi = block;
    b.regions.push_back(d);
    b.source.push_back(static_cast<int>(order[k]));
  }
  return b;
}

} // namespace batch_detail

/// Lays out the packed stream of `s`.
inline stream_layout make_stream_layout(schedule const& s) {
  using batch_detail::align16;
  stream_layout l;
  index_t at = 0;
  for (auto const& m : s.sends) {
    l.send_offset.push_back(at);
    at = align16(at + static_cast<index_t>(m.bytes));
  }
  l.send_bytes = at;
  l.recv_lo = at;
  for (auto const& m : s.recvs) {
    l.recv_offset.push_back(at);
    at = align16(at + static_cast<index_t>(m.bytes));
  }
  l.recv_bytes = at - l.recv_lo;
  for (auto const& c : s.copies) {
    l.copy_offset.push_back(at);
    at = align16(at + static_cast<index_t>(region_bytes(s, c.src)));
  }
  l.total = at;
  return l;
}

/// The pack batch: every send region (when `with_sends`) and every local copy's source, in
/// schedule order, as one launch.
inline desc_batch make_pack_batch(schedule const& s, stream_layout const& l, bool with_sends) {
  HALOX_REQUIRE(s.slots.size() <= static_cast<std::size_t>(max_slots), errc::unsupported,
                "a device plan of " + std::to_string(s.slots.size()) + " buffers exceeds the " +
                    std::to_string(max_slots) +
                    " the CUDA kernels take; split it into plans of "
                    "fewer tensors");
  std::vector<region_desc> regs;
  auto add = [&](region const& r, index_t at) {
    region_desc d = batch_detail::describe(s, r, at, region_kind::copy, 0.0);
    if (d.bytes > 0) regs.push_back(d);
    return d.bytes;
  };
  if (with_sends)
    for (std::size_t i = 0; i < s.sends.size(); ++i) {
      index_t at = l.send_offset[i];
      for (auto const& r : s.sends[i].regions) at += add(r, at);
    }
  for (std::size_t i = 0; i < s.copies.size(); ++i) add(s.copies[i].src, l.copy_offset[i]);
  std::vector<int> const level(regs.size(), 0);
  return batch_detail::finish(std::move(regs), level);
}

/// The unpack batch: every receive region (when `with_recvs`), every local copy's destination
/// and every fill (when `with_fills`), in that order, split into conflict levels (see above).
inline desc_batch make_unpack_batch(schedule const& s, stream_layout const& l, bool with_recvs,
                                    bool with_fills, double fill_value) {
  HALOX_REQUIRE(s.slots.size() <= static_cast<std::size_t>(max_slots), errc::unsupported,
                "a device plan of " + std::to_string(s.slots.size()) + " buffers exceeds the " +
                    std::to_string(max_slots) +
                    " the CUDA kernels take; split it into plans of "
                    "fewer tensors");
  std::vector<region_desc> regs;
  std::vector<region const*> src;
  auto add = [&](region const& r, index_t at, region_kind k) {
    region_desc d = batch_detail::describe(s, r, at, k, fill_value);
    if (d.bytes > 0) {
      regs.push_back(d);
      src.push_back(&r);
    }
    return d.bytes;
  };
  if (with_recvs)
    for (std::size_t i = 0; i < s.recvs.size(); ++i) {
      index_t at = l.recv_offset[i];
      for (auto const& r : s.recvs[i].regions) at += add(r, at, region_kind::copy);
    }
  for (std::size_t i = 0; i < s.copies.size(); ++i)
    add(s.copies[i].dst, l.copy_offset[i], region_kind::copy);
  if (with_fills)
    for (auto const& f : s.fills) add(f, 0, region_kind::fill);
  std::vector<int> level(regs.size(), 0);
  std::vector<char> taken;
  for (std::size_t i = 0; i < regs.size(); ++i) {
    taken.assign(i + 1, 0);
    for (std::size_t j = 0; j < i; ++j)
      if (src[j]->slot == src[i]->slot && batch_detail::boxes_overlap(src[j]->b, src[i]->b))
        taken[static_cast<std::size_t>(level[j])] = 1;
    while (taken[static_cast<std::size_t>(level[i])]) ++level[i];
  }
  return batch_detail::finish(std::move(regs), level);
}

} // namespace halox::detail::gpu
