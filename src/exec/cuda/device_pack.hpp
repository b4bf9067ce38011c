#pragma once
// The device half of every GPU executor: descriptor batches uploaded once at plan time, the
// packed-stream buffer, and the stream-ordered pack/unpack launches.

#include "exec/combine.hpp"
#include "exec/context_state.hpp"
#include "exec/cuda/pack_batch.hpp"
#include "plan/schedule.hpp"

#include "exec/cuda/cuda_handle.hpp"

#include <vector>

namespace halox::detail {

/// What a device_pack moves through its stream buffer.
struct device_pack_options {
  bool pack_sends = true;     ///< pack the send regions (false: the transport reads the buffers)
  bool unpack_recvs = true;   ///< unpack the receive regions (false: the transport writes them)
  double fill_value = 0.0;    ///< value of the schedule's fill regions
  bool local_variant = false; ///< also build an unpack without the receive regions
};

/// Packs and unpacks one schedule on the device. Local copies and fills always go through it.
class device_pack {
public:
  /// Builds the batches and uploads the descriptors into memory from `ctx` (on the current
  /// device; synchronous, plan time only). The stream buffer is workspace: see `set_stream`.
  device_pack(schedule const& s, device_pack_options const& o,
              std::shared_ptr<context_state> const& ctx);

  /// Device bytes of the packed stream (the workspace area `set_stream` points to).
  [[nodiscard]] std::size_t stream_bytes() const noexcept {
    return static_cast<std::size_t>(layout_.total);
  }
  /// Uses `p` (at least `stream_bytes()` of device memory, 16-byte aligned) as the stream.
  void set_stream(unsigned char* p) noexcept {
    stream_ = p;
    args_.stream = p;
  }

  /// Enqueues on `st` the pack of the send regions and local-copy sources of `bufs`.
  void pack(void* const* bufs, cudaStream_t st);
  /// Enqueues on `st` the unpack of the receive regions, local-copy destinations and fills,
  /// combining with `op`: one launch per conflict level. `with_recvs` false (only when built
  /// with `local_variant`) leaves the receive regions out.
  void unpack(void* const* bufs, combine_op op, cudaStream_t st, bool with_recvs = true);

  /// Device base of the packed stream (null when the schedule moves nothing).
  [[nodiscard]] unsigned char* stream() const noexcept { return stream_; }
  /// Where each message lives in the stream.
  [[nodiscard]] gpu::stream_layout const& layout() const noexcept { return layout_; }
  /// The unpack batch (host copy): its launches are the conflict levels, its `source` the
  /// order in which contributions to one cell are applied.
  [[nodiscard]] gpu::desc_batch const& unpack_batch() const noexcept { return unpack_; }

private:
  void bind(void* const* bufs);
  void run(gpu::desc_batch const& b, gpu::region_desc const* d, bool pack, cudaStream_t st);

  std::vector<std::size_t> elem_size_;
  gpu::stream_layout layout_;
  gpu::desc_batch pack_, unpack_, unpack_local_;
  memory_block descs_;
  unsigned char* stream_ = nullptr;
  gpu::region_desc const* pack_descs_ = nullptr;
  gpu::region_desc const* unpack_descs_ = nullptr;
  gpu::region_desc const* unpack_local_descs_ = nullptr;
  gpu::launch_args args_;
  std::vector<void*> checked_; // slot pointers already checked to be device-accessible
};

} // namespace halox::detail
