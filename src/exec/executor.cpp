#include "exec/executor.hpp"

#include "exec/cpu/pack.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <string>

namespace halox::detail {

int mpi_int_count(std::size_t n, char const* what) {
  HALOX_REQUIRE(n <= static_cast<std::size_t>(INT_MAX), errc::unsupported,
                std::string(what) + " of " + std::to_string(n) + " exceeds MPI's int count (" +
                    std::to_string(INT_MAX) +
                    "); split the tensor over more ranks or use a packing backend with smaller "
                    "messages");
  return static_cast<int>(n);
}

void workspace_memory::reserve(std::shared_ptr<context_state> const& ctx,
                               std::array<std::size_t, 3> const& bytes) {
  for (int k = 0; k < 3; ++k)
    if (bytes[k] > blocks_[k].size())
      blocks_[k] = memory_block(ctx, bytes[k], static_cast<memory_kind>(k));
}

workspace_bases workspace_memory::bases() const noexcept {
  return {blocks_[0].data(), blocks_[1].data(), blocks_[2].data()};
}

void workspace_memory::orphan() noexcept {
  for (auto& b : blocks_) b.orphan();
}

void executor::settle(MPI_Request* reqs, std::size_t first, std::size_t n) {
  for (std::size_t i = first; i < first + n; ++i) {
    if (done_[i]) continue;
    int flag = 0;
    HALOX_MPI_CHECK(MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE));
    if (flag) done_[i] = 1;
  }
}

void executor::poll_watch() {
  if (cfg_.watch) cfg_.watch->poll(to_string(kind()));
}

void executor::wait_all(MPI_Request* reqs, std::size_t first, std::size_t n) {
  if (n == 0) return;
  int const count = static_cast<int>(n);
  MPI_Request* const r = reqs + first;
  if (cfg_.timeout <= 0 && cfg_.watch == nullptr) {
    HALOX_MPI_CHECK(MPI_Waitall(count, r, MPI_STATUSES_IGNORE));
    return;
  }
  // Polls: each round tests the messages, then the plan's failure notices, then the clock.
  bool const bounded = cfg_.timeout > 0;
  auto const until = bounded ? deadline_after(cfg_.timeout) : clock_type::time_point{};
  for (;;) {
    int flag = 0;
    HALOX_MPI_CHECK(MPI_Testall(count, r, &flag, MPI_STATUSES_IGNORE));
    if (flag) {
      std::fill(done_.begin() + static_cast<std::ptrdiff_t>(first),
                done_.begin() + static_cast<std::ptrdiff_t>(first + n), char{1});
      return;
    }
    poll_watch();
    if (bounded && clock_type::now() > until) {
      settle(reqs, first, n);
      throw_timeout(first, n);
    }
  }
}

int executor::wait_any(MPI_Request* reqs, std::size_t first, std::size_t n) {
  if (n == 0) return MPI_UNDEFINED;
  int const count = static_cast<int>(n);
  MPI_Request* const r = reqs + first;
  int idx = MPI_UNDEFINED;
  if (cfg_.timeout <= 0 && cfg_.watch == nullptr) {
    HALOX_MPI_CHECK(MPI_Waitany(count, r, &idx, MPI_STATUS_IGNORE));
  } else {
    // A request returned before is inactive (or null) now: MPI_Testany passes over it.
    bool const bounded = cfg_.timeout > 0;
    auto const until = bounded ? deadline_after(cfg_.timeout) : clock_type::time_point{};
    for (;;) {
      int flag = 0;
      HALOX_MPI_CHECK(MPI_Testany(count, r, &idx, &flag, MPI_STATUS_IGNORE));
      if (flag) break;
      poll_watch();
      if (bounded && clock_type::now() > until) {
        settle(reqs, first, n);
        throw_timeout(first, n);
      }
    }
  }
  if (idx != MPI_UNDEFINED) done_[first + static_cast<std::size_t>(idx)] = 1;
  return idx;
}

void executor::throw_timeout(std::size_t first, std::size_t n) {
  std::string recvs, sends;
  std::size_t rbytes = 0, sbytes = 0;
  for (std::size_t i = first; i < first + n; ++i) {
    if (done_[i] || i >= info_.size()) continue;
    auto const& r = info_[i];
    std::string const who =
        (r.peer < 0 ? std::string("the collective") : "rank " + std::to_string(r.peer)) + " (" +
        std::to_string(r.bytes) + " B)";
    std::string& list = r.recv ? recvs : sends;
    list += (list.empty() ? "" : ", ") + who;
    (r.recv ? rbytes : sbytes) += r.bytes;
  }
  int rank = 0;
  MPI_Comm_rank(cfg_.comm, &rank);
  std::string msg = std::string(cfg_.label) + (reverse_ ? " (reverse/inverse)" : "") +
                    " with message tag " + std::to_string(cfg_.tag) + " (backend " +
                    to_string(kind()) + ") timed out after " + std::to_string(cfg_.timeout) +
                    " s on rank " + std::to_string(rank) + " of its communicator:";
  if (!recvs.empty())
    msg += " no message yet from " + recvs + ", " + std::to_string(rbytes) + " B outstanding;";
  if (!sends.empty())
    msg += " sends not completed to " + sends + ", " + std::to_string(sbytes) + " B;";
  msg += " a peer has not called start/execute of this plan, failed before sending, or is "
         "executing another plan (HALOX_CHECK=1 makes every rank agree on that first); raise "
         "HALOX_TIMEOUT (timeout_seconds) if the peers are only slow";
  std::fprintf(stderr, "halox: %s\n", msg.c_str());
  throw error(errc::timeout, msg);
}

