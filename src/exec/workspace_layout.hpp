#pragma once
// The areas an executor and its transport reserve in a plan's workspace. Apart from the
// executor, so that a transport (exec/transport.hpp) reserves its own areas without seeing the
// executor that drives it.

#include <halox/context.hpp>

#include <array>
#include <cstddef>

namespace halox::detail {

/// Offsets of the areas an executor reserved in a workspace, per kind of memory.
class workspace_layout {
public:
  /// Reserves `bytes` of `kind` (64-byte aligned) and returns its offset. Every area, even an
  /// empty one, gets an address of its own: MPI libraries take a collective's send buffer equal
  /// to its receive buffer for MPI_IN_PLACE (Open MPI's libnbc does).
  std::size_t reserve(memory_kind kind, std::size_t bytes) {
    auto& end = end_[static_cast<int>(kind)];
    std::size_t const at = end;
    end += bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
    return at;
  }
  /// Bytes of `kind` the reservations need.
  [[nodiscard]] std::size_t bytes(memory_kind kind) const noexcept {
    return end_[static_cast<int>(kind)];
  }

private:
  std::array<std::size_t, 3> end_{};
};

/// Base addresses of a bound workspace, per kind of memory.
using workspace_bases = std::array<std::byte*, 3>;

} // namespace halox::detail
