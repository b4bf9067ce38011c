#include "exec/mpi/p2p_executor.hpp"

#include "exec/cpu/pack.hpp"

#include <halox/error.hpp>

namespace halox::detail {

p2p_executor::p2p_executor(schedule s, exec_config const& cfg, p2p_mode mode)
    : host_executor(std::move(s), cfg), mode_(mode) {
  bool const persistent = mode_ == p2p_mode::persistent;
  std::size_t total = 0;
  for (auto const& m : sched_.sends) {
    soff_.push_back(total);
    bool const inplace = !persistent && message_contiguous(sched_, m);
    send_inplace_.push_back(inplace);
    if (!inplace) total += m.bytes;
  }
  send_area_ = reserve(memory_kind::host, total);
  total = 0;
  for (auto const& m : sched_.recvs) {
    roff_.push_back(total);
    // Receiving in place only works for a plain overwrite; a reverse exchange combines, so it
    // always keeps a landing area.
    recv_inplace_.push_back(!persistent && message_contiguous(sched_, m));
    total += m.bytes;
  }
  recv_area_ = reserve(memory_kind::host, total);
  add_pieces(sched_.recvs, true);
  add_pieces(sched_.sends, false);
  reqs_.assign(rpieces_.size() + spieces_.size(), MPI_REQUEST_NULL);
  for (auto const& p : rpieces_) info_.push_back({sched_.recvs[p.msg].peer, p.range.bytes, true});
  for (auto const& p : spieces_) info_.push_back({sched_.sends[p.msg].peer, p.range.bytes, false});
}

void p2p_executor::add_pieces(std::vector<message> const& msgs, bool recv) {
  auto& out = recv ? rpieces_ : spieces_;
  char const* what = recv ? "a received message in bytes" : "a sent message in bytes";
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    auto const& m = msgs[i];
    if (mode_ != p2p_mode::pipelined) {
      out.push_back({i, {0, m.bytes}, {}, mpi_int_count(m.bytes, what)});
      continue;
    }
    // Both sides cut the message alike: the cut depends only on what they share (its bytes,
    // its element size, the context's fragment setting), never on their own layouts.
    auto const cut = cut_message(m.bytes, message_elem_size(sched_, m), fragment_setting());
    for (auto const& r : cut) {
      piece p{i, r, {}, mpi_int_count(r.bytes, what)};
      if (cut.size() > 1) p.regions = regions_of_range(sched_, m, r);
      out.push_back(std::move(p));
    }
  }
}

std::string p2p_executor::wire_summary() const {
  if (mode_ != p2p_mode::pipelined) return {};
  std::size_t cut = 0;
  for (std::size_t i = 0; i < spieces_.size(); ++i)
    if (!spieces_[i].regions.empty() && spieces_[i].range.offset == 0) ++cut;
  std::size_t const n = sched_.sends.size();
  if (n == 0) return {};
  std::string out = std::to_string(cut) + " of " + std::to_string(n) + " sent message(s) cut, " +
                    std::to_string(spieces_.size()) + " piece(s) sent, fragment size ";
  std::size_t const f = fragment_setting();
  return out + (f == 0 ? std::string("automatic") : std::to_string(f) + " B");
}

std::size_t p2p_executor::fragment_setting() const noexcept {
  return cfg_.ctx ? cfg_.ctx->pipeline_fragment : 0;
}

std::vector<region> const& p2p_executor::regions_of(piece const& p, message const& m) noexcept {
  return p.regions.empty() ? m.regions : p.regions;
}

std::byte* p2p_executor::in_place(message const& m, std::size_t offset) const {
  return static_cast<std::byte*>(bufs_[m.regions[0].slot]) +
         region_byte_offset(sched_, m.regions[0]) + offset;
}

