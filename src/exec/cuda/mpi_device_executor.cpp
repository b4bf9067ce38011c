// cuda_aware_mpi and staged_mpi: pack on the device, MPI point-to-point, unpack on the device.
//
// start: post the receives; enqueue the pack on the caller's stream (after the caller's earlier
// work); staged: enqueue the copy of the send area to pinned host memory; record an event and
// synchronise on that event only (MPI must not read the send area before it is written); post
// the sends. wait: complete the receives; staged: enqueue the copy of the receive area to the
// device; enqueue the unpack; complete the sends. The host never waits for the unpack: later
// work on the stream is ordered after it.
//
// The packed stream is device workspace; staged_mpi's host copy of it is pinned workspace.

#include "exec/cuda/device_backends.hpp"
#include "exec/cuda/device_executor.hpp"

#include <halox/error.hpp>

#include <vector>

namespace halox::detail {

namespace {

class mpi_device_executor final : public device_executor {
public:
  mpi_device_executor(schedule s, exec_config const& cfg, bool staged)
      : device_executor(std::move(s), cfg, {true, true, cfg.fill_value}), staged_(staged),
        packed_(make_sync_event()) {
    if (!staged_) require_cuda_aware_mpi(cfg_.comm, kind());
    auto const& l = pack_.layout();
    for (auto const& m : sched_.recvs) rcount_.push_back(mpi_int_count(m.bytes, "a message"));
    for (auto const& m : sched_.sends) scount_.push_back(mpi_int_count(m.bytes, "a message"));
    if (staged_)
      host_area_ =
          reserve(memory_kind::pinned_host, static_cast<std::size_t>(l.recv_lo + l.recv_bytes));
    reqs_.assign(sched_.recvs.size() + sched_.sends.size(), MPI_REQUEST_NULL);
    for (auto const& m : sched_.recvs) info_.push_back({m.peer, m.bytes, true});
    for (auto const& m : sched_.sends) info_.push_back({m.peer, m.bytes, false});
  }

  [[nodiscard]] backend kind() const noexcept override {
    return staged_ ? backend::staged_mpi : backend::cuda_aware_mpi;
  }

protected:
  void post(void* stream) override {
    auto const st = static_cast<cudaStream_t>(stream);
    auto const& l = pack_.layout();
    unsigned char* host = host_base();
    unsigned char* base = staged_ ? host : pack_.stream();
    std::size_t const nr = sched_.recvs.size();
    order_.after_previous_unpack(st, nr > 0); // the landing area is free again
    for (std::size_t i = 0; i < nr; ++i)
      HALOX_MPI_CHECK(MPI_Irecv(base + l.recv_offset[i], rcount_[i], MPI_BYTE, sched_.recvs[i].peer,
                                cfg_.tag, cfg_.comm, &reqs_[i]));
    pack_.pack(bufs_, st);
    if (!sched_.sends.empty()) {
      if (staged_)
        HALOX_CUDA_CHECK(cudaMemcpyAsync(host, pack_.stream(),
                                         static_cast<std::size_t>(l.send_bytes),
                                         cudaMemcpyDeviceToHost, st));
      HALOX_CUDA_CHECK(cudaEventRecord(packed_.get(), st));
      HALOX_CUDA_CHECK(cudaEventSynchronize(packed_.get()));
      for (std::size_t i = 0; i < sched_.sends.size(); ++i)
        HALOX_MPI_CHECK(MPI_Isend(base + l.send_offset[i], scount_[i], MPI_BYTE,
                                  sched_.sends[i].peer, cfg_.tag, cfg_.comm, &reqs_[nr + i]));
    }
    order_.started(st);
  }

  void complete(void* stream) override {
    auto const st = static_cast<cudaStream_t>(stream);
    auto const& l = pack_.layout();
    std::size_t const nr = sched_.recvs.size();
    order_.join(st);
    if (nr > 0) {
      wait_all(0, nr);
      if (staged_)
        HALOX_CUDA_CHECK(cudaMemcpyAsync(pack_.stream() + l.recv_lo, host_base() + l.recv_lo,
                                         static_cast<std::size_t>(l.recv_bytes),
                                         cudaMemcpyHostToDevice, st));
    }
    pack_.unpack(bufs_, op_, st);
    order_.unpacked(st);
    wait_all(nr, sched_.sends.size());
  }

private:
  unsigned char* host_base() const noexcept {
    return staged_ ? reinterpret_cast<unsigned char*>(ws(memory_kind::pinned_host, host_area_))
                   : nullptr;
  }

  bool staged_;
  unique_event packed_;
  std::size_t host_area_ = 0;
  std::vector<int> rcount_, scount_;
};

} // namespace

std::unique_ptr<executor> make_mpi_device_executor(schedule const& s, exec_config const& cfg,
                                                   bool staged) {
  return std::make_unique<mpi_device_executor>(s, cfg, staged);
}

} // namespace halox::detail
