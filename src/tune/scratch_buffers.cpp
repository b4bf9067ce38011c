#include "tune/scratch_buffers.hpp"

#include <halox/config.hpp>
#include <halox/error.hpp>

#include <cstring>

#if HALOX_HAS_CUDA
#include "exec/cuda/cuda_handle.hpp"
#endif

namespace halox::detail {

namespace {
// Never hand a null pointer to an executor, even for an empty slot.
constexpr std::size_t min_bytes = 64;

std::size_t slot_bytes(slot_layout const& l) {
  std::size_t const n = static_cast<std::size_t>(l.elements > 0 ? l.elements : 0) * l.elem_size;
  return n < min_bytes ? min_bytes : n;
}
} // namespace

#if HALOX_HAS_CUDA
struct scratch_buffers::device_state {
  unique_stream stream;
};
#else
struct scratch_buffers::device_state {};
#endif

scratch_buffers::scratch_buffers(schedule const& s, memory_space mem,
                                 std::shared_ptr<context_state> const& ctx) {
  if (mem == memory_space::host) {
    for (auto const& l : s.slots) {
      blocks_.emplace_back(ctx, slot_bytes(l), memory_kind::host, /*like_caller=*/true);
      std::memset(blocks_.back().data(), 0, blocks_.back().size());
      ptrs_.push_back(blocks_.back().data());
    }
    return;
  }
#if HALOX_HAS_CUDA
  device_ = std::make_unique<device_state>();
  HALOX_CUDA_CHECK(cudaStreamCreateWithFlags(device_->stream.out(), cudaStreamNonBlocking));
  for (auto const& l : s.slots) {
    std::size_t const n = slot_bytes(l);
    blocks_.emplace_back(ctx, n, memory_kind::device);
    HALOX_CUDA_CHECK(cudaMemsetAsync(blocks_.back().data(), 0, n, device_->stream.get()));
    ptrs_.push_back(blocks_.back().data());
  }
  HALOX_CUDA_CHECK(cudaStreamSynchronize(device_->stream.get()));
#else
  throw error(errc::unsupported, "device memory needs a CUDA build of halox "
                                 "(-DHALOX_ENABLE_CUDA=ON)");
#endif
}

scratch_buffers::~scratch_buffers() = default;

void* scratch_buffers::stream() const noexcept {
#if HALOX_HAS_CUDA
  if (device_) return device_->stream.get();
#endif
  return nullptr;
}

void scratch_buffers::synchronize() {
#if HALOX_HAS_CUDA
  if (device_) HALOX_CUDA_CHECK(cudaStreamSynchronize(device_->stream.get()));
#endif
}

std::string device_kind(memory_space mem) {
  if (mem == memory_space::host) return "host";
#if HALOX_HAS_CUDA
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&p, dev) == cudaSuccess)
    return p.name;
#endif
  return "unknown-device";
}

} // namespace halox::detail
