#include "exec/mpi/datatype_executor.hpp"

#include "exec/cpu/pack.hpp"
#include "exec/mpi/mpi_types.hpp"

#include <halox/error.hpp>

#include <vector>

namespace halox::detail {

namespace {

class datatype_executor final : public executor {
public:
  datatype_executor(schedule s, exec_config const& cfg)
      : executor(std::move(s), cfg), send_types_(sched_, sched_.sends),
        recv_types_(sched_, sched_.recvs) {
    // A combining receive (reverse exchange) cannot let MPI write into the buffer: the values
    // already there take part. It lands contiguously here and is unpacked with the op. The
    // interface only learns the op in `start`, so the landing buffer exists from the start.
    std::size_t total = 0;
    for (auto const& m : sched_.recvs) {
      roff_.push_back(total);
      rcount_.push_back(mpi_int_count(m.bytes, "a received message in bytes"));
      total += m.bytes;
    }
    landing_.resize(total);
    scratch_.resize(max_copy_bytes(sched_));
    reqs_.assign(sched_.recvs.size() + sched_.sends.size(), MPI_REQUEST_NULL);
  }

  void start(void* const* bufs, combine_op op, void*) override {
    bufs_ = bufs;
    op_ = op;
    bool const landing = op != combine_op::replace;
    send_types_.bind(bufs);
    if (!landing) recv_types_.bind(bufs);
    std::size_t const nr = sched_.recvs.size();
    for (std::size_t i = 0; i < nr; ++i) {
      int const peer = sched_.recvs[i].peer;
      if (landing)
        HALOX_MPI_CHECK(MPI_Irecv(landing_.data() + roff_[i], rcount_[i], MPI_BYTE, peer, 0,
                                  cfg_.comm, &reqs_[i]));
      else
        HALOX_MPI_CHECK(MPI_Irecv(MPI_BOTTOM, recv_types_.count(i), recv_types_.type(i), peer, 0,
                                  cfg_.comm, &reqs_[i]));
    }
    for (std::size_t i = 0; i < sched_.sends.size(); ++i)
      HALOX_MPI_CHECK(MPI_Isend(MPI_BOTTOM, send_types_.count(i), send_types_.type(i),
                                sched_.sends[i].peer, 0, cfg_.comm, &reqs_[nr + i]));
  }

  void wait(void*) override {
    auto const nr = static_cast<int>(sched_.recvs.size());
    // Local copies first: they overlap with the messages still in flight.
    run_local_copies(sched_, bufs_, op_, scratch_.data());
    if (op_ == combine_op::replace) {
      if (nr > 0) HALOX_MPI_CHECK(MPI_Waitall(nr, reqs_.data(), MPI_STATUSES_IGNORE));
    } else {
      for (int done = 0; done < nr; ++done) {
        int idx = MPI_UNDEFINED;
        HALOX_MPI_CHECK(MPI_Waitany(nr, reqs_.data(), &idx, MPI_STATUS_IGNORE));
        if (idx == MPI_UNDEFINED) break;
        unpack_message(sched_, sched_.recvs[idx], bufs_, landing_.data() + roff_[idx], op_);
      }
    }
    auto const ns = static_cast<int>(sched_.sends.size());
    if (ns > 0) HALOX_MPI_CHECK(MPI_Waitall(ns, reqs_.data() + nr, MPI_STATUSES_IGNORE));
    run_fills(sched_, bufs_, cfg_.fill_value);
  }

  [[nodiscard]] backend kind() const noexcept override { return backend::mpi_datatype; }

private:
  message_types send_types_, recv_types_;
  std::vector<std::byte> landing_, scratch_;
  std::vector<std::size_t> roff_;
  std::vector<int> rcount_;
  std::vector<MPI_Request> reqs_; // receives first, then sends
  void* const* bufs_ = nullptr;
  combine_op op_ = combine_op::replace;
};

} // namespace

std::unique_ptr<executor> make_datatype_executor(schedule const& s, exec_config const& cfg) {
  return std::make_unique<datatype_executor>(s, cfg);
}

} // namespace halox::detail
