#pragma once
// The redistribution planner: pure geometry, no MPI. For the calling process it lists which
// owned box of its source buffer goes to which destination owner, which owned box of its
// destination buffer comes from which source owner, and the one box that stays on the process
// (a local copy). Halo cells never move: only owned blocks are intersected.
//
// Cost is O(peers) per process, not O(P): plan/overlap.hpp finds the other side's blocks that
// overlap my block by binary search per dimension and visits only their product.

#include "plan/overlap.hpp"
#include "plan/schedule.hpp"

#include <halox/distribution.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace halox::detail {

/// One side (source or destination) of a redistribution, as seen by the calling process.
struct redist_side {
  distribution const* dist = nullptr; ///< the side's global distribution
  int rank = -1;                      ///< the caller's rank in the side's grid (-1: not a member)
  /// Grid rank -> rank in the plan communicator (injective). Empty: the identity.
  std::vector<int> plan_ranks;
  std::vector<index_t> strides; ///< the caller's local buffer strides (empty: row-major)
};

/// The schedule of the calling process: slot 0 is the source buffer, slot 1 the destination
/// buffer, both in local allocated coordinates. Peers are plan-communicator ranks. Throws
/// `halox::error` when the two sides describe different global tensors.
[[nodiscard]] schedule plan_redistribution(redist_side const& src, redist_side const& dst);

/// Throws `halox::error` (invalid_argument) naming both shapes / dtypes unless the two
/// distributions describe the same global tensor.
void check_same_tensor(distribution const& src, distribution const& dst);

/// "[4x6x8]".
[[nodiscard]] std::string shape_str(std::vector<index_t> const& shape);

/// Compact serialisation of a distribution (shape, dtype, parts, halos, periodicity, explicit
/// part sizes) so a process outside a grid can learn it from one broadcast.
[[nodiscard]] std::vector<std::int64_t> encode_distribution(distribution const& dist);
/// Inverse of `encode_distribution`; throws `halox::error` on a malformed buffer.
[[nodiscard]] distribution decode_distribution(std::int64_t const* data, std::size_t n);

} // namespace halox::detail
