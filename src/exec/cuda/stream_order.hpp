#pragma once
// Event bookkeeping shared by the GPU executors: orders `wait`'s stream after `start`'s when the
// caller passes different streams, and tracks when the last unpack has finished reading the
// landing area, so the next exchange does not receive into bytes still being read.

#include <halox/detail/cuda_handle.hpp>

namespace halox::detail {

class stream_order {
public:
  stream_order() : started_(make_sync_event()), unpacked_(make_sync_event()) {}
  stream_order(stream_order const&) = delete;
  stream_order& operator=(stream_order const&) = delete;
  /// Nothing of the executor may be freed while its last unpack can still run.
  ~stream_order() {
    if (pending_) cudaEventSynchronize(unpacked_.get());
  }

  /// Marks the end of `start`'s work on `s`.
  void started(cudaStream_t s) {
    HALOX_CUDA_CHECK(cudaEventRecord(started_.get(), s));
    start_stream_ = s;
  }
  /// Makes `s` (wait's stream) wait for start's work when it is another stream.
  void join(cudaStream_t s) {
    if (s != start_stream_) HALOX_CUDA_CHECK(cudaStreamWaitEvent(s, started_.get(), 0));
  }
  /// Marks the end of the unpack on `s`.
  void unpacked(cudaStream_t s) {
    HALOX_CUDA_CHECK(cudaEventRecord(unpacked_.get(), s));
    pending_ = true;
  }
  /// Blocks the host until the last unpack has run (before the host lets MPI write the landing
  /// area again). Returns at once when it already has.
  void host_wait_unpacked() {
    if (!pending_) return;
    HALOX_CUDA_CHECK(cudaEventSynchronize(unpacked_.get()));
    pending_ = false;
  }
  /// Makes `s` wait for the last unpack (device side; for transports ordered on the stream).
  void stream_wait_unpacked(cudaStream_t s) {
    if (pending_) HALOX_CUDA_CHECK(cudaStreamWaitEvent(s, unpacked_.get(), 0));
  }

private:
  unique_event started_, unpacked_;
  cudaStream_t start_stream_ = nullptr;
  bool pending_ = false;
};

} // namespace halox::detail
