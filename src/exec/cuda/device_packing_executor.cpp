// The device packing executor: pack kernels, a transport, unpack kernels, all ordered on the
// caller's stream (cuda_aware_mpi, staged_mpi and nccl are presets of it).
//
// start: order the receives after the previous exchange's unpack (which read the same landing
// area); a host-driven transport posts its receives at once. Enqueue the pack on the caller's
// stream (after the caller's earlier work); with staging, enqueue the copy of the send area to
// pinned host memory. A host-driven transport must not read the send area before it is written:
// record an event, wait for that event only, post the sends. A stream-ordered transport posts
// its receives and sends behind the pack on the stream instead, and the host never waits.
//
// wait: complete the receives (at once for a stream-ordered transport); with staging, enqueue
// the copy of the receive area to the device; enqueue the unpack; complete the sends. The host
// never waits for the unpack: later work on the stream is ordered after it.

#include "exec/cuda/device_executor.hpp"
#include "exec/cuda/device_executors.hpp"
#include "exec/mpi/mpi_transport.hpp"

#include <halox/error.hpp>

#include <string>

namespace halox::detail {

namespace {

class device_packing_executor final : public device_executor {
public:
  device_packing_executor(schedule s, exec_config const& cfg, backend preset, staging where,
                          transport_maker make)
      : device_executor(std::move(s), cfg, preset, {true, true, cfg.fill_value}), preset_(preset),
        staged_(where == staging::pinned_host), packed_(make_sync_event()) {
    // The transport first: making it may be collective (NCCL creates its communicator).
    transport_ = make(waits());
    HALOX_REQUIRE(!(staged_ && transport_->stream_ordered()), errc::internal,
                  std::string("backend ") + to_string(preset) +
                      ": a stream-ordered transport moves device memory, it is never staged");
    auto const& l = pack_.layout();
    if (staged_)
      host_area_ =
          reserve(memory_kind::pinned_host, static_cast<std::size_t>(l.recv_lo + l.recv_bytes));
    declare_messages(false);
  }

  [[nodiscard]] backend kind() const noexcept override { return preset_; }

protected:
  void on_bind() override {
    device_executor::on_bind();
    transport_->bind(bases());
    if (!transport_->fixed_buffers()) return;
    std::size_t const nr = sched_.recvs.size();
    for (std::size_t i = 0; i < nr + sched_.sends.size(); ++i)
      transport_->attach(i, reinterpret_cast<std::byte*>(wire_base()) + offset(i));
  }

  void post(void* stream) override {
    auto const st = static_cast<cudaStream_t>(stream);
    auto const& l = pack_.layout();
    bool const on_stream = transport_->stream_ordered();
    std::size_t const nr = sched_.recvs.size();
    std::size_t const ns = sched_.sends.size();
    unsigned char* const base = wire_base();
    // The landing area is free again once the previous unpack read it: on the stream for a
    // stream-ordered transport, on the host before a host-driven one may write it.
    order_.after_previous_unpack(st, nr > 0 && !on_stream);
    transport_->use_stream(st);
    if (!on_stream) post_range(base, 0, nr);
    pack_.pack(bufs_, st);
    if (ns > 0 && !on_stream) {
      if (staged_)
        HALOX_CUDA_CHECK(cudaMemcpyAsync(base, pack_.stream(),
                                         static_cast<std::size_t>(l.send_bytes),
                                         cudaMemcpyDeviceToHost, st));
      HALOX_CUDA_CHECK(cudaEventRecord(packed_.get(), st));
      HALOX_CUDA_CHECK(cudaEventSynchronize(packed_.get()));
    }
    if (on_stream) post_range(base, 0, nr);
    post_range(base, nr, ns);
    transport_->posted();
    order_.started(st);
  }

  void complete(void* stream) override {
    auto const st = static_cast<cudaStream_t>(stream);
    auto const& l = pack_.layout();
    order_.join(st);
    while (transport_->wait_recv() != transport::none) {
    }
    if (staged_ && !sched_.recvs.empty())
      HALOX_CUDA_CHECK(cudaMemcpyAsync(pack_.stream() + l.recv_lo, wire_base() + l.recv_lo,
                                       static_cast<std::size_t>(l.recv_bytes),
                                       cudaMemcpyHostToDevice, st));
    pack_.unpack(bufs_, op_, st);
    order_.unpacked(st);
    transport_->wait_sends();
  }

private:
  /// Where the transport reads and writes the packed stream: the device stream, or its pinned
  /// host copy (same offsets).
  [[nodiscard]] unsigned char* wire_base() const noexcept {
    return staged_ ? reinterpret_cast<unsigned char*>(ws(memory_kind::pinned_host, host_area_))
                   : pack_.stream();
  }
  /// Offset in the packed stream of request `i` (receives, then sends).
  [[nodiscard]] std::size_t offset(std::size_t i) const noexcept {
    auto const& l = pack_.layout();
    std::size_t const nr = sched_.recvs.size();
    return static_cast<std::size_t>(i < nr ? l.recv_offset[i] : l.send_offset[i - nr]);
  }
  /// Posts requests [first, first + n) from `base`.
  void post_range(unsigned char* base, std::size_t first, std::size_t n) {
    for (std::size_t i = first; i < first + n; ++i) transport_->post(i, base + offset(i), 0);
  }

  backend preset_;
  bool staged_;
  unique_event packed_;
  std::size_t host_area_ = 0;
};

} // namespace

std::unique_ptr<executor> make_device_packing_executor(backend preset, schedule const& s,
                                                       exec_config const& cfg, staging where,
                                                       transport_maker make) {
  HALOX_REQUIRE(cfg.memory == memory_space::device, errc::unsupported,
                std::string("backend ") + to_string(preset) + " runs on device memory only");
  return std::make_unique<device_packing_executor>(s, cfg, preset, where, make);
}

std::unique_ptr<transport> make_cuda_aware_mpi_transport(wait_context& waits) {
  require_cuda_aware_mpi(waits.config().comm, waits.kind());
  return make_mpi_transport(waits);
}

} // namespace halox::detail
