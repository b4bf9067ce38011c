#include "exec/executor.hpp"

#include "exec/cpu/pack.hpp"

#include <halox/error.hpp>

#include <string>

namespace halox::detail {

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

void executor::start(void* const* bufs, combine_op op, void* stream, bool reverse) {
  HALOX_REQUIRE(bound_, errc::invalid_state,
                "the plan has no workspace; call set_workspace() with at least "
                "workspace_bytes() before executing a plan built with external_workspace");
  bufs_ = bufs;
  op_ = op;
  waits_.begin(reverse);
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
  on_bind();
}

bool executor::abandon(double grace) noexcept {
  in_flight_ = false;
  return abandon_requests(grace);
}

void executor::cancel_peer(int peer) noexcept {
  if (collective_requests()) return;
  waits_.cancel_receives(reqs_.data(), reqs_.size(), peer);
}

bool executor::abandon_requests(double grace) noexcept {
  return wait_context::abandon_mpi(reqs_, grace, !collective_requests());
}

host_executor::host_executor(schedule s, exec_config cfg, backend kind)
    : executor(std::move(s), std::move(cfg), kind) {
  scratch_ = reserve(memory_kind::host, max_copy_bytes(sched_));
}

void host_executor::complete(void*) {
  // Local copies first: they overlap with the messages still in flight.
  run_local_copies(sched_, bufs_, op_, ws(memory_kind::host, scratch_));
  receive();
  run_fills(sched_, bufs_, cfg_.fill_value);
}

} // namespace halox::detail
