#pragma once
// Event bookkeeping shared by the GPU executors: orders `wait`'s stream after `start`'s when the
// caller passes different streams, and tracks when the last unpack has finished reading the
// landing area, so the next exchange does not receive into bytes still being read.

#include "exec/cuda/cuda_handle.hpp"

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
    unpack_stream_ = s;
    pending_ = true;
  }
  /// Orders a new exchange's work on `s` after the previous unpack, which still reads the stream
  /// buffer: on the device when that unpack ran on another stream (on the same stream the order
  /// is implicit), and on the host as well when `host` is set, before MPI (driven by the host)
  /// may write the landing area again. Returns at once when the unpack has already run.
  void after_previous_unpack(cudaStream_t s, bool host) {
    if (!pending_) return;
    if (host) {
      HALOX_CUDA_CHECK(cudaEventSynchronize(unpacked_.get()));
      pending_ = false;
    } else if (s != unpack_stream_) {
      HALOX_CUDA_CHECK(cudaStreamWaitEvent(s, unpacked_.get(), 0));
    }
  }

private:
  unique_event started_, unpacked_;
  cudaStream_t start_stream_ = nullptr;
  cudaStream_t unpack_stream_ = nullptr;
  bool pending_ = false;
};

} // namespace halox::detail
