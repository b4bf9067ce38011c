#pragma once
// What both GPU executors share (the device packing executor behind cuda_aware_mpi, staged_mpi
// and nccl, and device_mpi_datatype): the device pack engine, its packed-stream area in the
// device workspace (reserved at construction, bound when the workspace is), and the ordering
// between one exchange's unpack and the next one's receives into the same area.

#include "exec/cuda/device_pack.hpp"
#include "exec/cuda/stream_order.hpp"
#include "exec/executor.hpp"

#include <utility>

namespace halox::detail {

class device_executor : public executor {
protected:
  /// Builds the pack engine for `s` with `o` (synchronous uploads, plan time) and reserves its
  /// packed stream in the device workspace.
  device_executor(schedule s, exec_config const& cfg, device_pack_options const& o)
      : executor(std::move(s), cfg), pack_(sched_, o, cfg_.ctx),
        stream_area_(reserve(memory_kind::device, pack_.stream_bytes())) {}

  void on_bind() override {
    pack_.set_stream(reinterpret_cast<unsigned char*>(ws(memory_kind::device, stream_area_)));
  }

  device_pack pack_;
  /// After the pack engine, so destroyed before it (and before the workspace): its destructor
  /// waits for the last unpack, which reads both.
  stream_order order_;

private:
  std::size_t stream_area_;
};

} // namespace halox::detail
