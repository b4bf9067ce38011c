#include "exec/ucx/ucx_transport.hpp"

#include "exec/ucx/ucx_resources.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace halox::detail {

namespace {

// The packing executor's io_run lists go to UCP as its iov datatype unchanged.
static_assert(sizeof(io_run) == sizeof(ucp_dt_iov_t) &&
              offsetof(io_run, base) == offsetof(ucp_dt_iov_t, buffer) &&
              offsetof(io_run, bytes) == offsetof(ucp_dt_iov_t, length));

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

class ucx_transport final : public transport {
public:
  explicit ucx_transport(wait_context& waits)
      : waits_(waits), cfg_(waits.config()),
        // Bootstrapping first: it is collective, and nothing before it may fail on one rank.
        resources_(ucx_resources_of(*cfg_.ctx, cfg_.timeout)), worker_(resources_->worker()) {
    HALOX_REQUIRE(cfg_.comm == cfg_.ctx->comm.get(), errc::internal,
                  "the ucx transport addresses peers by their rank in the context's communicator");
    rank_ = cfg_.ctx->rank;
  }

  [[nodiscard]] char const* name() const noexcept override { return "ucx"; }
  [[nodiscard]] bool moves_iov() const noexcept override { return true; }

  void declare(std::vector<wire_request> const& recvs, std::vector<wire_request> const& sends,
               workspace_layout& layout) override {
    nr_ = recvs.size();
    wire_ = recvs;
    wire_.insert(wire_.end(), sends.begin(), sends.end());
    for (auto const& s : sends) eps_.push_back(resources_->endpoint(s.peer));
    // The request handles live in the workspace: if an exchange is abandoned with operations
    // UCX still owns, the plan keeps the workspace (and with it what UCX may still read or
    // write) for the rest of the process.
    req_front_ = (resources_->request_size() + 63) / 64 * 64;
    req_stride_ = req_front_ + 64;
    req_area_ = layout.reserve(memory_kind::host, (wire_.size() + 1) * req_stride_); // + flush
    pending_.assign(wire_.size(), nullptr);
  }

  void bind(workspace_bases const& bases) override {
    base_ = bases[static_cast<int>(memory_kind::host)];
  }

  void post(std::size_t i, void* buf, std::size_t runs) override {
    if (i == 0) { // the exchange's first request: forget the last exchange's handles
      flush_ = nullptr;
      std::fill(pending_.begin(), pending_.end(), nullptr);
    }
    ucp_request_param_t prm = request_param(i);
    std::size_t const count = runs > 0 ? runs : wire_[i].bytes;
    if (runs > 0) {
      prm.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
      prm.datatype = ucp_dt_make_iov();
    }
    int const peer = wire_[i].peer;
    ucs_status_ptr_t r;
    if (i < nr_) {
      prm.op_attr_mask |= UCP_OP_ATTR_FIELD_RECV_INFO;
      prm.recv_info.tag_info = &landed_;
      landed_.length = wire_[i].bytes;
      r = ucp_tag_recv_nbx(worker_, buf, count, ucp_tag(cfg_.tag, peer), full_mask, &prm);
      if (UCS_PTR_IS_ERR(r))
        throw_ucx_error(UCS_PTR_STATUS(r), "ucp_tag_recv_nbx",
                        "posting the receive from rank " + std::to_string(peer));
      pending_[i] = r;
      if (r == nullptr) check_length(i, landed_.length);
    } else {
      r = ucp_tag_send_nbx(eps_[i - nr_], buf, count, ucp_tag(cfg_.tag, rank_), &prm);
      if (UCS_PTR_IS_ERR(r))
        throw_ucx_error(UCS_PTR_STATUS(r), "ucp_tag_send_nbx",
                        "sending to rank " + std::to_string(peer));
      pending_[i] = r;
    }
  }

  void posted() override {
    flush_ = nullptr;
    until_ = waits_.deadline();
    ucp_worker_progress(worker_); // start what UCX could not start inline
  }

  std::size_t wait_recv() override {
    char* const done = waits_.done_flags();
    int idle = 0;
    for (;;) {
      bool left = false;
      for (std::size_t i = 0; i < nr_; ++i) {
        if (done[i]) continue;
        if (!settled(i)) {
          left = true;
          continue;
        }
        done[i] = 1;
        return i;
      }
      if (!left) return none;
      progress_or_yield(worker_, idle);
      check_bounds(0, wire_.size());
    }
  }

