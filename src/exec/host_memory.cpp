#include "exec/host_memory.hpp"

#include "common/environment.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace halox::detail {

// Large workspaces (packed messages, landing areas) are what a peer process reads or writes
// through the kernel when MPI or UCX move a big message in one copy (CMA): the kernel pins
// every page of the range, so on 2 MiB pages it pins one page where it would pin 512, and the
// TLB covers the whole area. On the development VM a 2 MiB-face exchange with mpi_pack took
// 0.33-0.38 ms instead of 0.48-0.67 ms (docs/bench.md). Transparent huge pages are advice: where
// they are off the pages stay small and nothing else changes.

namespace {

// Contexts check the variable at construction, on every rank, before any plan allocates.
bool huge_pages_wanted() { return settings::huge_pages().value_or(true); }

bool huge_sized(std::size_t bytes) noexcept { return bytes >= huge_page_bytes; }

std::size_t huge_rounded(std::size_t bytes) noexcept {
  return (bytes + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
}

} // namespace

void* host_allocate(std::size_t bytes, bool huge) {
  if (!huge || !huge_sized(bytes)) return ::operator new (bytes, std::align_val_t{64});
  std::size_t const n = huge_rounded(bytes);
  void* p = ::operator new (n, std::align_val_t{huge_page_bytes});
#ifdef MADV_HUGEPAGE
  if (huge_pages_wanted()) (void)madvise(p, n, MADV_HUGEPAGE); // advice: may be refused
#endif
  return p;
}

void host_deallocate(void* p, std::size_t bytes, bool huge) noexcept {
  if (huge && huge_sized(bytes))
    ::operator delete (p, std::align_val_t{huge_page_bytes});
  else
    ::operator delete (p, std::align_val_t{64});
}

} // namespace halox::detail
