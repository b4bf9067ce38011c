#pragma once
// Where an operator's buffers live. The distributed operators keep a few workspaces of their
// own (the gathered dy, the partial weight gradients, scratch for batch-norm parameters); with a
// host provider they are ordinary host memory, with the cudnn provider device memory. Every
// copy between the two goes through `space_ops`, so one operator implementation serves both.
//
// Device operations run on the default CUDA stream and return when the copy is done, which
// orders them with the cuDNN calls and the device halo exchanges (all on that stream).

#include <halox/backend.hpp>
#include <halox/context.hpp>
#include <halox/ops/tensor_ref.hpp>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace halox::ops::detail {

/// Allocation, zeroing and host transfers in one memory space.
class space_ops {
public:
  explicit space_ops(memory_space m = memory_space::host) noexcept : m_(m) {}
  [[nodiscard]] memory_space space() const noexcept { return m_; }
  [[nodiscard]] bool host() const noexcept { return m_ == memory_space::host; }

  [[nodiscard]] void* allocate(std::size_t bytes) const;
  void release(void* p) const noexcept;
  void zero(void* p, std::size_t bytes) const;
  /// Copies `bytes` from `src` (in this space) to host memory.
  void to_host(void* host_dst, void const* src, std::size_t bytes) const;
  /// Copies `bytes` from host memory to `dst` (in this space).
  void from_host(void* dst, void const* host_src, std::size_t bytes) const;

private:
  memory_space m_;
};

/// A grow-only array of T in one memory space (RAII).
template <class T> class space_buffer {
public:
  explicit space_buffer(space_ops ops = space_ops()) noexcept : ops_(ops) {}
  ~space_buffer() { ops_.release(p_); }
  space_buffer(space_buffer&& o) noexcept
      : ops_(o.ops_), p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  space_buffer& operator=(space_buffer&& o) noexcept {
    std::swap(ops_, o.ops_);
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  space_buffer(space_buffer const&) = delete;
  space_buffer& operator=(space_buffer const&) = delete;

  /// At least `n` elements (contents not kept when it grows); null when n is 0 and nothing was
  /// allocated before.
  T* reserve(std::size_t n) {
    if (n > n_) {
      ops_.release(p_);
      p_ = nullptr;
      n_ = 0;
      p_ = static_cast<T*>(ops_.allocate(n * sizeof(T)));
      n_ = n;
    }
    return p_;
  }
  [[nodiscard]] T* data() const noexcept { return p_; }
  [[nodiscard]] space_ops const& ops() const noexcept { return ops_; }

private:
  space_ops ops_;
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

/// Copies the contiguous row-major host array `src` into the (possibly strided) view `dst`, in
/// `ops`' memory space: one transfer per run of elements contiguous in `dst`.
template <class T> void copy_into(space_ops const& ops, T const* src, tensor_ref<T> const& dst) {
  std::size_t const nd = dst.shape.size();
  for (index_t e : dst.shape)
    if (e == 0) return;
  // The innermost dimensions that are contiguous in dst form one run.
  std::size_t inner = nd;
  index_t run = 1;
  while (inner > 0 && dst.strides[inner - 1] == run) run *= dst.shape[--inner];
  std::vector<index_t> i(inner, 0);
  for (index_t k = 0;; k += run) {
    index_t off = 0;
    for (std::size_t d = 0; d < inner; ++d) off += i[d] * dst.strides[d];
    if (ops.host()) {
      for (index_t j = 0; j < run; ++j) dst.data[off + j] = src[k + j];
    } else {
      ops.from_host(dst.data + off, src + k, static_cast<std::size_t>(run) * sizeof(T));
    }
    int d = static_cast<int>(inner) - 1;
    while (d >= 0 && ++i[d] == dst.shape[d]) i[d--] = 0;
    if (d < 0) return;
  }
}

/// Values of the `n`-element array `p` (in `ops`' space) as a host vector; empty when p is null.
template <class T> std::vector<T> host_copy(space_ops const& ops, T const* p, std::size_t n) {
  if (p == nullptr) return {};
  std::vector<T> v(n);
  if (n > 0) ops.to_host(v.data(), p, n * sizeof(T));
  return v;
}

/// At least `bytes` of the calling thread's shared workspace in `ops`' memory space: what a
/// backward call gathers dy into, needed from the gather's start to the end of that call. One
/// buffer per memory space and thread, as large as the largest call asked for; what it held
/// is lost when it grows. Counted by `shared_scratch_bytes()`.
[[nodiscard]] void* shared_workspace(space_ops const& ops, std::size_t bytes);
/// The calling thread's scratch allocator (`set_scratch_allocator`); empty: halox's own.
[[nodiscard]] allocator const& scratch_allocator() noexcept;

/// Bytes of the calling thread's shared workspaces, host and device.
[[nodiscard]] std::size_t shared_workspace_bytes(bool device) noexcept;
/// Frees them.
void release_shared_workspaces() noexcept;

/// Whether device memory can be used here: a CUDA build of the operators and a visible device.
/// Otherwise false, with the reason in `why`.
[[nodiscard]] bool device_usable(std::string& why);

} // namespace halox::ops::detail
