#include "tune/select.hpp"

#include <halox/error.hpp>

#include <cstdlib>

namespace halox::detail {

selection select_backend(backend requested, schedule const&, exec_config const& cfg,
                         tune_options const&, std::uint64_t) {
  selection sel;
  if (requested == backend::automatic) {
    if (char const* env = std::getenv("HALOX_BACKEND"); env && *env) {
      sel.chosen = backend_from_string(env);
      sel.report = std::string("forced by HALOX_BACKEND=") + env;
    } else {
      sel.chosen = cfg.memory == memory_space::host ? backend::mpi_pack : backend::staged_mpi;
      sel.report = "default";
    }
  } else {
    sel.chosen = requested;
    sel.report = "requested";
  }
  HALOX_REQUIRE(sel.chosen != backend::automatic, errc::invalid_argument,
                "HALOX_BACKEND=auto cannot force a backend; name one, e.g. mpi_pack");
  return sel;
}

} // namespace halox::detail
