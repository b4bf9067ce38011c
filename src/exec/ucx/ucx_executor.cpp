#include "exec/ucx/ucx_executor.hpp"

#include "exec/cpu/pack.hpp"
#include "exec/ucx/ucx_transport.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace halox::detail {

namespace {

// How one message leaves or lands.
enum class how : std::uint8_t {
  inplace, // one contiguous region: the tensor's bytes themselves
  packed,  // through a contiguous workspace area (packed by halox)
  iov      // UCP iov list of the regions' contiguous runs
};

struct msg_plan {
  int peer = -1;
  std::size_t bytes = 0;
  how mode = how::packed;  // for sends; for receives the mode of a plain (replace) exchange
  std::size_t area = 0;    // workspace offset of the packed message / landing area
  std::size_t first = 0;   // first run (iov)
  std::size_t runs = 0;    // number of runs (iov)
  std::size_t inplace = 0; // byte offset of the single region (inplace)
  int slot = 0;            // its slot (inplace)
};

// The 64-bit UCP tag of a message: the plan's tag above the sender's rank, so that messages of
// different plans and from different peers never match each other.
std::uint64_t ucp_tag(int plan_tag, int sender) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(plan_tag)) << 32) |
         static_cast<std::uint32_t>(sender);
}
constexpr std::uint64_t full_mask = ~std::uint64_t{0};

// The tag of the warm-up messages: the sender's field with its top bit set, which no rank
// number has.
std::uint64_t warm_tag(int plan_tag, int sender) {
  return ucp_tag(plan_tag, sender) | std::uint64_t{0x80000000u};
}

// Exchanges with one peer before the plan is handed over: until the endpoint and the protocols
// of its message sizes are settled (measured: 10-20 exchanges of faces up to tens of KiB),
// fewer for large messages, whose time is the copy's.
int warm_up_rounds(std::size_t bytes) {
  if (bytes <= (std::size_t{64} << 10)) return 20;
  if (bytes <= (std::size_t{1} << 20)) return 8;
  return 2;
}

// The bound on the warm-up when the plan's waits are unbounded.
constexpr double default_warm_up_bound = 300.0;

struct warm_buffers {
  std::vector<std::byte> out, in;
  std::vector<ucp_dt_iov_t> iov;
};

class ucx_executor final : public host_executor {
public:
  ucx_executor(schedule s, exec_config const& cfg, bool iov)
      : host_executor(std::move(s), cfg), iov_(iov) {
    // Bootstrapping first: it is collective, and nothing before it may fail on one rank only.
    transport_ = ucx_transport_of(*cfg_.ctx, cfg_.timeout);
    worker_ = transport_->worker();
    HALOX_REQUIRE(cfg_.comm == cfg_.ctx->comm.get(), errc::internal,
                  "the ucx backends address peers by their rank in the context's communicator");
    rank_ = cfg_.ctx->rank;
    std::size_t send_total = 0, recv_total = 0;
    for (auto const& m : sched_.sends) {
      msg_plan p = plan_message(m);
      if (p.mode == how::packed) {
        p.area = send_total;
        send_total += m.bytes;
      }
      sends_.push_back(p);
      eps_.push_back(transport_->endpoint(m.peer));
    }
    for (auto const& m : sched_.recvs) {
      msg_plan p = plan_message(m);
      // Every receive keeps a landing area: a reverse exchange combines, so it always unpacks.
      p.area = recv_total;
      recv_total += m.bytes;
      recvs_.push_back(p);
    }
    send_area_ = reserve(memory_kind::host, send_total);
    recv_area_ = reserve(memory_kind::host, recv_total);
    // The iov lists and the request handles live in the workspace: if an exchange is abandoned
    // with operations UCX still owns, the plan keeps the workspace (and with it what UCX may
    // still read or write) for the rest of the process.
    iov_area_ = reserve(memory_kind::host, runs_.size() * sizeof(ucp_dt_iov_t));
    std::size_t const nreq = sends_.size() + recvs_.size();
    req_front_ = (transport_->request_size() + 63) / 64 * 64;
    req_stride_ = req_front_ + 64;
    req_area_ = reserve(memory_kind::host, (nreq + 1) * req_stride_); // + 1: the final flush
    pending_.assign(nreq, nullptr);
    for (auto const& m : sched_.recvs) info_.push_back({m.peer, m.bytes, true});
    for (auto const& m : sched_.sends) info_.push_back({m.peer, m.bytes, false});
  }

