// device_mpi_datatype: device buffers handed to MPI with derived datatypes, no halox packing of
// messages. It exists to measure how an MPI library's datatype engine treats GPU memory (many
// fall back to one cudaMemcpy per contiguous run). Local copies and fills still use the pack
// kernels; a reverse exchange receives into a landing area and combines with the unpack kernel.
//
// The datatypes are the host backend's (exec/mpi/mpi_types.hpp): one per run of regions of one
// buffer, relative to that buffer, built once whatever the buffer addresses.

#include "exec/cuda/device_backends.hpp"
#include "exec/cuda/device_pack.hpp"
#include "exec/cuda/stream_order.hpp"
#include "exec/mpi/mpi_types.hpp"

#include <halox/error.hpp>

#include <vector>

namespace halox::detail {

namespace {

class device_datatype_executor final : public executor {
public:
  device_datatype_executor(schedule s, exec_config const& cfg)
      : executor(std::move(s), cfg), pack_(sched_, {false, true, cfg.fill_value, true}, cfg_.ctx),
        ready_(make_sync_event()), send_types_(sched_, sched_.sends),
        recv_types_(sched_, sched_.recvs) {
    require_cuda_aware_mpi(cfg_.comm, kind());
    stream_area_ = reserve(memory_kind::device, pack_.stream_bytes());
    nrecv_ = recv_types_.total_parts();
    reqs_.assign(nrecv_ + send_types_.total_parts(), MPI_REQUEST_NULL);
    for (std::size_t i = 0; i < sched_.recvs.size(); ++i)
      for (auto const& p : recv_types_.parts(i)) info_.push_back({sched_.recvs[i].peer, p.bytes});
    for (std::size_t i = 0; i < sched_.sends.size(); ++i)
      for (auto const& p : send_types_.parts(i))
        info_.push_back({sched_.sends[i].peer, p.bytes, false});
  }

  [[nodiscard]] backend kind() const noexcept override { return backend::device_mpi_datatype; }

protected:
  void on_bind() override {
    pack_.set_stream(reinterpret_cast<unsigned char*>(ws(memory_kind::device, stream_area_)));
  }

  void post(void* stream) override {
    auto const st = static_cast<cudaStream_t>(stream);
    bool const combine = op_ != combine_op::replace;
    order_.after_previous_unpack(st, nrecv_ > 0 && combine);
    pack_.pack(bufs_, st); // local-copy sources
    if (!reqs_.empty()) {
      // MPI reads and writes the caller's buffers directly: the stream's earlier work first.
      HALOX_CUDA_CHECK(cudaEventRecord(ready_.get(), st));
      HALOX_CUDA_CHECK(cudaEventSynchronize(ready_.get()));
    }
    auto const& l = pack_.layout();
    std::size_t k = 0;
    for (std::size_t i = 0; i < sched_.recvs.size(); ++i) {
      int const peer = sched_.recvs[i].peer;
      unsigned char* at = pack_.stream() + l.recv_offset[i];
      for (auto const& p : recv_types_.parts(i)) {
        if (combine) {
          HALOX_MPI_CHECK(MPI_Irecv(at, mpi_int_count(p.bytes, "a message part"), MPI_BYTE, peer,
                                    cfg_.tag, cfg_.comm, &reqs_[k++]));
          at += p.bytes;
        } else {
          HALOX_MPI_CHECK(
              MPI_Irecv(bufs_[p.slot], 1, p.type.get(), peer, cfg_.tag, cfg_.comm, &reqs_[k++]));
        }
      }
    }
    for (std::size_t i = 0; i < sched_.sends.size(); ++i)
      for (auto const& p : send_types_.parts(i))
        HALOX_MPI_CHECK(MPI_Isend(bufs_[p.slot], 1, p.type.get(), sched_.sends[i].peer, cfg_.tag,
                                  cfg_.comm, &reqs_[k++]));
    order_.started(st);
  }

  void complete(void* stream) override {
    auto const st = static_cast<cudaStream_t>(stream);
    order_.join(st);
    wait_all(0, nrecv_);
    pack_.unpack(bufs_, op_, st, op_ != combine_op::replace);
    order_.unpacked(st);
    wait_all(nrecv_, reqs_.size() - nrecv_);
  }

private:
  device_pack pack_;
  unique_event ready_;
  stream_order order_; // after the buffers: its destructor waits for the last unpack
  message_types send_types_, recv_types_;
  std::size_t stream_area_ = 0, nrecv_ = 0;
};

} // namespace

std::unique_ptr<executor> make_device_datatype_executor(schedule const& s, exec_config const& cfg) {
  return std::make_unique<device_datatype_executor>(s, cfg);
}

} // namespace halox::detail
