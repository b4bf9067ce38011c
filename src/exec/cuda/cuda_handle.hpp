#pragma once
/// \file cuda_handle.hpp
/// Check macros and RAII owners for CUDA (and, in NCCL builds, NCCL) resources. Only included by
/// code built with CUDA enabled.

#include <halox/config.hpp>
#include <halox/detail/handle.hpp>
#include <halox/error.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#if HALOX_HAS_NCCL
#include <nccl.h>
#endif

namespace halox::detail {

/// Throws `halox::error` (errc::cuda_error) for a failed CUDA call.
[[noreturn]] inline void throw_cuda_error(cudaError_t rc, char const* call, char const* file,
                                          int line) {
  throw_error(errc::cuda_error,
              std::string("CUDA call failed with ") + cudaGetErrorName(rc) + ": " +
                  cudaGetErrorString(rc),
              call, file, line);
}

} // namespace halox::detail

/// Evaluates a CUDA runtime call once and throws `halox::error` (errc::cuda_error) naming the
/// call unless it returned cudaSuccess. Never compiled out.
#define HALOX_CUDA_CHECK(call)                                                                     \
  do {                                                                                             \
    cudaError_t const halox_cuda_rc_ = (call);                                                     \
    if (halox_cuda_rc_ != cudaSuccess)                                                             \
      ::halox::detail::throw_cuda_error(halox_cuda_rc_, #call, __FILE__, __LINE__);                \
  } while (0)

namespace halox::detail {

struct stream_traits {
  static cudaStream_t null() noexcept { return nullptr; }
  static void release(cudaStream_t& s) noexcept { cudaStreamDestroy(s); }
};
struct event_traits {
  static cudaEvent_t null() noexcept { return nullptr; }
  static void release(cudaEvent_t& e) noexcept { cudaEventDestroy(e); }
};
struct pinned_traits {
  static void* null() noexcept { return nullptr; }
  static void release(void*& p) noexcept { cudaFreeHost(p); }
};
struct device_memory_traits {
  static void* null() noexcept { return nullptr; }
  static void release(void*& p) noexcept { cudaFree(p); }
};

/// Owned CUDA stream.
using unique_stream = unique_handle<cudaStream_t, stream_traits>;
/// Owned CUDA event.
using unique_event = unique_handle<cudaEvent_t, event_traits>;
/// Owned page-locked host allocation.
using unique_pinned = unique_handle<void*, pinned_traits>;
/// Owned device allocation.
using unique_device_memory = unique_handle<void*, device_memory_traits>;

/// A new event without timing (the cheapest kind to record and synchronise on).
[[nodiscard]] inline unique_event make_sync_event() {
  unique_event e;
  HALOX_CUDA_CHECK(cudaEventCreateWithFlags(e.out(), cudaEventDisableTiming));
  return e;
}
/// `bytes` of device memory (none when `bytes` is 0).
[[nodiscard]] inline unique_device_memory make_device_memory(std::size_t bytes) {
  unique_device_memory m;
  if (bytes > 0) HALOX_CUDA_CHECK(cudaMalloc(m.out(), bytes));
  return m;
}
/// `bytes` of page-locked host memory (none when `bytes` is 0).
[[nodiscard]] inline unique_pinned make_pinned(std::size_t bytes) {
  unique_pinned m;
  if (bytes > 0) HALOX_CUDA_CHECK(cudaMallocHost(m.out(), bytes));
  return m;
}

} // namespace halox::detail

#if HALOX_HAS_NCCL

namespace halox::detail {

/// Throws `halox::error` (errc::nccl_error) for a failed NCCL call.
[[noreturn]] inline void throw_nccl_error(ncclResult_t rc, char const* call, char const* file,
                                          int line) {
  throw_error(errc::nccl_error,
              "NCCL call failed with code " + std::to_string(static_cast<int>(rc)) + ": " +
                  ncclGetErrorString(rc),
              call, file, line);
}

struct nccl_comm_traits {
  static ncclComm_t null() noexcept { return nullptr; }
  static void release(ncclComm_t& c) noexcept { ncclCommDestroy(c); }
};

/// Owned NCCL communicator.
using unique_nccl_comm = unique_handle<ncclComm_t, nccl_comm_traits>;

} // namespace halox::detail

/// Evaluates an NCCL call once and throws `halox::error` (errc::nccl_error) naming the call
/// unless it returned ncclSuccess. Never compiled out.
#define HALOX_NCCL_CHECK(call)                                                                     \
  do {                                                                                             \
    ncclResult_t const halox_nccl_rc_ = (call);                                                    \
    if (halox_nccl_rc_ != ncclSuccess)                                                             \
      ::halox::detail::throw_nccl_error(halox_nccl_rc_, #call, __FILE__, __LINE__);                \
  } while (0)

#endif