  [[nodiscard]] backend kind() const noexcept override {
    return iov_ ? backend::ucx_iov : backend::ucx;
  }

  // UCX wires an endpoint up lazily and settles its protocols per message size on first use: a
  // new plan's first 10-20 exchanges took 150 us where a warm one takes 6 (2 ranks, one node,
  // docs/ucx.md). So the plan exchanges messages of its own sizes and shapes (iov lists with
  // its run lengths) with each peer now, on buffers of its own, under a tag no exchange uses.
  void warm_up() override {
    std::map<int, std::size_t> largest; // per peer: the larger message between the two ranks
    for (auto const* side : {&sends_, &recvs_})
      for (auto const& p : *side) largest[p.peer] = std::max(largest[p.peer], p.bytes);
    if (largest.empty()) return;
    // Both ranks of a pair see the same two messages, so they agree on the rounds.
    auto const rounds_with = [&](int peer) { return warm_up_rounds(largest[peer]); };
    int most = 0;
    for (auto const& [peer, bytes] : largest) most = std::max(most, warm_up_rounds(bytes));
    std::size_t out_bytes = 0, in_bytes = 0;
    for (auto const& p : sends_) out_bytes = std::max(out_bytes, p.bytes);
    std::vector<std::size_t> in_at;
    for (auto const& p : recvs_) in_at.push_back(std::exchange(in_bytes, in_bytes + p.bytes));
    // Owned by a holder that outlives a failed warm-up: UCX may still touch them then.
    auto held = std::make_unique<warm_buffers>();
    held->out.assign(out_bytes, std::byte{0});
    held->in.resize(in_bytes);
    for (auto const* side : {&sends_, &recvs_})
      for (auto const& p : *side)
        if (p.mode == how::iov) // the run lengths; laid end to end over the buffer below
          for (std::size_t k = p.first; k < p.first + p.runs; ++k)
            held->iov.push_back({nullptr, runs_[k].bytes});
    std::size_t const nr = recvs_.size();
    std::vector<void*> reqs(nr + sends_.size());
    auto const until = deadline_after(cfg_.timeout > 0 ? cfg_.timeout : default_warm_up_bound);
    for (int r = 0; r < most; ++r) {
      std::size_t list = 0; // next iov entry
      auto const describe = [&](msg_plan const& p, std::byte* base, ucp_request_param_t& prm,
                                void*& buf, std::size_t& count) {
        buf = base;
        count = p.bytes;
        if (p.mode != how::iov) return;
        std::size_t at = 0;
        for (std::size_t k = 0; k < p.runs; ++k) {
          held->iov[list + k].buffer = base + at;
          at += held->iov[list + k].length;
        }
        buf = held->iov.data() + list;
        count = p.runs;
        list += p.runs;
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        prm.datatype = ucp_dt_make_iov();
      };
      reqs.assign(nr + sends_.size(), nullptr);
      for (std::size_t i = 0; i < sends_.size() + nr; ++i) {
        bool const recv = i >= sends_.size(); // iov entries were laid out sends first
        auto const& p = recv ? recvs_[i - sends_.size()] : sends_[i];
        ucp_request_param_t prm{};
        void* buf = nullptr;
        std::size_t count = 0;
        std::byte* const base =
            recv ? held->in.data() + in_at[i - sends_.size()] : held->out.data();
        describe(p, base, prm, buf, count);
        if (rounds_with(p.peer) <= r) continue;
        ucs_status_ptr_t const q =
            recv
                ? ucp_tag_recv_nbx(worker_, buf, count, warm_tag(cfg_.tag, p.peer), full_mask, &prm)
                : ucp_tag_send_nbx(eps_[i], buf, count, warm_tag(cfg_.tag, rank_), &prm);
        if (UCS_PTR_IS_ERR(q)) {
          (void)held.release(); // requests of this round may still use them
          throw_ucx_error(UCS_PTR_STATUS(q), recv ? "ucp_tag_recv_nbx" : "ucp_tag_send_nbx",
                          "warming up the endpoint of rank " + std::to_string(p.peer));
        }
        reqs[recv ? i - sends_.size() : nr + i] = q;
      }
      int idle = 0;
      for (bool flushed = false;;) {
        bool busy = false;
        for (void*& q : reqs) {
          if (q == nullptr) continue;
          ucs_status_t const st = ucp_request_check_status(q);
          if (st == UCS_INPROGRESS) {
            busy = true;
            continue;
          }
          ucp_request_free(q);
          q = nullptr;
          if (st != UCS_OK) {
            (void)held.release();
            throw_ucx_error(st, "ucp_request_check_status", "warming up the plan's endpoints");
          }
        }
        if (!busy && flushed) break;
        if (!busy) {
          // Then flush the worker, as every exchange ends: its first flushes wait for the
          // endpoints' remaining lanes to connect.
          ucp_request_param_t prm{};
          ucs_status_ptr_t const f = ucp_worker_flush_nbx(worker_, &prm);
          if (UCS_PTR_IS_ERR(f)) {
            (void)held.release();
            throw_ucx_error(UCS_PTR_STATUS(f), "ucp_worker_flush_nbx", "warming up the endpoints");
          }
          flushed = true;
          if (f == nullptr) break;
          reqs.push_back(f); // completed and freed like the messages; trimmed after the round
          continue;
        }
        if (clock_type::now() > until) {
          for (std::size_t i = 0; i < nr; ++i)
            if (reqs[i] != nullptr) ucp_request_cancel(worker_, reqs[i]);
          (void)held.release();
          throw error(errc::timeout, std::string(cfg_.label) + " with message tag " +
                                         std::to_string(cfg_.tag) + " (backend " +
                                         to_string(kind()) +
                                         "): warming up UCX's endpoints to the plan's peers did "
                                         "not complete in time; a peer stopped building the "
                                         "plan, or raise HALOX_TIMEOUT if it is only slow");
        }
        progress_or_yield(worker_, idle);
      }
    }
  }

protected:
  void post(void*) override {
    flush_ = nullptr;
    std::fill(pending_.begin(), pending_.end(), nullptr);
    if (iov_ && !runs_.empty()) {
      auto* list = reinterpret_cast<ucp_dt_iov_t*>(ws(memory_kind::host, iov_area_));
      for (std::size_t k = 0; k < runs_.size(); ++k)
        list[k] = {static_cast<std::byte*>(bufs_[runs_[k].slot]) + runs_[k].offset, runs_[k].bytes};
    }
    std::size_t const nr = recvs_.size();
    for (std::size_t i = 0; i < nr; ++i) {
      auto const& p = recvs_[i];
      how const mode = op_ == combine_op::replace ? p.mode : how::packed;
      ucp_request_param_t prm = request_param(i);
      prm.op_attr_mask |= UCP_OP_ATTR_FIELD_RECV_INFO;
      prm.recv_info.tag_info = &landed_;
      void* buf = nullptr;
      std::size_t count = p.bytes;
      address(p, mode, recv_area_, buf, count, prm);
      landed_.length = p.bytes;
      ucs_status_ptr_t const r =
          ucp_tag_recv_nbx(worker_, buf, count, ucp_tag(cfg_.tag, p.peer), full_mask, &prm);
      if (UCS_PTR_IS_ERR(r))
        throw_ucx_error(UCS_PTR_STATUS(r), "ucp_tag_recv_nbx",
                        "posting the receive from rank " + std::to_string(p.peer));
      pending_[i] = r;
      if (r == nullptr) check_length(i, landed_.length);
    }
    for (std::size_t i = 0; i < sends_.size(); ++i) {
      auto const& p = sends_[i];
      if (p.mode == how::packed)
        pack_message(sched_, sched_.sends[i], bufs_, ws(memory_kind::host, send_area_ + p.area));
      ucp_request_param_t prm = request_param(nr + i);
      void* buf = nullptr;
      std::size_t count = p.bytes;
      address(p, p.mode, send_area_, buf, count, prm);
      ucs_status_ptr_t const r =
          ucp_tag_send_nbx(eps_[i], buf, count, ucp_tag(cfg_.tag, rank_), &prm);
      if (UCS_PTR_IS_ERR(r))
        throw_ucx_error(UCS_PTR_STATUS(r), "ucp_tag_send_nbx",
                        "sending to rank " + std::to_string(p.peer));
      pending_[nr + i] = r;
    }
    ucp_worker_progress(worker_); // start what UCX could not start inline
  }

