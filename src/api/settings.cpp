// The report of the HALOX_* variables set in this process. Here rather than with the settings
// table (src/common/environment.cpp, the bottom layer) because HALOX_BACKEND's names come from
// the backend table, which only this layer may read.
#include "common/environment.hpp"

#include <halox/backend.hpp>
#include <halox/error.hpp>
#include <halox/settings.hpp>

namespace halox {

std::string describe_environment() {
  std::string out;
  for (auto const& v : detail::settings::set_variables()) {
    std::string why = v.problem;
    if (why.empty() && v.name == "HALOX_BACKEND") {
      try {
        (void)backend_from_string(v.value);
      } catch (error const& e) {
        why = e.message();
      }
    }
    out += v.name + "=" + v.value;
    if (!why.empty()) out += " (rejected: " + why + ")";
    out += "\n";
  }
  return out;
}

} // namespace halox
