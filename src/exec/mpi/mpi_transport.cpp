#include "exec/mpi/mpi_transport.hpp"

#include <halox/error.hpp>

namespace halox::detail {

void mpi_transport::declare(std::vector<wire_request> const& recvs,
                            std::vector<wire_request> const& sends, workspace_layout&) {
  nr_ = recvs.size();
  wire_ = recvs;
  wire_.insert(wire_.end(), sends.begin(), sends.end());
  parts_.resize(wire_.size());
  for (std::size_t i = 0; i < wire_.size(); ++i) {
    auto const& w = wire_[i];
    bool const recv = i < nr_;
    HALOX_REQUIRE(w.runs == 0, errc::internal, "the mpi transport moves no iov lists");
    HALOX_REQUIRE(!(persistent_ && !w.boxes.empty()), errc::internal,
                  "persistent mpi requests move contiguous buffers only");
    counts_.push_back(
        mpi_int_count(w.bytes, recv ? "a received message in bytes" : "a sent message in bytes"));
    if (i == nr_) nr_mpi_ = owner_of_.size();
    first_.push_back(owner_of_.size());
    std::size_t n = 1;
    if (!w.boxes.empty()) {
      parts_[i] = make_parts(w.boxes);
      for (auto const& part : parts_[i])
        mpi_int_count(part.bytes,
                      recv ? "a received message part in bytes" : "a sent message part in bytes");
      n = parts_[i].size();
    }
    owner_of_.insert(owner_of_.end(), n, i);
  }
  if (nr_ == wire_.size()) nr_mpi_ = owner_of_.size();
  left_.assign(nr_, 0);
  reqs_.assign(owner_of_.size(), MPI_REQUEST_NULL);
  persistent_reqs_.resize(persistent_ ? wire_.size() : 0);
}

std::vector<request_info> mpi_transport::request_table(std::vector<request_info> declared) const {
  std::vector<request_info> out;
  out.reserve(owner_of_.size());
  for (std::size_t k = 0; k < owner_of_.size(); ++k) {
    std::size_t const i = owner_of_[k];
    request_info r = declared[i];
    if (!wire_[i].boxes.empty()) r.bytes = parts_[i][k - first_[i]].bytes;
    out.push_back(r);
  }
  return out;
}

void mpi_transport::bind(workspace_bases const&) {
  // Persistent requests name their buffers: `attach` makes them again whenever the workspace
  // moves (plan time, or a caller's set_workspace), never while executing.
  for (auto& r : persistent_reqs_) r = unique_request();
}

void mpi_transport::attach(std::size_t i, std::byte* buf) {
  MPI_Comm const comm = waits_.config().comm;
  int const tag = waits_.config().tag;
  unique_request r;
  if (i < nr_)
    HALOX_MPI_CHECK(MPI_Recv_init(buf, counts_[i], MPI_BYTE, wire_[i].peer, tag, comm, r.out()));
  else
    HALOX_MPI_CHECK(MPI_Send_init(buf, counts_[i], MPI_BYTE, wire_[i].peer, tag, comm, r.out()));
  persistent_reqs_[i] = std::move(r);
}

void mpi_transport::post(std::size_t i, void* buf, std::size_t runs) {
  // Requests are posted in order: the first one starts an exchange (one abandoned before may
  // have left receives unreturned).
  if (i == 0) ready_.clear();
  if (persistent_) {
    if (i < nr_) left_[i] = 1;
    reqs_[i] = persistent_reqs_[i].get();
    HALOX_MPI_CHECK(MPI_Start(&reqs_[i]));
    return;
  }
  if (!wire_[i].boxes.empty()) {
    post_parts(i, buf, runs);
    return;
  }
  MPI_Comm const comm = waits_.config().comm;
  int const tag = waits_.config().tag;
  MPI_Request* const r = &reqs_[first_[i]];
  if (i < nr_) {
    left_[i] = 1;
    HALOX_MPI_CHECK(MPI_Irecv(buf, counts_[i], MPI_BYTE, wire_[i].peer, tag, comm, r));
  } else {
    HALOX_MPI_CHECK(MPI_Isend(buf, counts_[i], MPI_BYTE, wire_[i].peer, tag, comm, r));
  }
}

void mpi_transport::post_parts(std::size_t i, void* buf, std::size_t runs) {
  MPI_Comm const comm = waits_.config().comm;
  int const tag = waits_.config().tag;
  int const peer = wire_[i].peer;
  bool const recv = i < nr_;
  auto const& parts = parts_[i];
  if (recv) {
    left_[i] = parts.size();
    if (parts.empty()) ready_.push_back(i);
  }
  // Walked: each part is one MPI message of its datatype at its buffer's base. Contiguous (a
  // combining receive's landing area): the parts' bytes one after the other, so that both
  // sides still exchange the same MPI messages.
  auto* const bufs = runs == walked ? static_cast<void* const*>(buf) : nullptr;
  auto* at = static_cast<std::byte*>(buf);
  MPI_Request* r = &reqs_[first_[i]];
  for (auto const& p : parts) {
    void* const base = bufs ? bufs[p.slot] : at;
    int const count = bufs ? 1 : static_cast<int>(p.bytes);
    MPI_Datatype const type = bufs ? p.type.get() : MPI_BYTE;
    if (recv)
      HALOX_MPI_CHECK(MPI_Irecv(base, count, type, peer, tag, comm, r++));
    else
      HALOX_MPI_CHECK(MPI_Isend(base, count, type, peer, tag, comm, r++));
    at += bufs ? 0 : p.bytes;
  }
}

std::size_t mpi_transport::wait_recv() {
  if (!ready_.empty()) {
    std::size_t const i = ready_.back();
    ready_.pop_back();
    return i;
  }
  for (;;) {
    int const idx = waits_.wait_any(reqs_.data(), 0, nr_mpi_);
    if (idx == MPI_UNDEFINED) return none;
    // A completed persistent request stays allocated (owned by persistent_reqs_) and inactive;
    // nulling this copy keeps MPI_Waitany from returning it again.
    if (persistent_) reqs_[static_cast<std::size_t>(idx)] = MPI_REQUEST_NULL;
    std::size_t const i = owner_of_[static_cast<std::size_t>(idx)];
    if (--left_[i] == 0) return i;
  }
}

void mpi_transport::wait_sends() {
  waits_.wait_all(reqs_.data(), nr_mpi_, reqs_.size() - nr_mpi_);
  if (persistent_)
    for (auto& r : reqs_) r = MPI_REQUEST_NULL;
}

void mpi_transport::cancel_peer(int peer) noexcept {
  waits_.cancel_receives(reqs_.data(), reqs_.size(), peer);
}

bool mpi_transport::abandon(double grace) noexcept {
  return wait_context::abandon_mpi(reqs_, grace, true);
}

std::unique_ptr<transport> make_mpi_transport(wait_context& waits) {
  return std::make_unique<mpi_transport>(waits, false);
}

std::unique_ptr<transport> make_persistent_mpi_transport(wait_context& waits) {
  return std::make_unique<mpi_transport>(waits, true);
}

} // namespace halox::detail