  void receive() override {
    std::size_t const nr = recvs_.size(), n = pending_.size();
    bool const bounded = cfg_.timeout > 0;
    auto const until = bounded ? deadline_after(cfg_.timeout) : clock_type::time_point{};
    std::size_t left = n;
    for (std::size_t i = 0; i < n; ++i)
      if (done_[i]) --left;
    int idle = 0;
    while (left > 0) {
      progress_or_yield(worker_, idle);
      for (std::size_t i = 0; i < n; ++i) {
        if (done_[i]) continue;
        void* const r = pending_[i];
        if (r != nullptr) {
          ucs_status_t st;
          if (i < nr) {
            ucp_tag_recv_info_t got{};
            st = ucp_tag_recv_request_test(r, &got);
            if (st == UCS_OK) check_length(i, got.length);
          } else {
            st = ucp_request_check_status(r);
          }
          if (st == UCS_INPROGRESS) continue;
          if (st != UCS_OK)
            throw_ucx_error(st, i < nr ? "ucp_tag_recv_nbx" : "ucp_tag_send_nbx",
                            std::string(i < nr ? "receiving from" : "sending to") + " rank " +
                                std::to_string(info_[i].peer));
        }
        done_[i] = 1;
        --left;
        if (i < nr) land(i);
      }
      if (left == 0) break;
      if (cfg_.watch) cfg_.watch->poll(to_string(kind()));
      if (bounded && clock_type::now() > until) throw_timeout(0, n);
    }
    // A send "completes" once UCX owns its bytes; some transports (tcp) still push them out from
    // this worker's progress. Flush before returning, so a peer never waits for bytes while this
    // rank sits in an MPI call that does not progress UCX.
    ucp_request_param_t prm = request_param(n);
    flush_ = ucp_worker_flush_nbx(worker_, &prm);
    if (UCS_PTR_IS_ERR(flush_)) {
      ucs_status_t const st = UCS_PTR_STATUS(flush_);
      flush_ = nullptr;
      throw_ucx_error(st, "ucp_worker_flush_nbx", "flushing the exchange's sends");
    }
    while (flush_ != nullptr) {
      progress_or_yield(worker_, idle);
      ucs_status_t const st = ucp_request_check_status(flush_);
      if (st == UCS_INPROGRESS) {
        if (bounded && clock_type::now() > until)
          throw error(errc::timeout,
                      std::string(cfg_.label) + " with message tag " + std::to_string(cfg_.tag) +
                          " (backend " + to_string(kind()) +
                          "): every message arrived but "
                          "flushing the UCX worker did not complete within " +
                          std::to_string(cfg_.timeout) +
                          " s; a peer stopped progressing UCX; raise HALOX_TIMEOUT if it is "
                          "only slow");
        continue;
      }
      flush_ = nullptr;
      if (st != UCS_OK)
        throw_ucx_error(st, "ucp_worker_flush_nbx", "flushing the exchange's sends");
    }
  }

