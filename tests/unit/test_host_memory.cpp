// halox's own host allocations (src/exec/host_memory.hpp): 64-byte aligned below 2 MiB; from
// 2 MiB up 2 MiB aligned and, where transparent huge pages are on (or on request, "madvise"),
// backed by huge pages unless HALOX_HUGE_PAGES=off.
#include "exec/host_memory.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace {

namespace hd = halox::detail;

// The transparent-huge-page mode in brackets ("always", "madvise", "never"), or "" when the
// kernel has none.
std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  auto const a = line.find('['), b = line.find(']');
  return a == std::string::npos || b == std::string::npos ? "" : line.substr(a + 1, b - a - 1);
}

// kB of AnonHugePages in the mapping of this process that contains `p` (-1: not found).
long huge_kb_at(void const* p) {
  auto const at = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= at && at < hi;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0)
      return std::strtol(line.c_str() + std::strlen("AnonHugePages:"), nullptr, 10);
  }
  return -1;
}

struct env_guard {
  explicit env_guard(char const* value) {
    if (char const* old = std::getenv("HALOX_HUGE_PAGES")) saved_ = old, had_ = true;
    if (value)
      setenv("HALOX_HUGE_PAGES", value, 1);
    else
      unsetenv("HALOX_HUGE_PAGES");
  }
  ~env_guard() {
    if (had_)
      setenv("HALOX_HUGE_PAGES", saved_.c_str(), 1);
    else
      unsetenv("HALOX_HUGE_PAGES");
  }
  std::string saved_;
  bool had_ = false;
};

TEST(HostMemory, SmallAllocationsAre64ByteAligned) {
  for (std::size_t n : {1u, 63u, 4096u, (2u << 20) - 1}) {
    void* p = hd::host_allocate(n);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u) << n;
    std::memset(p, 0x5a, n);
    hd::host_deallocate(p, n);
  }
}

TEST(HostMemory, LargeAllocationsAre2MiBAlignedAndWholePages) {
  std::size_t const n = (3u << 20) + 5;
  auto* p = static_cast<unsigned char*>(hd::host_allocate(n));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % hd::huge_page_bytes, 0u);
  std::memset(p, 0xa5, n);
  EXPECT_EQ(p[0], 0xa5);
  EXPECT_EQ(p[n - 1], 0xa5);
  hd::host_deallocate(p, n);
}

TEST(HostMemory, LargeAllocationsLandOnHugePagesUnlessTurnedOff) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator maps large blocks itself";
#endif
  std::string const mode = thp_mode();
  if (mode != "always" && mode != "madvise")
    GTEST_SKIP() << "transparent huge pages are '" << mode << "' on this system";
  std::size_t const n = 8u << 20;
  {
    env_guard const on(nullptr);
    void* p = hd::host_allocate(n);
    std::memset(p, 1, n); // first touch: the kernel places the pages now
    long const kb = huge_kb_at(p);
    hd::host_deallocate(p, n);
    EXPECT_GT(kb, 0) << "no huge page in an 8 MiB workspace-sized allocation (THP " << mode << ")";
  }
  if (mode == "always") return; // every large mapping may get huge pages: nothing to turn off
  // Memory standing in for a caller's tensor keeps to ordinary pages, like the caller's own.
  void* t = hd::host_allocate(n, false);
  std::memset(t, 1, n);
  long const tkb = huge_kb_at(t);
  hd::host_deallocate(t, n, false);
  EXPECT_EQ(tkb, 0) << "caller-like memory got huge pages";
  env_guard const off("off");
  void* p = hd::host_allocate(n);
  std::memset(p, 1, n);
  long const kb = huge_kb_at(p);
  hd::host_deallocate(p, n);
  EXPECT_EQ(kb, 0) << "HALOX_HUGE_PAGES=off still gave huge pages";
}

} // namespace