void executor::start(void* const* bufs, combine_op op, void* stream, bool reverse) {
  HALOX_REQUIRE(bound_, errc::invalid_state,
                "the plan has no workspace; call set_workspace() with at least "
                "workspace_bytes() before executing a plan built with external_workspace");
  bufs_ = bufs;
  op_ = op;
  reverse_ = reverse;
  std::fill(done_.begin(), done_.end(), 0);
  in_flight_ = true;
  try {
    post(stream);
  } catch (...) {
    // Whatever was posted before the failure must not outlive the buffers.
    (void)abandon();
    throw;
  }
}

void executor::wait(void* stream) {
  try {
    complete(stream);
  } catch (error const& e) {
    if (e.code() == errc::peer_failed && cfg_.watch) {
      // The failed rank sends nothing more: its messages are cancelled at once, while those
      // of the healthy peers get the usual grace period to complete, so that they finish.
      cancel_peer(cfg_.watch->failed_rank());
      (void)abandon(collective_requests() ? 0.0 : 1.0);
    } else {
      // After a timeout the peers are known not to take part: cancel at once.
      (void)abandon(e.code() == errc::timeout ? 0.0 : 1.0);
    }
    throw;
  } catch (...) {
    (void)abandon();
    throw;
  }
  in_flight_ = false;
}

void executor::bind_workspace(workspace_bases const& bases) {
  if (bound_ && bases == ws_) return;
  ws_ = bases;
  bound_ = true;
  // The watchdog's per-request flags are sized here, at plan time, never on the first start.
  done_.assign(std::max(reqs_.size(), info_.size()), 0);
  on_bind();
}

bool executor::abandon(double grace) noexcept {
  in_flight_ = false;
  return abandon_requests(grace);
}

void executor::cancel_peer(int peer) noexcept {
  if (collective_requests()) return;
  cancel_receives(reqs_.data(), reqs_.size(), peer);
}

void executor::cancel_receives(MPI_Request* reqs, std::size_t n, int peer) noexcept {
  if (!mpi_alive()) return;
  // Receives only, each completed at once (a cancelled receive completes locally): a send to
  // the failed rank is eager and done, or is cancelled with the rest after the grace period,
  // and no request may be cancelled twice (Open MPI's ob1 does not survive it).
  for (std::size_t i = 0; i < n && i < info_.size(); ++i) {
    if (info_[i].peer != peer || !info_[i].recv || reqs[i] == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&reqs[i]);
    MPI_Wait(&reqs[i], MPI_STATUS_IGNORE);
    done_[i] = 1;
  }
}

bool executor::abandon_requests(double grace) noexcept {
  return abandon_mpi(reqs_, grace, !collective_requests());
}

bool executor::abandon_mpi(std::vector<MPI_Request>& reqs, double grace,
                           bool cancellable) noexcept {
  if (!mpi_alive()) return true;
  auto const n = static_cast<int>(reqs.size());
  auto all_done = [&](double seconds) {
    auto const until = deadline_after(seconds);
    do {
      int done = 0;
      if (n == 0 || MPI_Testall(n, reqs.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
        return n == 0;
      if (done) return true;
    } while (clock_type::now() < until);
    return false;
  };
  // Peers that still take part complete the exchange within moments.
  if (all_done(grace)) return true;
  if (!cancellable) return false; // a nonblocking collective cannot be cancelled
  for (auto& r : reqs)
    if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
  if (all_done(grace > 0 ? grace : 0.2)) return true;
  return false;
}

host_executor::host_executor(schedule s, exec_config cfg) : executor(std::move(s), std::move(cfg)) {
  scratch_ = reserve(memory_kind::host, max_copy_bytes(sched_));
}

void host_executor::complete(void*) {
  // Local copies first: they overlap with the messages still in flight.
  run_local_copies(sched_, bufs_, op_, ws(memory_kind::host, scratch_));
  receive();
  run_fills(sched_, bufs_, cfg_.fill_value);
}

} // namespace halox::detail