  void cancel_peer(int peer) noexcept override {
    for (std::size_t i = 0; i < pending_.size() && i < info_.size(); ++i)
      if (!done_[i] && info_[i].peer == peer && info_[i].recv && pending_[i] != nullptr &&
          ucp_request_check_status(pending_[i]) == UCS_INPROGRESS)
        ucp_request_cancel(worker_, pending_[i]);
  }

  bool abandon_requests(double grace) noexcept override {
    std::size_t const n = pending_.size();
    auto const busy = [&](void* r) {
      return r != nullptr && ucp_request_check_status(r) == UCS_INPROGRESS;
    };
    auto const all_done = [&](double seconds) {
      auto const until = deadline_after(seconds);
      int idle = 0;
      for (;;) {
        bool any = busy(flush_);
        for (std::size_t i = 0; i < n && !any; ++i) any = !done_[i] && busy(pending_[i]);
        if (!any) return true;
        if (clock_type::now() > until) return false;
        progress_or_yield(worker_, idle);
      }
    };
    bool ok = all_done(grace);
    if (!ok) {
      // Receives still expected are cancelled; a send already under way cannot be called back
      // and completes or not with its peer.
      for (std::size_t i = 0; i < n; ++i)
        if (!done_[i] && busy(pending_[i])) ucp_request_cancel(worker_, pending_[i]);
      ok = all_done(grace > 0 ? grace : 0.2);
    }
    for (std::size_t i = 0; i < n; ++i) done_[i] = 1;
    if (ok) flush_ = nullptr;
    return ok;
  }

private:
  msg_plan plan_message(message const& m) {
    msg_plan p;
    p.peer = m.peer;
    p.bytes = m.bytes;
    if (message_contiguous(sched_, m)) {
      p.mode = how::inplace;
      p.slot = m.regions[0].slot;
      p.inplace = region_byte_offset(sched_, m.regions[0]);
      return p;
    }
    if (!iov_) return p;
    p.mode = how::iov;
    p.first = runs_.size();
    p.runs = append_runs(sched_, m, runs_);
    return p;
  }

