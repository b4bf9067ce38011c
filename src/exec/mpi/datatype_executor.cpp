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
      : host_executor(std::move(s), cfg), send_types_(sched_, sched_.sends),
        recv_types_(sched_, sched_.recvs) {
    // A combining receive (reverse exchange) cannot let MPI write into the buffer: the values
    // already there take part. Its parts land one after the other in the workspace (the
    // message's packed order) and are unpacked with the op.
    std::size_t total = 0;
    for (std::size_t i = 0; i < sched_.recvs.size(); ++i) {
      roff_.push_back(total);
      for (auto const& p : recv_types_.parts(i))
        mpi_int_count(p.bytes, "a received message part in bytes");
      total += sched_.recvs[i].bytes;
    }
    landing_ = reserve(memory_kind::host, total);
    nrecv_ = recv_types_.total_parts();
    reqs_.assign(nrecv_ + send_types_.total_parts(), MPI_REQUEST_NULL);
    for (std::size_t i = 0; i < sched_.recvs.size(); ++i)
      for (auto const& p : recv_types_.parts(i)) info_.push_back({sched_.recvs[i].peer, p.bytes});
    for (std::size_t i = 0; i < sched_.sends.size(); ++i)
      for (auto const& p : send_types_.parts(i))
        info_.push_back({sched_.sends[i].peer, p.bytes, false});
  }

  [[nodiscard]] backend kind() const noexcept override { return backend::mpi_datatype; }

protected:
  void post(void*) override {
    bool const landing = op_ != combine_op::replace;
    std::size_t k = 0;
    for (std::size_t i = 0; i < sched_.recvs.size(); ++i) {
      int const peer = sched_.recvs[i].peer;
      std::byte* at = ws(memory_kind::host, landing_) + roff_[i];
      for (auto const& p : recv_types_.parts(i)) {
        if (landing) {
          HALOX_MPI_CHECK(MPI_Irecv(at, static_cast<int>(p.bytes), MPI_BYTE, peer, cfg_.tag,
                                    cfg_.comm, &reqs_[k++]));
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
  }

  void receive() override {
    wait_all(0, nrecv_);
    if (op_ != combine_op::replace)
      for (std::size_t i = 0; i < sched_.recvs.size(); ++i)
        unpack_message(sched_, sched_.recvs[i], bufs_, ws(memory_kind::host, landing_) + roff_[i],
                       op_);
    wait_all(nrecv_, reqs_.size() - nrecv_);
  }

private:
  message_types send_types_, recv_types_;
  std::size_t landing_ = 0;
  std::vector<std::size_t> roff_;
  std::size_t nrecv_ = 0;
};

} // namespace

std::unique_ptr<executor> make_datatype_executor(schedule const& s, exec_config const& cfg) {
  return std::make_unique<datatype_executor>(s, cfg);
}

} // namespace halox::detail
