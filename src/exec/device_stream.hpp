#pragma once
// A stream of the library's own on the current CUDA device, for work outside the caller's
// streams (the tuner zeroes and times its scratch buffers on one). Opaque: no CUDA header here,
// so layers above exec use device memory without including one.

#include <cstddef>
#include <memory>
#include <string>

namespace halox::detail {

class device_stream {
public:
  /// Creates a non-blocking stream on the current device; throws errc::unsupported in a build
  /// without CUDA, errc::cuda_error when CUDA refuses.
  device_stream();
  ~device_stream();
  device_stream(device_stream const&) = delete;
  device_stream& operator=(device_stream const&) = delete;

  /// The cudaStream_t, as executors take it.
  [[nodiscard]] void* get() const noexcept;
  /// Enqueues a zero fill of `bytes` device bytes at `p`.
  void zero(void* p, std::size_t bytes);
  /// Blocks until the work enqueued so far is done.
  void synchronize();

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// The name of the current CUDA device, or "unknown-device" when there is none to ask (also in
/// a build without CUDA).
[[nodiscard]] std::string current_device_name();

} // namespace halox::detail