  // Request parameters with the handle in request slot `i` of the workspace (no allocation).
  ucp_request_param_t request_param(std::size_t i) const {
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_REQUEST;
    prm.request = ws(memory_kind::host, req_area_ + i * req_stride_ + req_front_);
    return prm;
  }

  // The buffer, count and datatype of a message moved as `mode`.
  void address(msg_plan const& p, how mode, std::size_t area, void*& buf, std::size_t& count,
               ucp_request_param_t& prm) const {
    switch (mode) {
    case how::inplace:
      buf = static_cast<std::byte*>(bufs_[p.slot]) + p.inplace;
      count = p.bytes;
      break;
    case how::packed:
      buf = ws(memory_kind::host, area + p.area);
      count = p.bytes;
      break;
    case how::iov:
      buf = ws(memory_kind::host, iov_area_) + p.first * sizeof(ucp_dt_iov_t);
      count = p.runs;
      prm.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
      prm.datatype = ucp_dt_make_iov();
      break;
    }
  }

  void check_length(std::size_t i, std::size_t got) const {
    HALOX_REQUIRE(got == recvs_[i].bytes, errc::internal,
                  std::string(cfg_.label) + " (backend " + to_string(kind()) + "): rank " +
                      std::to_string(recvs_[i].peer) + " sent " + std::to_string(got) +
                      " B where " + std::to_string(recvs_[i].bytes) +
                      " B were expected with message tag " + std::to_string(cfg_.tag));
  }

  // Unpacks receive `i` if it landed in the workspace.
  void land(std::size_t i) {
    auto const& p = recvs_[i];
    how const mode = op_ == combine_op::replace ? p.mode : how::packed;
    if (mode == how::packed)
      unpack_message(sched_, sched_.recvs[i], bufs_, ws(memory_kind::host, recv_area_ + p.area),
                     op_);
  }

  bool iov_;
  std::shared_ptr<ucx_transport> transport_;
  ucp_worker_h worker_ = nullptr;
  int rank_ = 0;
  std::vector<msg_plan> sends_, recvs_;
  std::vector<ucp_ep_h> eps_; // per send
  std::vector<run_ref> runs_; // the iov lists' runs, all messages
  std::size_t send_area_ = 0, recv_area_ = 0, iov_area_ = 0, req_area_ = 0;
  std::size_t req_front_ = 0, req_stride_ = 0;
  std::vector<void*> pending_; // per request (receives, then sends): UCX's handle, or null
  void* flush_ = nullptr;      // the final worker flush while in flight
  ucp_tag_recv_info_t landed_{};
};

} // namespace

std::unique_ptr<executor> make_ucx_executor(schedule const& s, exec_config const& cfg, bool iov) {
  return std::make_unique<ucx_executor>(s, cfg, iov);
}

} // namespace halox::detail
