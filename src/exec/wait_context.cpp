#include "exec/wait_context.hpp"

#include <halox/detail/mpi_handle.hpp>
#include <halox/error.hpp>

#include <algorithm>
#include <cstdio>
#include <string>

namespace halox::detail {

void wait_context::name_requests(std::vector<request_info> info) {
  info_ = std::move(info);
  done_.assign(info_.size(), 0);
}

void wait_context::begin(bool reverse) noexcept {
  reverse_ = reverse;
  std::fill(done_.begin(), done_.end(), 0);
}

void wait_context::settle(MPI_Request* reqs, std::size_t first, std::size_t n) {
  for (std::size_t i = first; i < first + n; ++i) {
    if (done_[i]) continue;
    int flag = 0;
    HALOX_MPI_CHECK(MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE));
    if (flag) done_[i] = 1;
  }
}

void wait_context::poll() {
  if (cfg_.watch) cfg_.watch->poll(to_string(kind_));
}

void wait_context::wait_all(MPI_Request* reqs, std::size_t first, std::size_t n) {
  if (n == 0) return;
  int const count = static_cast<int>(n);
  MPI_Request* const r = reqs + first;
  if (cfg_.timeout <= 0 && cfg_.watch == nullptr) {
    HALOX_MPI_CHECK(MPI_Waitall(count, r, MPI_STATUSES_IGNORE));
    return;
  }
  // Polls: each round tests the messages, then the plan's failure notices, then the clock.
  auto const until = deadline();
  for (;;) {
    int flag = 0;
    HALOX_MPI_CHECK(MPI_Testall(count, r, &flag, MPI_STATUSES_IGNORE));
    if (flag) {
      std::fill(done_.begin() + static_cast<std::ptrdiff_t>(first),
                done_.begin() + static_cast<std::ptrdiff_t>(first + n), char{1});
      return;
    }
    poll();
    if (expired(until)) {
      settle(reqs, first, n);
      throw_timeout(first, n);
    }
  }
}

int wait_context::wait_any(MPI_Request* reqs, std::size_t first, std::size_t n) {
  if (n == 0) return MPI_UNDEFINED;
  int const count = static_cast<int>(n);
  MPI_Request* const r = reqs + first;
  int idx = MPI_UNDEFINED;
  if (cfg_.timeout <= 0 && cfg_.watch == nullptr) {
    HALOX_MPI_CHECK(MPI_Waitany(count, r, &idx, MPI_STATUS_IGNORE));
  } else {
    // A request returned before is inactive (or null) now: MPI_Testany passes over it.
    auto const until = deadline();
    for (;;) {
      int flag = 0;
      HALOX_MPI_CHECK(MPI_Testany(count, r, &idx, &flag, MPI_STATUS_IGNORE));
      if (flag) break;
      poll();
      if (expired(until)) {
        settle(reqs, first, n);
        throw_timeout(first, n);
      }
    }
  }
  if (idx != MPI_UNDEFINED) done_[first + static_cast<std::size_t>(idx)] = 1;
  return idx;
}

void wait_context::throw_timeout(std::size_t first, std::size_t n) {
  std::string recvs, sends;
  std::size_t rbytes = 0, sbytes = 0;
  for (std::size_t i = first; i < first + n; ++i) {
    if (i >= info_.size() || done_[i]) continue;
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
                    to_string(kind_) + ") timed out after " + std::to_string(cfg_.timeout) +
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

void wait_context::cancel_receives(MPI_Request* reqs, std::size_t n, int peer) noexcept {
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

bool wait_context::abandon_mpi(std::vector<MPI_Request>& reqs, double grace,
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

} // namespace halox::detail
