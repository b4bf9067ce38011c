#include "exec/executor.hpp"

#include "exec/cpu/pack.hpp"

#include <halox/error.hpp>

#include <chrono>
#include <climits>
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

void executor::start(void* const* bufs, combine_op op, void* stream) {
  HALOX_REQUIRE(bound_, errc::invalid_state,
                "the plan has no workspace; call set_workspace() with at least "
                "workspace_bytes() before executing a plan built with external_workspace");
  bufs_ = bufs;
  op_ = op;
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
  on_bind();
}

bool executor::abandon() noexcept {
  in_flight_ = false;
  if (!mpi_alive()) return true;
  auto const n = static_cast<int>(reqs_.size());
  auto all_done = [&](double seconds) {
    auto const until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    do {
      int done = 0;
      if (n == 0 || MPI_Testall(n, reqs_.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
        return n == 0;
      if (done) return true;
    } while (std::chrono::steady_clock::now() < until);
    return false;
  };
  // Peers that still take part complete the exchange within moments.
  if (all_done(1.0)) return true;
  if (collective_requests()) return false; // a nonblocking collective cannot be cancelled
  for (auto& r : reqs_)
    if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
  if (all_done(1.0)) return true;
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
