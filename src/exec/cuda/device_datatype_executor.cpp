// device_mpi_datatype: device buffers handed to MPI with derived datatypes, no halox packing of
// messages. It exists to measure how an MPI library's datatype engine treats GPU memory (many
// fall back to one cudaMemcpy per contiguous run). Local copies and fills still use the pack
// kernels; a reverse exchange receives into a landing area and combines with the unpack kernel.
//
// The datatypes are the host backend's (exec/mpi/mpi_types.hpp): one per run of regions of one
// buffer, relative to that buffer, built once whatever the buffer addresses.

#include "exec/cuda/device_executor.hpp"
#include "exec/cuda/device_executors.hpp"
#include "exec/mpi/mpi_types.hpp"

#include <halox/error.hpp>

#include <vector>

namespace halox::detail {

namespace {

class device_datatype_executor final : public device_executor {
public:
  device_datatype_executor(schedule s, exec_config const& cfg)
      : device_executor(std::move(s), cfg, {false, true, cfg.fill_value, true}),
        ready_(make_sync_event()), types_(sched_) {
    require_cuda_aware_mpi(cfg_.comm, kind());
    for (auto const o : pack_.layout().recv_offset)
      landing_offset_.push_back(static_cast<std::size_t>(o));
    reqs_.assign(types_.requests(), MPI_REQUEST_NULL);
    types_.describe(info_);
  }

  [[nodiscard]] backend kind() const noexcept override { return backend::device_mpi_datatype; }

protected:
  void post(void* stream) override {
    auto const st = static_cast<cudaStream_t>(stream);
    bool const combine = op_ != combine_op::replace;
    std::size_t const nr = types_.recv_requests();
    order_.after_previous_unpack(st, nr > 0 && combine);
    pack_.pack(bufs_, st); // local-copy sources
    if (!reqs_.empty()) {
      // MPI reads and writes the caller's buffers directly: the stream's earlier work first.
      HALOX_CUDA_CHECK(cudaEventRecord(ready_.get(), st));
      HALOX_CUDA_CHECK(cudaEventSynchronize(ready_.get()));
    }
    types_.post(bufs_, combine ? reinterpret_cast<std::byte*>(pack_.stream()) : nullptr,
                landing_offset_.data(), cfg_.tag, cfg_.comm, reqs_.data());
    order_.started(st);
  }

  void complete(void* stream) override {
    auto const st = static_cast<cudaStream_t>(stream);
    std::size_t const nr = types_.recv_requests();
    order_.join(st);
    wait_all(0, nr);
    pack_.unpack(bufs_, op_, st, op_ != combine_op::replace);
    order_.unpacked(st);
    wait_all(nr, reqs_.size() - nr);
  }

private:
  unique_event ready_;
  part_exchange types_;
  std::vector<std::size_t> landing_offset_; // receive message i's parts land at stream + this
};

} // namespace

std::unique_ptr<executor> make_device_datatype_executor(backend, schedule const& s,
                                                        exec_config const& cfg) {
  HALOX_REQUIRE(cfg.memory == memory_space::device, errc::unsupported,
                "backend device_mpi_datatype runs on device memory only");
  return std::make_unique<device_datatype_executor>(s, cfg);
}

} // namespace halox::detail
