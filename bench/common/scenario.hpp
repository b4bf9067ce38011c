#pragma once
// A benchmark scenario: one communication pattern (a halo exchange or a redistribution) with
// its buffers and the schedule halox plans for it, and the entries measured on it:
//
//   <name>/limit_transport  pre-packed contiguous MPI_Isend/MPI_Irecv of the schedule's messages
//                           (same peers, same byte counts): what the network/MPI can do
//   <name>/limit_copy_transport  the same exchange with the send buffers written by a memcpy
//                           just before sending and the receive buffers copied out after: a
//                           pack backend whose pack and unpack ran at memcpy speed
//   <name>/limit_memcpy     one memcpy of the bytes this rank moves (sent + copied locally)
//   <name>/limit_alltoall   (redistributions) MPI_Alltoall(v) of pre-packed buffers holding the
//                           same bytes, the self block included
//   <name>/phase_pack       halox's CPU pack of every send message of the schedule, standalone
//   <name>/phase_unpack     halox's CPU unpack of every receive message, standalone
//   <name>/<backend>        the real plan, executed end to end
//
// The phase entries time halox's pack path on the exact schedule the plan runs (the planners are
// pure, so the bench computes the same schedule); they are not timers inside the backends.
// Backend entries measure the transport, copy+transport and (redistributions) alltoall limits
// again, interleaved with their own iterations, and report them as counters with the ratios
// eff_transport = transport limit / backend time (1 = at the limit), eff_copy_transport and
// eff_alltoall.
//
// Entries of one scenario run back to back (Google Benchmark keeps registration order), so the
// scenario is built once and kept until an entry of another scenario starts.

#include "common/mpi_bench.hpp"

#include "plan/schedule.hpp"

#include <halox/backend.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace halox::bench {

/// Medians (seconds) of the limit and phase entries measured so far; 0 = not measured yet.
struct limit_set {
  double transport = 0, copy_transport = 0, memcpy = 0, alltoall = 0, pack = 0, unpack = 0;
};

/// One executable plan of a scenario: the operation to time and a label (the backend chosen).
struct runner {
  std::function<void()> op;
  std::string label;
  /// When set, replaces `label` after the timed loop (an automatic plan's choice may change in
  /// its first executions: the online re-check).
  std::function<std::string()> final_label;
  /// An automatic plan's describe() (its race, re-check and watch), for HALOX_BENCH_DESCRIBE.
  std::function<std::string()> describe;
  std::shared_ptr<void> keep; ///< owns the plan and whatever `op` refers to
};

class scenario {
public:
  /// `comm` is the communicator timings are taken over (all ranks of the scenario); `sched` the
  /// calling rank's schedule, `slots` its buffer per schedule slot (kept by the subclass).
  scenario(MPI_Comm comm, detail::schedule sched, std::vector<void*> slots);
  virtual ~scenario();
  scenario(scenario const&) = delete;
  scenario& operator=(scenario const&) = delete;

  /// Collective: builds the plan for backend `b` (throws on failure, on every rank alike).
  virtual runner make_runner(backend b) = 0;

  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_; }
  [[nodiscard]] detail::schedule const& sched() const noexcept { return sched_; }
  /// Bytes sent per exchange, max over ranks.
  [[nodiscard]] double bytes_sent() const noexcept { return bytes_sent_; }
  /// Bytes sent plus bytes copied locally, max over ranks.
  [[nodiscard]] double bytes_moved() const noexcept { return bytes_moved_; }
  /// Peers of the busiest rank.
  [[nodiscard]] int peers() const noexcept { return peers_; }
  /// Mean bytes per contiguous run of the send regions, min over ranks (a face that is one
  /// contiguous block has run_bytes = its size).
  [[nodiscard]] double run_bytes() const noexcept { return run_bytes_; }
  /// True when every send region on every rank is one contiguous run.
  [[nodiscard]] bool contiguous() const noexcept { return contiguous_; }

  /// Operations of the limit and phase entries (buffers allocated on first use).
  std::function<void()> transport_op();
  std::function<void()> copy_transport_op();
  std::function<void()> memcpy_op();
  std::function<void()> alltoall_op();
  std::function<void()> pack_op();
  std::function<void()> unpack_op();
  /// Limits measured so far in this run.
  limit_set& limits() noexcept { return lim_; }

private:
  MPI_Comm comm_;
  detail::schedule sched_;
  std::vector<void*> slots_;
  double bytes_sent_ = 0, bytes_moved_ = 0, run_bytes_ = 0;
  int peers_ = 0;
  bool contiguous_ = true;
  limit_set lim_;
  struct buffers;
  std::unique_ptr<buffers> buf_;
  buffers& bufs();
  void setup_transport();
  void exchange();
};

/// What a family registers per scenario.
struct scenario_spec {
  std::string name;      ///< entry prefix, e.g. "halo/nchw_f32/split_h/w1"
  int iterations = 10;   ///< per entry, equal on every rank
  bool alltoall = false; ///< also register limit_alltoall and report eff_alltoall
  std::function<std::unique_ptr<scenario>()> make; ///< collective
};

/// Registers the limit, phase and backend entries of `spec` (backends: host_backends() and
/// automatic).
void register_scenario(scenario_spec const& spec);

/// Backends benchmarked on host memory: every host backend of this build, then automatic.
[[nodiscard]] std::vector<backend> bench_backends();

} // namespace halox::bench
