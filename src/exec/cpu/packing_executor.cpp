#include "exec/cpu/packing_executor.hpp"

#include "exec/cpu/pack.hpp"

#include <halox/error.hpp>

namespace halox::detail {

char const* to_string(packing p) noexcept {
  switch (p) {
  case packing::pack: return "pack";
  case packing::iov: return "iov";
  case packing::pipelined: return "pipelined";
  case packing::datatypes: return "derived datatypes";
  }
  return "unknown";
}

packing_executor::packing_executor(schedule s, exec_config const& cfg, backend preset,
                                   packing strategy, transport_maker make)
    : host_executor(std::move(s), cfg, preset), preset_(preset), strategy_(strategy) {
  // The transport first: making it may be collective (UCX bootstraps its worker), and nothing
  // before it may fail on one rank only.
  transport_ = make(waits());
  HALOX_REQUIRE(strategy_ != packing::datatypes || transport_->walks_boxes(), errc::internal,
                std::string("backend ") + to_string(preset) + ": the " + transport_->name() +
                    " transport does not walk derived datatypes");
  add_pieces(sched_.recvs, true);
  add_pieces(sched_.sends, false);
  // Areas: the packed sends, then every receive's landing area (a reverse exchange combines,
  // so it always unpacks, even where a plain exchange receives in place).
  std::size_t send_total = 0, recv_total = 0;
  for (auto* side : {&spieces_, &rpieces_}) {
    bool const recv = side == &rpieces_;
    std::size_t& total = recv ? recv_total : send_total;
    std::size_t msg = static_cast<std::size_t>(-1), at = 0;
    for (auto& p : *side) {
      if (!recv && p.mode != how::packed) continue;
      // Fragments of one message lie end to end in its area.
      if (p.msg != msg) {
        msg = p.msg;
        at = total;
        total += message_of(p, recv).bytes;
      }
      p.area = at + p.range.offset;
    }
  }
  std::size_t const send_area = reserve(memory_kind::host, send_total);
  std::size_t const recv_area = reserve(memory_kind::host, recv_total);
  for (auto& p : spieces_) p.area += send_area;
  for (auto& p : rpieces_) p.area += recv_area;
  iov_area_ = reserve(memory_kind::host, runs_.size() * sizeof(io_run));

  std::vector<wire_request> rw, sw;
  std::vector<request_info> info;
  for (auto* side : {&rpieces_, &spieces_}) {
    bool const recv = side == &rpieces_;
    for (auto const& p : *side) {
      auto const& m = message_of(p, recv);
      wire_request w{m.peer, p.range.bytes, p.runs, {}};
      if (p.mode == how::walked) w.boxes = message_boxes(sched_, m);
      (recv ? rw : sw).push_back(std::move(w));
      info.push_back({m.peer, p.range.bytes, recv});
    }
  }
  transport_->declare(rw, sw, layout());
  waits().name_requests(transport_->request_table(std::move(info)));
}

void packing_executor::add_pieces(std::vector<message> const& msgs, bool recv) {
  auto& out = recv ? rpieces_ : spieces_;
  bool const fixed = transport_->fixed_buffers();
  bool const iov = strategy_ == packing::iov && transport_->moves_iov();
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    auto const& m = msgs[i];
    // Walked messages go as their boxes even when contiguous: both sides must split a message
    // into the same MPI messages, and each walks its own layout.
    how const whole = strategy_ == packing::datatypes           ? how::walked
                      : !fixed && message_contiguous(sched_, m) ? how::inplace
                      : iov                                     ? how::iov
                                                                : how::packed;
    if (strategy_ != packing::pipelined) {
      piece p{i, {0, m.bytes}, {}, whole, 0, 0, 0};
      if (whole == how::iov) {
        p.first_run = runs_.size();
        p.runs = append_runs(sched_, m, runs_);
        if (p.runs > 1 && m.bytes < transport_->iov_min_run() * p.runs) {
          runs_.resize(p.first_run); // short runs: packed on this side
          p.runs = 0;
          p.mode = how::packed;
        }
      }
      out.push_back(std::move(p));
      continue;
    }
    // Both sides cut the message alike: the cut depends only on what they share (its bytes,
    // its element size, the context's fragment setting), never on their own layouts.
    auto const cut = cut_message(m.bytes, message_elem_size(sched_, m), fragment_setting());
    for (auto const& r : cut) {
      piece p{i, r, {}, whole, 0, 0, 0};
      if (cut.size() > 1) p.regions = regions_of_range(sched_, m, r);
      out.push_back(std::move(p));
    }
  }
}

