#include "exec/mpi/p2p_executor.hpp"

#include "exec/cpu/pack.hpp"

#include <halox/error.hpp>

#include <climits>

namespace halox::detail {

namespace {
int checked_count(std::size_t bytes) {
  HALOX_REQUIRE(bytes <= static_cast<std::size_t>(INT_MAX), errc::unsupported,
                "a message of " + std::to_string(bytes) +
                    " bytes exceeds MPI's int count; split the tensor over more ranks");
  return static_cast<int>(bytes);
}

bool single_contiguous(schedule const& s, message const& m) {
  return m.regions.size() == 1 && region_contiguous(s, m.regions[0]);
}
} // namespace

p2p_executor::p2p_executor(schedule s, exec_config const& cfg, bool persistent)
    : executor(std::move(s), cfg), persistent_(persistent) {
  std::size_t total = 0;
  for (auto const& m : sched_.sends) {
    soff_.push_back(total);
    bool const inplace = !persistent_ && single_contiguous(sched_, m);
    send_inplace_.push_back(inplace);
    if (!inplace) total += m.bytes;
  }
  sendbuf_.resize(total);
  total = 0;
  for (auto const& m : sched_.recvs) {
    roff_.push_back(total);
    // Receiving in place only works for a plain overwrite; a reverse exchange combines, so it
    // always keeps a landing buffer.
    bool const inplace = !persistent_ && single_contiguous(sched_, m);
    recv_inplace_.push_back(inplace);
    total += m.bytes;
  }
  recvbuf_.resize(total);
  scratch_.resize(max_copy_bytes(sched_));
  reqs_.assign(sched_.recvs.size() + sched_.sends.size(), MPI_REQUEST_NULL);
  if (persistent_) {
    for (std::size_t i = 0; i < sched_.recvs.size(); ++i) {
      auto const& m = sched_.recvs[i];
      unique_request r;
      HALOX_MPI_CHECK(MPI_Recv_init(recvbuf_.data() + roff_[i], checked_count(m.bytes), MPI_BYTE,
                                    m.peer, 0, cfg_.comm, r.out()));
      persistent_reqs_.push_back(std::move(r));
    }
    for (std::size_t i = 0; i < sched_.sends.size(); ++i) {
      auto const& m = sched_.sends[i];
      unique_request r;
      HALOX_MPI_CHECK(MPI_Send_init(sendbuf_.data() + soff_[i], checked_count(m.bytes), MPI_BYTE,
                                    m.peer, 0, cfg_.comm, r.out()));
      persistent_reqs_.push_back(std::move(r));
    }
  }
}

p2p_executor::~p2p_executor() = default;

void p2p_executor::start(void* const* bufs, combine_op op, void*) {
  bufs_ = bufs;
  op_ = op;
  std::size_t const nr = sched_.recvs.size();
  if (persistent_) {
    for (std::size_t i = 0; i < persistent_reqs_.size(); ++i) reqs_[i] = persistent_reqs_[i].get();
    if (nr > 0) HALOX_MPI_CHECK(MPI_Startall(static_cast<int>(nr), reqs_.data()));
    for (std::size_t i = 0; i < sched_.sends.size(); ++i)
      pack_message(sched_, sched_.sends[i], bufs, sendbuf_.data() + soff_[i]);
    if (!sched_.sends.empty())
      HALOX_MPI_CHECK(MPI_Startall(static_cast<int>(sched_.sends.size()), reqs_.data() + nr));
    return;
  }
  for (std::size_t i = 0; i < nr; ++i) {
    auto const& m = sched_.recvs[i];
    void* dst = recvbuf_.data() + roff_[i];
    if (recv_inplace_[i] && op == combine_op::replace)
      dst = static_cast<std::byte*>(bufs[m.regions[0].slot]) +
            region_byte_offset(sched_, m.regions[0]);
    HALOX_MPI_CHECK(
        MPI_Irecv(dst, checked_count(m.bytes), MPI_BYTE, m.peer, 0, cfg_.comm, &reqs_[i]));
  }
  for (std::size_t i = 0; i < sched_.sends.size(); ++i) {
    auto const& m = sched_.sends[i];
    void const* src;
    if (send_inplace_[i]) {
      src = static_cast<std::byte const*>(bufs[m.regions[0].slot]) +
            region_byte_offset(sched_, m.regions[0]);
    } else {
      pack_message(sched_, m, bufs, sendbuf_.data() + soff_[i]);
      src = sendbuf_.data() + soff_[i];
    }
    HALOX_MPI_CHECK(
        MPI_Isend(src, checked_count(m.bytes), MPI_BYTE, m.peer, 0, cfg_.comm, &reqs_[nr + i]));
  }
}

void p2p_executor::wait(void*) {
  std::size_t const nr = sched_.recvs.size();
  // Local copies first: they overlap with messages still in flight.
  run_local_copies(sched_, bufs_, op_, scratch_.data());
  // Unpack each message as it lands.
  for (std::size_t done = 0; done < nr; ++done) {
    int idx = MPI_UNDEFINED;
    HALOX_MPI_CHECK(MPI_Waitany(static_cast<int>(nr), reqs_.data(), &idx, MPI_STATUS_IGNORE));
    if (idx == MPI_UNDEFINED) break;
    bool const inplace = !persistent_ && recv_inplace_[idx] && op_ == combine_op::replace;
    if (!inplace)
      unpack_message(sched_, sched_.recvs[idx], bufs_, recvbuf_.data() + roff_[idx], op_);
  }
  if (!sched_.sends.empty())
    HALOX_MPI_CHECK(
        MPI_Waitall(static_cast<int>(sched_.sends.size()), reqs_.data() + nr, MPI_STATUSES_IGNORE));
  run_fills(sched_, bufs_, cfg_.fill_value);
  if (persistent_)
    for (auto& r : reqs_) r = MPI_REQUEST_NULL; // the persistent handles stay owned
}

} // namespace halox::detail
