// device_mpi_datatype: device buffers handed to MPI with derived datatypes, no halox packing of
// messages. It exists to measure how an MPI library's datatype engine treats GPU memory (many
// fall back to one cudaMemcpy per contiguous run). Local copies and fills still use the pack
// kernels; a reverse exchange receives into a landing area and combines with the unpack kernel.
//
// Its messages go through the MPI point-to-point transport walking each message's boxes (the
// host `datatypes` packing's path, exec/mpi/mpi_transport.hpp): one datatype per part of a
// message, relative to its buffer, built once whatever the buffer addresses. What is its own is
// the ordering against the caller's stream: MPI reads and writes the caller's buffers
// directly, so the host waits for the stream's earlier work before it posts.

#include "exec/cuda/device_executor.hpp"
#include "exec/cuda/device_executors.hpp"
#include "exec/mpi/mpi_transport.hpp"

#include <halox/error.hpp>

namespace halox::detail {

namespace {

class device_datatype_executor final : public device_executor {
public:
  device_datatype_executor(schedule s, exec_config const& cfg)
      : device_executor(std::move(s), cfg, backend::device_mpi_datatype,
                        {false, true, cfg.fill_value, true}),
        ready_(make_sync_event()) {
    require_cuda_aware_mpi(cfg_.comm, kind());
    transport_ = make_mpi_transport(waits());
    declare_messages(true);
  }

  [[nodiscard]] backend kind() const noexcept override { return backend::device_mpi_datatype; }

protected:
  void on_bind() override {
    device_executor::on_bind();
    transport_->bind(bases());
  }

  void post(void* stream) override {
    auto const st = static_cast<cudaStream_t>(stream);
    bool const combine = op_ != combine_op::replace;
    std::size_t const nr = sched_.recvs.size();
    std::size_t const ns = sched_.sends.size();
    order_.after_previous_unpack(st, nr > 0 && combine);
    pack_.pack(bufs_, st); // local-copy sources
    if (nr + ns > 0) {
      // MPI reads and writes the caller's buffers directly: the stream's earlier work first.
      HALOX_CUDA_CHECK(cudaEventRecord(ready_.get(), st));
      HALOX_CUDA_CHECK(cudaEventSynchronize(ready_.get()));
    }
    // A combining receive cannot let MPI write into the buffer (the values there take part):
    // its parts land one after the other in the packed stream, where the unpack combines them.
    auto const& l = pack_.layout();
    auto* const bufs = const_cast<void**>(bufs_);
    for (std::size_t i = 0; i < nr; ++i) {
      if (combine)
        transport_->post(i, pack_.stream() + l.recv_offset[i], 0);
      else
        transport_->post(i, bufs, transport::walked);
    }
    for (std::size_t j = 0; j < ns; ++j) transport_->post(nr + j, bufs, transport::walked);
    transport_->posted();
    order_.started(st);
  }

  void complete(void* stream) override {
    auto const st = static_cast<cudaStream_t>(stream);
    order_.join(st);
    while (transport_->wait_recv() != transport::none) {
    }
    pack_.unpack(bufs_, op_, st, op_ != combine_op::replace);
    order_.unpacked(st);
    transport_->wait_sends();
  }

private:
  unique_event ready_;
};

} // namespace

std::unique_ptr<executor> make_device_datatype_executor(backend, schedule const& s,
                                                        exec_config const& cfg) {
  HALOX_REQUIRE(cfg.memory == memory_space::device, errc::unsupported,
                "backend device_mpi_datatype runs on device memory only");
  return std::make_unique<device_datatype_executor>(s, cfg);
}

} // namespace halox::detail
