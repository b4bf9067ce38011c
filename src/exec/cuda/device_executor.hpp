#pragma once
// What both GPU executors share (the device packing executor behind cuda_aware_mpi, staged_mpi
// and nccl, and device_mpi_datatype): the device pack engine, its packed-stream area in the
// device workspace (reserved at construction, bound when the workspace is), the ordering
// between one exchange's unpack and the next one's receives into the same area, and the
// transport that moves one request per message, which completes, cancels and abandons them.

#include "exec/cuda/device_pack.hpp"
#include "exec/cuda/stream_order.hpp"
#include "exec/executor.hpp"
#include "exec/transport.hpp"

#include <memory>
#include <utility>

namespace halox::detail {

class device_executor : public executor {
public:
  void warm_up() override { transport_->warm_up(); }

protected:
  /// Builds the pack engine for `s` with `o` (synchronous uploads, plan time) and reserves its
  /// packed stream in the device workspace; `kind` is the backend it implements.
  device_executor(schedule s, exec_config const& cfg, backend kind, device_pack_options const& o)
      : executor(std::move(s), cfg, kind), pack_(sched_, o, cfg_.ctx),
        stream_area_(reserve(memory_kind::device, pack_.stream_bytes())) {}

  void on_bind() override {
    pack_.set_stream(reinterpret_cast<unsigned char*>(ws(memory_kind::device, stream_area_)));
  }

  /// Declares to `transport_` one request per message of the schedule, receives first, each
  /// with its boxes when `walked`, and names them in the wait context (at construction, once
  /// the transport is made).
  void declare_messages(bool walked);

  void cancel_peer(int peer) noexcept override { transport_->cancel_peer(peer); }
  [[nodiscard]] bool abandon_requests(double grace) noexcept override {
    return transport_->abandon(grace);
  }

  device_pack pack_;
  /// After the pack engine, so destroyed before it (and before the workspace): its destructor
  /// waits for the last unpack, which reads both.
  stream_order order_;
  /// Made by the derived executor's constructor, first (making it may be collective). After the
  /// pack engine, so destroyed before it, as the buffers it moves are the pack engine's.
  std::unique_ptr<transport> transport_;

private:
  std::size_t stream_area_;
};

} // namespace halox::detail
