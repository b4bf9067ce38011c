#pragma once
// What every plan shares: a private communicator, the forward schedule, the executors for both
// directions, the backend selection and the start/wait state machine.

#include "exec/executor.hpp"
#include "tune/select.hpp"

#include <halox/detail/mpi_handle.hpp>
#include <halox/halo.hpp>

#include <memory>
#include <string>

namespace halox::detail {

/// Settings a plan passes to the engine.
struct engine_options {
  backend method = backend::automatic;
  memory_space memory = memory_space::host;
  double fill_value = 0.0;
  tune_options tune;
};

class plan_engine {
public:
  /// Collective over `base`: duplicates it, selects the backend and builds the forward executor.
  /// `key` is the geometry hash used by the plan cache.
  plan_engine(MPI_Comm base, schedule forward, engine_options const& o, std::uint64_t key);
  ~plan_engine();

  /// Begins an exchange (forward, or reverse combining with `op`).
  void start(void* const* bufs, bool reverse, combine_op op, void* stream);
  /// Completes the exchange in flight.
  void wait(void* stream);

  [[nodiscard]] backend selected() const noexcept { return selected_; }
  [[nodiscard]] schedule const& forward() const noexcept { return forward_; }
  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_.get(); }
  [[nodiscard]] memory_space memory() const noexcept { return cfg_.memory; }
  [[nodiscard]] std::string const& selection_report() const noexcept { return report_; }
  /// Peers, bytes, regions, backend.
  [[nodiscard]] std::string summary() const;

private:
  unique_comm comm_;
  schedule forward_;
  exec_config cfg_;
  backend selected_ = backend::mpi_pack;
  std::string report_;
  std::unique_ptr<executor> fwd_, rev_;
  executor* active_ = nullptr;
};

/// Converts the public reduction to the internal combine op.
[[nodiscard]] combine_op to_combine(reduce_op op) noexcept;

} // namespace halox::detail
