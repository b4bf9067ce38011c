#pragma once
// halox's own host allocations (plan workspaces, when the context has no allocator): 64-byte
// aligned, and from 2 MiB up on transparent huge pages where the system offers them.

#include <cstddef>

namespace halox::detail {

/// Size from which host allocations are 2 MiB aligned, rounded up to whole 2 MiB pages and
/// advised to be huge pages (madvise MADV_HUGEPAGE) unless $HALOX_HUGE_PAGES is 0 or off.
inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;

/// `bytes` (> 0) of host memory; throws std::bad_alloc. `huge` false: always ordinary 64-byte
/// aligned memory (what stands in for a caller's tensor).
[[nodiscard]] void* host_allocate(std::size_t bytes, bool huge = true);
/// Releases what host_allocate(bytes, huge) returned, with the same arguments.
void host_deallocate(void* p, std::size_t bytes, bool huge = true) noexcept;

} // namespace halox::detail
