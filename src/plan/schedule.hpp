#pragma once
// The one schedule type that every planner produces and every executor consumes.
//
// A schedule says, for the calling rank, which boxes of which local buffers go to which peer,
// which boxes of which local buffers are filled from which peer, which boxes are copied locally
// (periodic self-wrap, redistribution onto oneself) and which halo boxes are set to a constant
// (non-periodic global boundary). Buffers are referred to by "slot": halo exchange of k tensors
// has k slots (send and receive in the same tensor); a redistribution has two (source and
// destination). Message contents are the concatenation of the regions in order, each region in
// row-major order of its box, so sender and receiver agree whatever their strides.

#include "common/strided_region.hpp"
#include <halox/dtype.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace halox::detail {

/// Memory layout of one buffer slot.
struct slot_layout {
  std::vector<index_t> strides; ///< element strides of the local buffer
  index_t elements = 0;         ///< elements the buffer must hold
  dtype type = dtype::float32;  ///< element type
  std::size_t elem_size = 4;    ///< bytes per element
};

/// A box of one slot's local buffer (local, allocated coordinates: 0 is the first allocated cell).
struct region {
  int slot = 0;
  box b;
};

/// Everything exchanged with one peer in one direction.
struct message {
  int peer = -1;               ///< rank in the plan's communicator
  std::vector<region> regions; ///< in the agreed order
  std::size_t bytes = 0;       ///< sum of region volumes times element sizes
};

/// A purely local copy: same volume on both sides, both walked in row-major box order.
struct local_copy {
  region src;
  region dst;
};

/// The communication of one rank.
struct schedule {
  std::vector<slot_layout> slots;
  std::vector<message> sends;     ///< one per peer, sorted by peer
  std::vector<message> recvs;     ///< one per peer, sorted by peer
  std::vector<local_copy> copies; ///< in the agreed order
  std::vector<region> fills;      ///< boundary halo boxes to set to a constant (forward only)

  /// Total bytes sent / received (excluding local copies).
  [[nodiscard]] std::size_t send_bytes() const;
  [[nodiscard]] std::size_t recv_bytes() const;
  /// The schedule run backwards: sends become receives and vice versa, local copies are
  /// swapped, fills are dropped. Used by the reverse (accumulating) exchange.
  [[nodiscard]] schedule reversed() const;
  /// Appends another schedule's slots, messages, copies and fills, renumbering its slots and
  /// merging messages to the same peer (several tensors, one round of messages).
  void merge(schedule const& other);
  /// Recomputes message byte counts and sorts messages by peer.
  void finalize();
  /// Multi-line human-readable summary.
  [[nodiscard]] std::string str() const;
};

/// Bytes of one region.
[[nodiscard]] std::size_t region_bytes(schedule const& s, region const& r);

} // namespace halox::detail
