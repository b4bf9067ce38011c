#pragma once
// Shared pieces of the oneDNN provider: the engine and stream, memory descriptors of strided
// caller views, errors, and the timed choice between candidate primitives.

#include "ops/kernels/geometry.hpp"
#include "ops/providers/choice_cache.hpp"

#include <halox/context.hpp>
#include <halox/error.hpp>

#include <dnnl.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace halox::ops::detail::onednn {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

/// The CPU engine and an in-order stream, one per thread that uses the provider.
struct context {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
};
context& ctx();

/// What a transient buffer of the shared scratch holds during a call.
enum class role {
  src,  ///< x or dx in a primitive's layout
  dst,  ///< y or dy in a primitive's layout (a backward-weights call's dy stays there for
        ///< the backward-data call after it while the role's stamp is unchanged)
  wei,  ///< weights or their gradient in a primitive's layout
  dsrc, ///< pooling's dx before it is copied into the caller's view
  pad,  ///< a primitive's own scratchpad (user-managed, so that it is shared and counted)
  rpad, ///< a reorder's scratchpad (apart from pad: a reorder runs between binding and use)
  count
};

/// The buffers a primitive reads and writes in its own layout (a reordered copy of a caller's
/// view) are needed only during the call that reorders them. Every engine of a thread takes
/// them from this one arena, one buffer per role sized by the largest call, instead of each
/// layer keeping copies of its activations for the life of the network: a deep network then
/// holds a few activations' worth of scratch instead of several per layer. Calls on a thread
/// are sequential, so a role's buffer serves one call at a time; a buffer handed out for a
/// role stays valid until the next `get` of that role, which `stamp` tells.
class scratch_arena {
public:
  scratch_arena() = default;
  scratch_arena(scratch_arena const&) = delete;
  scratch_arena& operator=(scratch_arena const&) = delete;
  /// At least `bytes` (64-byte aligned) for role `r`; what it held before is lost when it
  /// grows. Every call changes the role's stamp.
  void* get(role r, std::size_t bytes);
  /// Changes with every `get` of role `r`: a reader that noted it can tell whether the buffer
  /// still holds what it wrote.
  [[nodiscard]] std::uint64_t stamp(role r) const noexcept {
    return bufs_[static_cast<int>(r)].stamp;
  }
  /// Bytes held over all roles.
  [[nodiscard]] std::size_t bytes() const noexcept;
  /// The most bytes held at once so far (the first calls of a problem measure candidate
  /// layouts, whose buffers may be larger than the chosen one's).
  [[nodiscard]] std::size_t peak() const noexcept { return peak_; }
  /// Frees every buffer.
  void release() noexcept;
  /// Starts recording what each role is asked for (`asked`).
  void mark() noexcept;
  /// The most each role was asked for since `mark`, 64-byte rounded.
  void asked(std::size_t* per_role) const noexcept;
  /// Serves role r from [p + offset, p + offset + size[r]) (offsets in role order) from now on;
  /// a role asked for more gets its own buffer. p null: own buffers again. Every stamp changes.
  void lend(void* p, std::size_t const* size) noexcept;
  /// Around a measurement of candidate layouts: what was recorded before it is what stays.
  struct recorded {
    std::size_t n[static_cast<int>(role::count)];
  };
  [[nodiscard]] recorded record() const noexcept {
    recorded v{};
    for (int k = 0; k < static_cast<int>(role::count); ++k) v.n[k] = seen_[k];
    return v;
  }
  void restore(recorded const& v) noexcept {
    for (int k = 0; k < static_cast<int>(role::count); ++k) seen_[k] = v.n[k];
  }

private:
  struct buf {
    void* p = nullptr;
    std::size_t n = 0;
    std::uint64_t stamp = 0;
    allocator const* from = nullptr; // the caller's allocator that gave p (null: mmap)
  };
  void drop(buf& b) noexcept;
  buf bufs_[static_cast<int>(role::count)];
  std::uint64_t next_ = 0;
  std::size_t peak_ = 0;
  std::size_t seen_[static_cast<int>(role::count)] = {}; // asked since mark, rounded
  char* region_ = nullptr;                               // lent memory, or null
  std::size_t at_[static_cast<int>(role::count)] = {};   // each role's place in it
  std::size_t cap_[static_cast<int>(role::count)] = {};  // and size

public:
  // At thread exit the caller's allocator may be gone already: what it gave is left to it.
  ~scratch_arena() {
    for (buf& b : bufs_)
      if (b.from) b = {};
    release();
  }
};
/// The calling thread's arena.
scratch_arena& arena();
/// Its bytes, its peak, and freeing it (for `shared_scratch_bytes()` and
/// `release_shared_scratch()`).
std::size_t arena_bytes() noexcept;
std::size_t arena_peak() noexcept;
void arena_release() noexcept;

