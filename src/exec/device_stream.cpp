#include "exec/device_stream.hpp"

#include <halox/config.hpp>
#include <halox/error.hpp>

#if HALOX_HAS_CUDA
#include "exec/cuda/cuda_handle.hpp"
#endif

namespace halox::detail {

#if HALOX_HAS_CUDA
struct device_stream::impl {
  unique_stream stream;
};

device_stream::device_stream() : impl_(std::make_unique<impl>()) {
  HALOX_CUDA_CHECK(cudaStreamCreateWithFlags(impl_->stream.out(), cudaStreamNonBlocking));
}

void* device_stream::get() const noexcept { return impl_->stream.get(); }

void device_stream::zero(void* p, std::size_t bytes) {
  HALOX_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, impl_->stream.get()));
}

void device_stream::synchronize() { HALOX_CUDA_CHECK(cudaStreamSynchronize(impl_->stream.get())); }

std::string current_device_name() {
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&p, dev) == cudaSuccess)
    return p.name;
  return "unknown-device";
}
#else
struct device_stream::impl {};

device_stream::device_stream() {
  throw error(errc::unsupported, "device memory needs a CUDA build of halox "
                                 "(-DHALOX_ENABLE_CUDA=ON)");
}

void* device_stream::get() const noexcept { return nullptr; }
void device_stream::zero(void* /*p*/, std::size_t /*bytes*/) {}
void device_stream::synchronize() {}

std::string current_device_name() { return "unknown-device"; }
#endif

device_stream::~device_stream() = default;

} // namespace halox::detail
