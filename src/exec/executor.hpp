#pragma once
// The internal backend interface: an executor moves one schedule's data, at whole-plan
// granularity. It knows nothing about halos or distributions.

#include "exec/combine.hpp"
#include "plan/schedule.hpp"

#include <halox/backend.hpp>

#include <mpi.h>

#include <memory>

namespace halox::detail {

/// What every executor is built from.
struct exec_config {
  MPI_Comm comm = MPI_COMM_NULL; ///< the plan's private communicator
  memory_space memory = memory_space::host;
  double fill_value = 0.0; ///< value for the schedule's fill regions
};

/// Runs one schedule. Resources (buffers, requests, datatypes, topologies, streams) are created
/// in the constructor, so `start`/`wait` allocate nothing.
class executor {
public:
  executor(schedule s, exec_config const& cfg) : sched_(std::move(s)), cfg_(cfg) {}
  virtual ~executor() = default;
  executor(executor const&) = delete;
  executor& operator=(executor const&) = delete;

  /// Begins the exchange on the slot buffers `bufs` (valid until `wait` returns); received
  /// values are combined with `op`. `stream` is a cudaStream_t for device backends (ignored on
  /// the host).
  virtual void start(void* const* bufs, combine_op op, void* stream) = 0;
  /// Completes it: after return (host) or after the stream reaches this point (device), every
  /// received region, local copy and fill is in place.
  virtual void wait(void* stream) = 0;
  /// The backend this executor implements.
  [[nodiscard]] virtual backend kind() const noexcept = 0;
  /// The schedule it runs.
  [[nodiscard]] schedule const& sched() const noexcept { return sched_; }

protected:
  schedule sched_;
  exec_config cfg_;
};

/// Builds the executor for `b` (not `automatic`); throws `halox::error` (unsupported) when the
/// backend does not exist in this build or does not fit the memory space.
[[nodiscard]] std::unique_ptr<executor> make_executor(backend b, schedule const& s,
                                                      exec_config const& cfg);

/// True when `b` can run on buffers in `mem` in this build.
[[nodiscard]] bool backend_available(backend b, memory_space mem) noexcept;

} // namespace halox::detail