void p2p_executor::on_bind() {
  if (mode_ != p2p_mode::persistent) return;
  // Persistent requests name their buffers: made again whenever the workspace moves (plan
  // time, or a caller's set_workspace), never while executing.
  persistent_reqs_.clear();
  std::byte* const rbase = ws(memory_kind::host, recv_area_);
  std::byte* const sbase = ws(memory_kind::host, send_area_);
  for (auto const& p : rpieces_) {
    unique_request r;
    HALOX_MPI_CHECK(MPI_Recv_init(rbase + roff_[p.msg], p.count, MPI_BYTE, sched_.recvs[p.msg].peer,
                                  cfg_.tag, cfg_.comm, r.out()));
    persistent_reqs_.push_back(std::move(r));
  }
  for (auto const& p : spieces_) {
    unique_request r;
    HALOX_MPI_CHECK(MPI_Send_init(sbase + soff_[p.msg], p.count, MPI_BYTE, sched_.sends[p.msg].peer,
                                  cfg_.tag, cfg_.comm, r.out()));
    persistent_reqs_.push_back(std::move(r));
  }
}

void p2p_executor::post(void*) {
  std::size_t const nr = rpieces_.size(), ns = spieces_.size();
  std::byte* const rbase = ws(memory_kind::host, recv_area_);
  std::byte* const sbase = ws(memory_kind::host, send_area_);
  if (mode_ == p2p_mode::persistent) {
    for (std::size_t i = 0; i < persistent_reqs_.size(); ++i) reqs_[i] = persistent_reqs_[i].get();
    if (nr > 0) HALOX_MPI_CHECK(MPI_Startall(static_cast<int>(nr), reqs_.data()));
    for (auto const& p : spieces_)
      pack_message(sched_, sched_.sends[p.msg], bufs_, sbase + soff_[p.msg]);
    if (ns > 0) HALOX_MPI_CHECK(MPI_Startall(static_cast<int>(ns), reqs_.data() + nr));
    return;
  }
  for (std::size_t i = 0; i < nr; ++i) {
    auto const& p = rpieces_[i];
    auto const& m = sched_.recvs[p.msg];
    std::byte* dst = rbase + roff_[p.msg] + p.range.offset;
    if (recv_inplace_[p.msg] && op_ == combine_op::replace) dst = in_place(m, p.range.offset);
    HALOX_MPI_CHECK(MPI_Irecv(dst, p.count, MPI_BYTE, m.peer, cfg_.tag, cfg_.comm, &reqs_[i]));
  }
  // Each piece is packed right before it is sent, so the first fragment of a long message
  // moves while the next one is packed.
  for (std::size_t i = 0; i < ns; ++i) {
    auto const& p = spieces_[i];
    auto const& m = sched_.sends[p.msg];
    std::byte const* src;
    if (send_inplace_[p.msg]) {
      src = in_place(m, p.range.offset);
    } else {
      std::byte* const packed = sbase + soff_[p.msg] + p.range.offset;
      std::byte* out = packed;
      for (auto const& r : regions_of(p, m)) out += pack_region(sched_, r, bufs_, out);
      src = packed;
    }
    HALOX_MPI_CHECK(MPI_Isend(src, p.count, MPI_BYTE, m.peer, cfg_.tag, cfg_.comm, &reqs_[nr + i]));
  }
}

void p2p_executor::receive() {
  std::size_t const nr = rpieces_.size(), ns = spieces_.size();
  bool const persistent = mode_ == p2p_mode::persistent;
  std::byte* const rbase = ws(memory_kind::host, recv_area_);
  // Unpack each message (or fragment) as it lands.
  for (std::size_t done = 0; done < nr; ++done) {
    int const idx = wait_any(0, nr);
    if (idx == MPI_UNDEFINED) break;
    if (persistent) reqs_[idx] = MPI_REQUEST_NULL; // the persistent handle stays owned
    auto const& p = rpieces_[idx];
    auto const& m = sched_.recvs[p.msg];
    if (!persistent && recv_inplace_[p.msg] && op_ == combine_op::replace) continue;
    std::byte const* in = rbase + roff_[p.msg] + p.range.offset;
    for (auto const& r : regions_of(p, m)) in += unpack_region(sched_, r, bufs_, in, op_);
  }
  wait_all(nr, ns);
  if (persistent)
    for (auto& r : reqs_) r = MPI_REQUEST_NULL;
}

} // namespace halox::detail
