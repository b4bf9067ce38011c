#pragma once
// CPU pack/unpack of schedule regions. The element order is the canonical one of
// detail/box.hpp (row-major over each region's box), identical to the CUDA kernels'.

#include "exec/combine.hpp"
#include "exec/local_copies.hpp"
#include "exec/transport.hpp"
#include "plan/schedule.hpp"

#include <cstddef>
#include <vector>

namespace halox::detail {

/// One contiguous run of a slot buffer.
struct run_ref {
  int slot = 0;
  std::size_t offset = 0; ///< bytes from the slot's base
  std::size_t bytes = 0;
};

/// Appends the contiguous runs of `m`'s regions to `out`, in the message's byte order; runs that
/// continue each other (a region ending where the next one starts) become one. Returns how many
/// runs it appended.
std::size_t append_runs(schedule const& s, message const& m, std::vector<run_ref>& out);

/// `m`'s regions as the boxes a transport walks (exec/transport.hpp), in the message's order.
[[nodiscard]] std::vector<wire_box> message_boxes(schedule const& s, message const& m);

/// Packs `m`'s regions from the slot buffers `bufs` into `out` (m.bytes bytes).
void pack_message(schedule const& s, message const& m, void const* const* bufs, std::byte* out);
/// Unpacks `in` (m.bytes bytes) into `m`'s regions of the slot buffers, combining with `op`.
void unpack_message(schedule const& s, message const& m, void* const* bufs, std::byte const* in,
                    combine_op op);
/// Packs one region; returns bytes written.
std::size_t pack_region(schedule const& s, region const& r, void const* const* bufs,
                        std::byte* out);
/// Unpacks one region; returns bytes read.
std::size_t unpack_region(schedule const& s, region const& r, void* const* bufs,
                          std::byte const* in, combine_op op);
/// Sets the schedule's fill regions to `value` converted to each slot's dtype.
void run_fills(schedule const& s, void* const* bufs, double value);
/// True when region `r` is one contiguous run of its slot's buffer (can be sent in place).
[[nodiscard]] bool region_contiguous(schedule const& s, region const& r);
/// True when message `m` is one region that is one contiguous run (sent / received in place).
[[nodiscard]] bool message_contiguous(schedule const& s, message const& m);
/// Byte offset of region `r`'s first element in its slot buffer.
[[nodiscard]] std::size_t region_byte_offset(schedule const& s, region const& r);

} // namespace halox::detail