  void wait_sends() override {
    char* const done = waits_.done_flags();
    int idle = 0;
    for (;;) {
      bool left = false;
      for (std::size_t i = nr_; i < wire_.size(); ++i) {
        if (done[i]) continue;
        if (settled(i))
          done[i] = 1;
        else
          left = true;
      }
      if (!left) break;
      progress_or_yield(worker_, idle);
      check_bounds(0, wire_.size());
    }
    // A send "completes" once UCX owns its bytes; some transports (tcp) still push them out
    // from this worker's progress. Flush before returning, so a peer never waits for bytes while
    // this rank sits in an MPI call that does not progress UCX.
    ucp_request_param_t prm = request_param(wire_.size());
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
        if (waits_.expired(until_))
          throw error(errc::timeout,
                      std::string(cfg_.label) + " with message tag " + std::to_string(cfg_.tag) +
                          " (backend " + to_string(waits_.kind()) +
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
    char const* const done = waits_.done_flags();
    for (std::size_t i = 0; i < nr_; ++i)
      if (!done[i] && wire_[i].peer == peer && pending_[i] != nullptr &&
          ucp_request_check_status(pending_[i]) == UCS_INPROGRESS)
        ucp_request_cancel(worker_, pending_[i]);
  }

  bool abandon(double grace) noexcept override {
    char* const done = waits_.done_flags();
    std::size_t const n = pending_.size();
    auto const busy = [&](void* r) {
      return r != nullptr && ucp_request_check_status(r) == UCS_INPROGRESS;
    };
    auto const all_done = [&](double seconds) {
      auto const until = deadline_after(seconds);
      int idle = 0;
      for (;;) {
        bool any = busy(flush_);
        for (std::size_t i = 0; i < n && !any; ++i) any = !done[i] && busy(pending_[i]);
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
        if (!done[i] && busy(pending_[i])) ucp_request_cancel(worker_, pending_[i]);
      ok = all_done(grace > 0 ? grace : 0.2);
    }
    for (std::size_t i = 0; i < n; ++i) done[i] = 1;
    if (ok) flush_ = nullptr;
    return ok;
  }

  // UCX wires an endpoint up lazily and settles its protocols per message size on first use: a
  // new plan's first 10-20 exchanges took 150 us where a warm one takes 6 (2 ranks, one node,
  // docs/ucx.md). So the plan exchanges messages of its own sizes and shapes (iov lists as long
  // as its own) with each peer now, on buffers of its own, under a tag no exchange uses.
  void warm_up() override;

private:
  // Request parameters with the handle in request slot `i` of the workspace (no allocation).
  [[nodiscard]] ucp_request_param_t request_param(std::size_t i) const {
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_REQUEST;
    prm.request = base_ + req_area_ + i * req_stride_ + req_front_;
    return prm;
  }

  // True when request `i` completed (its handle, if any, is then checked and kept: UCX frees
  // it with the workspace-held storage); throws when it failed.
  bool settled(std::size_t i) {
    void* const r = pending_[i];
    if (r == nullptr) return true;
    ucs_status_t st;
    if (i < nr_) {
      ucp_tag_recv_info_t got{};
      st = ucp_tag_recv_request_test(r, &got);
      if (st == UCS_OK) check_length(i, got.length);
    } else {
      st = ucp_request_check_status(r);
    }
    if (st == UCS_INPROGRESS) return false;
    if (st != UCS_OK)
      throw_ucx_error(st, i < nr_ ? "ucp_tag_recv_nbx" : "ucp_tag_send_nbx",
                      std::string(i < nr_ ? "receiving from" : "sending to") + " rank " +
                          std::to_string(wire_[i].peer));
    return true;
  }

  // One round of a wait loop's checks: the peers' failure notices, then the clock.
  void check_bounds(std::size_t first, std::size_t n) {
    waits_.poll();
    if (waits_.expired(until_)) waits_.throw_timeout(first, n);
  }

  void check_length(std::size_t i, std::size_t got) const {
    HALOX_REQUIRE(got == wire_[i].bytes, errc::internal,
                  std::string(cfg_.label) + " (backend " + to_string(waits_.kind()) + "): rank " +
                      std::to_string(wire_[i].peer) + " sent " + std::to_string(got) + " B where " +
                      std::to_string(wire_[i].bytes) + " B were expected with message tag " +
                      std::to_string(cfg_.tag));
  }

  wait_context& waits_;
  exec_config const& cfg_;
  std::shared_ptr<ucx_resources> resources_;
  ucp_worker_h worker_ = nullptr;
  int rank_ = 0;
  std::vector<wire_request> wire_; // receives, then sends
  std::size_t nr_ = 0;
  std::vector<ucp_ep_h> eps_; // per send
  std::byte* base_ = nullptr; // the bound host workspace
  std::size_t req_area_ = 0, req_front_ = 0, req_stride_ = 0;
  std::vector<void*> pending_; // per request: UCX's handle, or null
  void* flush_ = nullptr;      // the final worker flush while in flight
  clock_type::time_point until_{};
  ucp_tag_recv_info_t landed_{};
};

void ucx_transport::warm_up() {
  std::map<int, std::size_t> largest; // per peer: the larger message between the two ranks
  for (auto const& w : wire_) largest[w.peer] = std::max(largest[w.peer], w.bytes);
  if (largest.empty()) return;
  // Both ranks of a pair see the same two messages, so they agree on the rounds.
  auto const rounds_with = [&](int peer) { return warm_up_rounds(largest[peer]); };
  int most = 0;
  for (auto const& [peer, bytes] : largest) most = std::max(most, warm_up_rounds(bytes));
  std::size_t out_bytes = 0, in_bytes = 0;
  for (std::size_t i = nr_; i < wire_.size(); ++i) out_bytes = std::max(out_bytes, wire_[i].bytes);
  std::vector<std::size_t> in_at;
  for (std::size_t i = 0; i < nr_; ++i)
    in_at.push_back(std::exchange(in_bytes, in_bytes + wire_[i].bytes));
  // Owned by a holder that outlives a failed warm-up: UCX may still touch them then.
  auto held = std::make_unique<warm_buffers>();
  held->out.assign(out_bytes, std::byte{0});
  held->in.resize(in_bytes);
  // Each iov request's list: as many runs as it declared, of equal lengths, laid end to end
  // over its buffer below (UCP picks its protocol by the total size and the datatype).
  std::vector<std::size_t> list_at(wire_.size(), 0);
  for (std::size_t i = 0; i < wire_.size(); ++i) {
    auto const& w = wire_[i];
    list_at[i] = held->iov.size();
    for (std::size_t k = 0; k < w.runs; ++k)
      held->iov.push_back({nullptr, w.bytes / w.runs + (k + 1 == w.runs ? w.bytes % w.runs : 0)});
  }
  std::vector<void*> reqs;
  auto const until = deadline_after(cfg_.timeout > 0 ? cfg_.timeout : default_warm_up_bound);
  for (int r = 0; r < most; ++r) {
    reqs.assign(wire_.size(), nullptr);
    for (std::size_t i = 0; i < wire_.size(); ++i) {
      auto const& w = wire_[i];
      bool const recv = i < nr_;
      if (rounds_with(w.peer) <= r) continue;
      std::byte* const base = recv ? held->in.data() + in_at[i] : held->out.data();
      ucp_request_param_t prm{};
      void* buf = base;
      std::size_t count = w.bytes;
      if (w.runs > 0) {
        std::size_t at = 0;
        for (std::size_t k = 0; k < w.runs; ++k) {
          held->iov[list_at[i] + k].buffer = base + at;
          at += held->iov[list_at[i] + k].length;
        }
        buf = held->iov.data() + list_at[i];
        count = w.runs;
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        prm.datatype = ucp_dt_make_iov();
      }
      ucs_status_ptr_t const q =
          recv ? ucp_tag_recv_nbx(worker_, buf, count, warm_tag(cfg_.tag, w.peer), full_mask, &prm)
               : ucp_tag_send_nbx(eps_[i - nr_], buf, count, warm_tag(cfg_.tag, rank_), &prm);
      if (UCS_PTR_IS_ERR(q)) {
        (void)held.release(); // requests of this round may still use them
        throw_ucx_error(UCS_PTR_STATUS(q), recv ? "ucp_tag_recv_nbx" : "ucp_tag_send_nbx",
                        "warming up the endpoint of rank " + std::to_string(w.peer));
      }
      reqs[i] = q;
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
        reqs.push_back(f); // completed and freed like the messages; trimmed by the next round
        continue;
      }
      if (clock_type::now() > until) {
        for (std::size_t i = 0; i < nr_; ++i)
          if (reqs[i] != nullptr) ucp_request_cancel(worker_, reqs[i]);
        (void)held.release();
        throw error(errc::timeout, std::string(cfg_.label) + " with message tag " +
                                       std::to_string(cfg_.tag) + " (backend " +
                                       to_string(waits_.kind()) +
                                       "): warming up UCX's endpoints to the plan's peers did "
                                       "not complete in time; a peer stopped building the "
                                       "plan, or raise HALOX_TIMEOUT if it is only slow");
      }
      progress_or_yield(worker_, idle);
    }
  }
}

} // namespace

std::unique_ptr<transport> make_ucx_transport(wait_context& waits) {
  return std::make_unique<ucx_transport>(waits);
}

} // namespace halox::detail
