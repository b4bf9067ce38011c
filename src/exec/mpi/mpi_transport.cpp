#include "exec/mpi/mpi_transport.hpp"

#include <halox/error.hpp>

namespace halox::detail {

void mpi_transport::declare(std::vector<wire_request> const& recvs,
                            std::vector<wire_request> const& sends, workspace_layout&) {
  nr_ = recvs.size();
  wire_ = recvs;
  wire_.insert(wire_.end(), sends.begin(), sends.end());
  for (std::size_t i = 0; i < wire_.size(); ++i) {
    HALOX_REQUIRE(wire_[i].runs == 0, errc::internal,
                  "the mpi transport moves contiguous buffers only");
    counts_.push_back(mpi_int_count(wire_[i].bytes, i < nr_ ? "a received message in bytes"
                                                            : "a sent message in bytes"));
  }
  reqs_.assign(wire_.size(), MPI_REQUEST_NULL);
  persistent_reqs_.resize(persistent_ ? wire_.size() : 0);
}

void mpi_transport::bind(workspace_bases const&) {
  // Persistent requests name their buffers: `attach` makes them again whenever the workspace
  // moves (plan time, or a caller's set_workspace), never while executing.
  for (auto& r : persistent_reqs_) r = unique_request();
}

void mpi_transport::attach(std::size_t i, std::byte* buf) {
  MPI_Comm const comm = owner_.config().comm;
  int const tag = owner_.config().tag;
  unique_request r;
  if (i < nr_)
    HALOX_MPI_CHECK(MPI_Recv_init(buf, counts_[i], MPI_BYTE, wire_[i].peer, tag, comm, r.out()));
  else
    HALOX_MPI_CHECK(MPI_Send_init(buf, counts_[i], MPI_BYTE, wire_[i].peer, tag, comm, r.out()));
  persistent_reqs_[i] = std::move(r);
}

void mpi_transport::post(std::size_t i, void* buf, std::size_t) {
  if (persistent_) {
    reqs_[i] = persistent_reqs_[i].get();
    HALOX_MPI_CHECK(MPI_Start(&reqs_[i]));
    return;
  }
  MPI_Comm const comm = owner_.config().comm;
  int const tag = owner_.config().tag;
  if (i < nr_)
    HALOX_MPI_CHECK(MPI_Irecv(buf, counts_[i], MPI_BYTE, wire_[i].peer, tag, comm, &reqs_[i]));
  else
    HALOX_MPI_CHECK(MPI_Isend(buf, counts_[i], MPI_BYTE, wire_[i].peer, tag, comm, &reqs_[i]));
}

std::size_t mpi_transport::wait_recv() {
  int const idx = owner_.wait_any(reqs_.data(), 0, nr_);
  if (idx == MPI_UNDEFINED) return none;
  // A completed persistent request stays allocated (owned by persistent_reqs_) and inactive;
  // nulling this copy keeps MPI_Waitany from returning it again.
  if (persistent_) reqs_[static_cast<std::size_t>(idx)] = MPI_REQUEST_NULL;
  return static_cast<std::size_t>(idx);
}

void mpi_transport::wait_sends() {
  owner_.wait_all(reqs_.data(), nr_, reqs_.size() - nr_);
  if (persistent_)
    for (auto& r : reqs_) r = MPI_REQUEST_NULL;
}

void mpi_transport::cancel_peer(int peer) noexcept {
  owner_.cancel_receives(reqs_.data(), reqs_.size(), peer);
}

bool mpi_transport::abandon(double grace) noexcept {
  return executor::abandon_mpi(reqs_, grace, true);
}

std::unique_ptr<transport> make_mpi_transport(executor& owner) {
  return std::make_unique<mpi_transport>(owner, false);
}

std::unique_ptr<transport> make_persistent_mpi_transport(executor& owner) {
  return std::make_unique<mpi_transport>(owner, true);
}

} // namespace halox::detail