/// A primitive with its arguments bound once. Executing it goes to oneDNN's C API with the
/// prepared argument list: the C++ wrapper's execute copies its argument map into a new vector on
/// every call, an allocation per primitive per layer per step. Memory objects are handles, so a
/// data pointer set on a bound memory later (set_data_handle) is what the next execute reads.
class bound {
public:
  bound() = default;
  bound(dnnl::primitive p, std::initializer_list<std::pair<int, memory>> args);
  /// A reorder from `from` into `to`.
  static bound reorder(memory const& from, memory const& to);
  /// Adds one argument (one the primitive takes only in some configurations).
  void add(int arg, memory const& m);
  /// Enqueues the primitive on `s`; throws dnnl::error as the C++ API does.
  void execute(dnnl::stream const& s) const;
  explicit operator bool() const { return static_cast<bool>(prim_); }

private:
  dnnl::primitive prim_;
  std::vector<memory> held_; // keeps the handles in args_ alive
  std::vector<dnnl_exec_arg_t> args_;
  memory pad_; // a reorder's scratchpad, bound to the arena at each execution
  std::size_t pad_bytes_ = 0;
};

/// Plain (NC + spatial, row-major) and channels-last tags for `nsp` spatial dimensions.
tag plain_tag(int nsp);
tag channels_last_tag(int nsp);
/// Plain weight tag [O, I, k...].
tag weights_tag(int nsp);

/// A caller's strided view of n x c x ext[...] elements (ext over the real spatial dims).
memory::desc strided_md(index_t n, index_t c, dims const& ext, index_t sn, index_t sc,
                        dims const& str);
/// A strided view of `ndims` (at most 12) dimensions; allocates nothing.
memory::desc strided_md(int ndims, index_t const* dims, index_t const* strides);
/// The same from `nsp` (at most 3) spatial extents and strides in arrays; allocates nothing.
memory::desc strided_md(index_t n, index_t c, int nsp, index_t const* ext, index_t sn, index_t sc,
                        index_t const* str);

/// Seconds of wall time of each of `fs`: one warm-up call each, then `rounds` rounds that call
/// every one of them once (in an order rotated per round), the fastest call of each. A machine
/// that slows down for a moment slows every candidate of a round, not only the one then timed.
std::vector<double> time_interleaved(std::vector<std::function<void()>> const& fs, int rounds = 3);

/// Rethrows a dnnl::error as halox::error naming the operation.
[[noreturn]] void rethrow(char const* op, dnnl::error const& e);

/// "a x b x c".
std::string dims_str(memory::dims const& d);

/// A problem (and the layout of the caller's views) as integers: the engines look a known
/// problem up by it on every call, so it is hashed and compared without formatting a key.
using fingerprint = std::vector<std::int64_t>;
/// FNV-1a over a fingerprint's values.
struct fingerprint_hash {
  std::size_t operator()(fingerprint const& f) const noexcept;
};
/// Appends the count and the values of `d`.
void put_dims(fingerprint& f, memory::dims const& d);
/// Appends the rank, dimensions and strides of a caller's view.
void put_md(fingerprint& f, memory::desc const& md);

} // namespace halox::ops::detail::onednn
