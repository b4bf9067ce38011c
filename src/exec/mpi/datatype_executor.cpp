#include "exec/mpi/datatype_executor.hpp"

#include "exec/cpu/pack.hpp"
#include "exec/mpi/mpi_types.hpp"

#include <halox/error.hpp>

#include <vector>

namespace halox::detail {

namespace {

// mpi_datatype: one MPI message per part, described by a datatype relative to its buffer.
class datatype_executor final : public host_executor {
public:
  datatype_executor(schedule s, exec_config const& cfg)
      : host_executor(std::move(s), cfg), types_(sched_) {
    // A combining receive (reverse exchange) cannot let MPI write into the buffer: the values
    // already there take part. Its parts land one after the other in the workspace (the
    // message's packed order) and are unpacked with the op.
    std::size_t total = 0;
    for (auto const& m : sched_.recvs) {
      roff_.push_back(total);
      total += m.bytes;
    }
    landing_ = reserve(memory_kind::host, total);
    reqs_.assign(types_.requests(), MPI_REQUEST_NULL);
    types_.describe(info_);
  }

  [[nodiscard]] backend kind() const noexcept override { return backend::mpi_datatype; }

protected:
  void post(void*) override {
    bool const landing = op_ != combine_op::replace;
    types_.post(bufs_, landing ? ws(memory_kind::host, landing_) : nullptr, roff_.data(), cfg_.tag,
                cfg_.comm, reqs_.data());
  }

  void receive() override {
    std::size_t const nr = types_.recv_requests();
    wait_all(0, nr);
    if (op_ != combine_op::replace)
      for (std::size_t i = 0; i < sched_.recvs.size(); ++i)
        unpack_message(sched_, sched_.recvs[i], bufs_, ws(memory_kind::host, landing_) + roff_[i],
                       op_);
    wait_all(nr, reqs_.size() - nr);
  }

private:
  part_exchange types_;
  std::size_t landing_ = 0;
  std::vector<std::size_t> roff_;
};

} // namespace

std::unique_ptr<executor> make_datatype_executor(schedule const& s, exec_config const& cfg) {
  return std::make_unique<datatype_executor>(s, cfg);
}

} // namespace halox::detail
