// Device memory for the operators' own workspaces (src/ops/memory.hpp): plain cudaMalloc (no
// managed memory) and synchronous copies on the default stream, which the cuDNN handle and the
// device halo exchanges of the operators also use.
#include <halox/error.hpp>

#include <cuda_runtime.h>

#include <string>

namespace halox::ops::detail {
namespace {
void check(cudaError_t e, char const* call, char const* file, int line) {
  if (e != cudaSuccess)
    ::halox::detail::throw_error(errc::cuda_error,
                                 std::string("CUDA: ") + cudaGetErrorString(e) +
                                     " in an operator workspace",
                                 call, file, line);
}
#define HALOX_OPS_CUDA(call) check((call), #call, __FILE__, __LINE__)
} // namespace

void* device_allocate(std::size_t bytes) {
  void* p = nullptr;
  cudaError_t const e = cudaMalloc(&p, bytes);
  HALOX_REQUIRE(e == cudaSuccess, errc::cuda_error,
                "operator workspace: cudaMalloc of " + std::to_string(bytes) + " bytes failed (" +
                    cudaGetErrorString(e) + "); free device memory or use smaller per-rank blocks");
  return p;
}

void device_release(void* p) noexcept { cudaFree(p); }

void device_zero(void* p, std::size_t bytes) { HALOX_OPS_CUDA(cudaMemset(p, 0, bytes)); }

void device_to_host(void* host_dst, void const* src, std::size_t bytes) {
  HALOX_OPS_CUDA(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost));
}

void device_from_host(void* dst, void const* host_src, std::size_t bytes) {
  HALOX_OPS_CUDA(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice));
}

bool device_visible(std::string& why) {
  int n = 0;
  cudaError_t const e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) return true;
  why = std::string("no CUDA device visible (") + cudaGetErrorString(e) + ")";
  return false;
}

} // namespace halox::ops::detail
