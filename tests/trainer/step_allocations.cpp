// LD_PRELOAD library for the trainer.step_allocations tests: counts the C++ allocations (every
// operator new) made inside halox-train's training steps, which the trainer brackets with
// MPI_Pcontrol(1) ... MPI_Pcontrol(0). The first HALOX_SKIP_STEPS steps (default 0) are not
// counted: the first epochs build plans and fill the synthetic-data cache. At exit each process
// prints what it counted and exits with status 3 when a counted step allocated, or when no step
// was counted (a test that counted nothing proves nothing).
//
// Only operator new is counted: the MPI library, UCX and OpenBLAS are C and allocate with malloc
// inside their own calls (an MPICH all-reduce allocates its schedule every time), which a
// program cannot avoid; halox, its operators and the trainer are C++. oneDNN is C++ too, and its
// primitive execute builds a map of its arguments and an execution context on every call: each
// counted allocation is therefore attributed by its call stack to the first caller outside this
// library and libstdc++. Those made by oneDNN's own code are reported apart and do not fail the
// test; everything else (halox, the trainer, and oneDNN's header-only C++ wrappers that halox
// compiles into its own code) must make none.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>

#include <cstring>

#include <dlfcn.h>
#include <execinfo.h>
#include <unistd.h>

namespace {

std::atomic<long> allocations{0};
std::atomic<long> onednn_allocations{0}; // made by libdnnl's own code inside its calls
std::atomic<bool> counting{false};
long steps_seen = 0;
long steps_counted = 0;

long skip_steps() {
  static long const skip = [] {
    char const* e = std::getenv("HALOX_SKIP_STEPS");
    return e ? std::atol(e) : 0L;
  }();
  return skip;
}

// The call stacks of the first counted allocations go to stderr, to say what allocated
// (addr2line -C -f -e <halox-train> <offset> names the function).
void trace(long k, std::size_t n) {
  if (k >= 6) return;
  thread_local bool busy = false; // backtrace may allocate on its first call
  if (busy) return;
  busy = true;
  char head[96];
  int const len =
      std::snprintf(head, sizeof head, "halox step allocation %ld (%zu bytes) at:\n", k + 1, n);
  (void)!write(2, head, static_cast<std::size_t>(len));
  void* frames[16];
  backtrace_symbols_fd(frames, backtrace(frames, 16), 2);
  busy = false;
}

// The shared object holding `address`, or "" when none is known.
char const* object_of(void* address) {
  Dl_info info{};
  return dladdr(address, &info) != 0 && info.dli_fname ? info.dli_fname : "";
}

// True when the first caller outside this library and libstdc++ is oneDNN's library.
bool made_by_onednn() {
  thread_local bool busy = false; // backtrace may allocate on its first call
  if (busy) return false;
  busy = true;
  void* frames[32];
  int const depth = backtrace(frames, 32);
  static char const* const self = object_of(reinterpret_cast<void*>(&object_of));
  bool onednn = false;
  for (int i = 1; i < depth; ++i) {
    char const* const object = object_of(frames[i]);
    if (std::strcmp(object, self) == 0 || std::strstr(object, "libstdc++") != nullptr) continue;
    onednn = std::strstr(object, "libdnnl") != nullptr;
    break;
  }
  busy = false;
  return onednn;
}

void* counted(std::size_t n, std::size_t align) {
  if (counting.load(std::memory_order_relaxed)) {
    if (made_by_onednn())
      onednn_allocations.fetch_add(1, std::memory_order_relaxed);
    else
      trace(allocations.fetch_add(1, std::memory_order_relaxed), n);
  }
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(n ? n : 1);
  } else if (posix_memalign(&p, std::max(align, sizeof(void*)), n ? n : 1) != 0) {
    p = nullptr;
  }
  if (!p) throw std::bad_alloc();
  return p;
}

__attribute__((destructor)) void report() {
  if (steps_seen == 0) return; // not halox-train (mpiexec, a helper process)
  long const n = allocations.load();
  char line[300];
  int const len = std::snprintf(line, sizeof line,
                                "halox step allocations: %ld in %ld steps (first %ld steps not "
                                "counted; %ld more inside oneDNN's own calls)\n",
                                n, steps_counted, skip_steps(), onednn_allocations.load());
  (void)!write(2, line, static_cast<std::size_t>(len));
  if (n != 0 || steps_counted == 0) _exit(3);
}

} // namespace

extern "C" int MPI_Pcontrol(const int level, ...) {
  if (level == 1) {
    ++steps_seen;
    if (steps_seen > skip_steps()) {
      ++steps_counted;
      counting.store(true);
    }
  } else if (level == 0) {
    counting.store(false);
  }
  return MPI_SUCCESS;
}

void* operator new(std::size_t n) { return counted(n, 0); }
void* operator new[](std::size_t n) { return counted(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) {
  return counted(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return counted(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