std::string packing_executor::wire_summary() const {
  if (strategy_ != packing::pipelined) return {};
  std::size_t cut = 0;
  for (auto const& p : spieces_)
    if (!p.regions.empty() && p.range.offset == 0) ++cut;
  std::size_t const n = sched_.sends.size();
  if (n == 0) return {};
  std::string out = std::to_string(cut) + " of " + std::to_string(n) + " sent message(s) cut, " +
                    std::to_string(spieces_.size()) + " piece(s) sent, fragment size ";
  std::size_t const f = fragment_setting();
  return out + (f == 0 ? std::string("automatic") : std::to_string(f) + " B");
}

std::size_t packing_executor::fragment_setting() const noexcept {
  return cfg_.ctx ? cfg_.ctx->pipeline_fragment : 0;
}

std::vector<region> const& packing_executor::regions_of(piece const& p, bool recv) const noexcept {
  return p.regions.empty() ? message_of(p, recv).regions : p.regions;
}

std::byte* packing_executor::in_place(piece const& p, bool recv) const {
  auto const& r = message_of(p, recv).regions[0];
  return static_cast<std::byte*>(bufs_[r.slot]) + region_byte_offset(sched_, r) + p.range.offset;
}

void packing_executor::on_bind() {
  transport_->bind(bases());
  if (!transport_->fixed_buffers()) return;
  // Fixed buffers (persistent requests): every piece moves through its workspace area.
  for (std::size_t i = 0; i < rpieces_.size(); ++i)
    transport_->attach(i, ws(memory_kind::host, rpieces_[i].area));
  for (std::size_t i = 0; i < spieces_.size(); ++i)
    transport_->attach(rpieces_.size() + i, ws(memory_kind::host, spieces_[i].area));
}

void* packing_executor::wire_buffer(piece const& p, how mode, bool recv, std::size_t& runs) const {
  runs = 0;
  switch (mode) {
  case how::inplace: return in_place(p, recv);
  case how::iov:
    runs = p.runs;
    return ws(memory_kind::host, iov_area_) + p.first_run * sizeof(io_run);
  case how::walked: runs = transport::walked; return const_cast<void**>(bufs_);
  case how::packed: break;
  }
  return ws(memory_kind::host, p.area);
}

void packing_executor::post(void*) {
  // The iov lists hold this exchange's addresses; they live in the workspace, which outlives
  // an exchange abandoned while the transport may still read them.
  if (!runs_.empty()) {
    auto* list = reinterpret_cast<io_run*>(ws(memory_kind::host, iov_area_));
    for (std::size_t k = 0; k < runs_.size(); ++k)
      list[k] = {static_cast<std::byte*>(bufs_[runs_[k].slot]) + runs_[k].offset, runs_[k].bytes};
  }
  std::size_t runs = 0;
  for (std::size_t i = 0; i < rpieces_.size(); ++i) {
    auto const& p = rpieces_[i];
    void* const buf = wire_buffer(p, landing_mode(p), true, runs);
    transport_->post(i, buf, runs);
  }
  // Each piece is packed right before it is sent, so the first fragment of a long message
  // moves while the next one is packed.
  std::size_t const nr = rpieces_.size();
  for (std::size_t i = 0; i < spieces_.size(); ++i) {
    auto const& p = spieces_[i];
    if (p.mode == how::packed) {
      std::byte* out = ws(memory_kind::host, p.area);
      for (auto const& r : regions_of(p, false)) out += pack_region(sched_, r, bufs_, out);
    }
    void* const buf = wire_buffer(p, p.mode, false, runs);
    transport_->post(nr + i, buf, runs);
  }
  transport_->posted();
}

void packing_executor::receive() {
  // Unpack each message (or fragment) as it lands.
  for (;;) {
    std::size_t const i = transport_->wait_recv();
    if (i == transport::none) break;
    auto const& p = rpieces_[i];
    if (landing_mode(p) != how::packed) continue;
    std::byte const* in = ws(memory_kind::host, p.area);
    for (auto const& r : regions_of(p, true)) in += unpack_region(sched_, r, bufs_, in, op_);
  }
  transport_->wait_sends();
}

} // namespace halox::detail
