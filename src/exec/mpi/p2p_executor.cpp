#include "exec/mpi/p2p_executor.hpp"

#include "exec/cpu/pack.hpp"

#include <halox/error.hpp>

namespace halox::detail {

p2p_executor::p2p_executor(schedule s, exec_config const& cfg, bool persistent)
    : host_executor(std::move(s), cfg), persistent_(persistent) {
  std::size_t total = 0;
  for (auto const& m : sched_.sends) {
    soff_.push_back(total);
    scount_.push_back(mpi_int_count(m.bytes, "a sent message in bytes"));
    bool const inplace = !persistent_ && message_contiguous(sched_, m);
    send_inplace_.push_back(inplace);
    if (!inplace) total += m.bytes;
  }
  send_area_ = reserve(memory_kind::host, total);
  total = 0;
  for (auto const& m : sched_.recvs) {
    roff_.push_back(total);
    rcount_.push_back(mpi_int_count(m.bytes, "a received message in bytes"));
    // Receiving in place only works for a plain overwrite; a reverse exchange combines, so it
    // always keeps a landing area.
    recv_inplace_.push_back(!persistent_ && message_contiguous(sched_, m));
    total += m.bytes;
  }
  recv_area_ = reserve(memory_kind::host, total);
  reqs_.assign(sched_.recvs.size() + sched_.sends.size(), MPI_REQUEST_NULL);
  for (auto const& m : sched_.recvs) info_.push_back({m.peer, m.bytes, true});
  for (auto const& m : sched_.sends) info_.push_back({m.peer, m.bytes, false});
}

void p2p_executor::on_bind() {
  if (!persistent_) return;
  // Persistent requests name their buffers: made again whenever the workspace moves (plan
  // time, or a caller's set_workspace), never while executing.
  persistent_reqs_.clear();
  std::byte* const rbase = ws(memory_kind::host, recv_area_);
  std::byte* const sbase = ws(memory_kind::host, send_area_);
  for (std::size_t i = 0; i < sched_.recvs.size(); ++i) {
    unique_request r;
    HALOX_MPI_CHECK(MPI_Recv_init(rbase + roff_[i], rcount_[i], MPI_BYTE, sched_.recvs[i].peer,
                                  cfg_.tag, cfg_.comm, r.out()));
    persistent_reqs_.push_back(std::move(r));
  }
  for (std::size_t i = 0; i < sched_.sends.size(); ++i) {
    unique_request r;
    HALOX_MPI_CHECK(MPI_Send_init(sbase + soff_[i], scount_[i], MPI_BYTE, sched_.sends[i].peer,
                                  cfg_.tag, cfg_.comm, r.out()));
    persistent_reqs_.push_back(std::move(r));
  }
}

void p2p_executor::post(void*) {
  std::size_t const nr = sched_.recvs.size(), ns = sched_.sends.size();
  std::byte* const rbase = ws(memory_kind::host, recv_area_);
  std::byte* const sbase = ws(memory_kind::host, send_area_);
  if (persistent_) {
    for (std::size_t i = 0; i < persistent_reqs_.size(); ++i) reqs_[i] = persistent_reqs_[i].get();
    if (nr > 0) HALOX_MPI_CHECK(MPI_Startall(static_cast<int>(nr), reqs_.data()));
    for (std::size_t i = 0; i < ns; ++i)
      pack_message(sched_, sched_.sends[i], bufs_, sbase + soff_[i]);
    if (ns > 0) HALOX_MPI_CHECK(MPI_Startall(static_cast<int>(ns), reqs_.data() + nr));
    return;
  }
  for (std::size_t i = 0; i < nr; ++i) {
    auto const& m = sched_.recvs[i];
    void* dst = rbase + roff_[i];
    if (recv_inplace_[i] && op_ == combine_op::replace)
      dst = static_cast<std::byte*>(bufs_[m.regions[0].slot]) +
            region_byte_offset(sched_, m.regions[0]);
    HALOX_MPI_CHECK(MPI_Irecv(dst, rcount_[i], MPI_BYTE, m.peer, cfg_.tag, cfg_.comm, &reqs_[i]));
  }
  for (std::size_t i = 0; i < ns; ++i) {
    auto const& m = sched_.sends[i];
    void const* src;
    if (send_inplace_[i]) {
      src = static_cast<std::byte const*>(bufs_[m.regions[0].slot]) +
            region_byte_offset(sched_, m.regions[0]);
    } else {
      pack_message(sched_, m, bufs_, sbase + soff_[i]);
      src = sbase + soff_[i];
    }
    HALOX_MPI_CHECK(
        MPI_Isend(src, scount_[i], MPI_BYTE, m.peer, cfg_.tag, cfg_.comm, &reqs_[nr + i]));
  }
}

void p2p_executor::receive() {
  std::size_t const nr = sched_.recvs.size(), ns = sched_.sends.size();
  std::byte* const rbase = ws(memory_kind::host, recv_area_);
  // Unpack each message as it lands.
  for (std::size_t done = 0; done < nr; ++done) {
    int const idx = wait_any(0, nr);
    if (idx == MPI_UNDEFINED) break;
    if (persistent_) reqs_[idx] = MPI_REQUEST_NULL; // the persistent handle stays owned
    bool const inplace = !persistent_ && recv_inplace_[idx] && op_ == combine_op::replace;
    if (!inplace) unpack_message(sched_, sched_.recvs[idx], bufs_, rbase + roff_[idx], op_);
  }
  wait_all(nr, ns);
  if (persistent_)
    for (auto& r : reqs_) r = MPI_REQUEST_NULL;
}

} // namespace halox::detail
