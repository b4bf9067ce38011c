#include "exec/device_probe.hpp"

#include <halox/error.hpp>

#include <cuda_runtime_api.h>

namespace halox::detail {

std::vector<std::string> cuda_device_bus_ids(std::string& problem) {
  int n = 0;
  cudaError_t const rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    problem = std::string("cudaGetDeviceCount returned ") + cudaGetErrorName(rc) + " (" +
              cudaGetErrorString(rc) + ")";
    return {};
  }
  if (n == 0) {
    problem = "cudaGetDeviceCount reported 0 devices";
    return {};
  }
  std::vector<std::string> ids;
  for (int d = 0; d < n; ++d) {
    char id[32] = {}; // "dddd:bb:dd.f" plus room; the runtime NUL-terminates within the length
    cudaError_t const e = cudaDeviceGetPCIBusId(id, static_cast<int>(sizeof id), d);
    if (e != cudaSuccess) {
      problem = "cudaDeviceGetPCIBusId(device " + std::to_string(d) + ") returned " +
                cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
      return {};
    }
    ids.emplace_back(id);
  }
  return ids;
}

void set_current_device(int device) {
  cudaError_t const rc = cudaSetDevice(device);
  HALOX_REQUIRE(rc == cudaSuccess, errc::cuda_error,
                "cudaSetDevice(" + std::to_string(device) + ") returned " + cudaGetErrorName(rc) +
                    " (" + cudaGetErrorString(rc) + "); check CUDA_VISIBLE_DEVICES");
}

} // namespace halox::detail
