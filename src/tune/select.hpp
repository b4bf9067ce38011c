#pragma once
// Backend selection for a plan: honour an explicit choice or $HALOX_BACKEND, otherwise measure.

#include "exec/executor.hpp"

#include <halox/halo.hpp>

#include <cstdint>
#include <string>

namespace halox::detail {

/// Outcome of the selection.
struct selection {
  backend chosen = backend::mpi_pack;
  std::string report; ///< how it was chosen (forced / env / measured times of every candidate)
};

/// Chooses the backend for schedule `s` on the plan communicator `cfg.comm` (collective: every
/// rank reaches the same decision). `requested` other than automatic is validated and used as
/// is. `key` identifies the geometry for the plan cache.
[[nodiscard]] selection select_backend(backend requested, schedule const& s,
                                       exec_config const& cfg, tune_options const& tune,
                                       std::uint64_t key);

} // namespace halox::detail
