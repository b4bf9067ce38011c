#pragma once
// Fragments of a message for the pipelined backend (mpi_pipeline): a long message is cut into
// byte ranges that travel as separate messages, so a sender packs fragment k+1 while fragment k
// moves and a receiver unpacks each fragment as it lands.
//
// Sender and receiver lay the same message out differently (their own strides, sometimes their
// own split of it into regions), so the cut is agreed in bytes of the message stream only: it
// depends on the message's byte count, its element size and the fragment setting, which both
// sides share. Each side then maps every byte range onto sub-boxes of its own regions. Pure
// geometry, no MPI.

#include "plan/schedule.hpp"

#include <cstddef>
#include <vector>

namespace halox::detail {

/// Messages shorter than this are never cut when the fragment size is automatic.
inline constexpr std::size_t pipeline_min_fragment = std::size_t{64} << 10;
/// An automatic cut aims at this many fragments per message.
inline constexpr std::size_t pipeline_target_fragments = 8;

/// Byte ranges [offset, offset + bytes) of one message, in stream order.
struct byte_range {
  std::size_t offset = 0;
  std::size_t bytes = 0;
};

/// The cut of a message of `bytes` bytes whose elements all have `elem_size` bytes
/// (0: mixed sizes, never cut). `setting` is the fragment size asked for (0: automatic: messages
/// of at least 2 * pipeline_min_fragment bytes in about pipeline_target_fragments pieces of at
/// least pipeline_min_fragment). Every range but the last is a whole number of elements; one
/// range (the whole message) when it is not cut.
[[nodiscard]] std::vector<byte_range> cut_message(std::size_t bytes, std::size_t elem_size,
                                                  std::size_t setting);

/// The element size shared by all of `m`'s regions, or 0 when they differ.
[[nodiscard]] std::size_t message_elem_size(schedule const& s, message const& m);

/// The boxes holding elements [first, last) of `b` in row-major order (last dimension fastest),
/// in that order: at most 2 * b.nd - 1 boxes whose concatenation in row-major order of each is
/// exactly that range.
[[nodiscard]] std::vector<box> box_range(box const& b, index_t first, index_t last);

/// The regions (sub-boxes of `m`'s regions) that hold bytes [r.offset, r.offset + r.bytes) of
/// `m`'s stream, in stream order. `r` must start and end on element boundaries.
[[nodiscard]] std::vector<region> regions_of_range(schedule const& s, message const& m,
                                                   byte_range r);

} // namespace halox::detail
