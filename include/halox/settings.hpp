#pragma once
/// \file settings.hpp
/// The environment variables halox reads. Each stands in for an option of the C++ API
/// (`context_options`, `tune_options`, `grid_options`, ...) so that a job can be tuned without
/// recompiling; the option, when set in code, wins. halox reads them in one place, with one
/// parser per kind of value, and a value it cannot parse is an error (`errc::invalid_argument`)
/// that names the variable, the value and what it accepts, raised on every rank of the
/// collective call that reads it (contexts read theirs at construction).

#include <string>
#include <vector>

namespace halox {

/// One environment variable halox reads.
struct setting_info {
  std::string name;    ///< e.g. "HALOX_TIMEOUT"
  std::string accepts; ///< the values it takes, e.g. "a number of seconds >= 0"
  std::string unset;   ///< what halox does when it is unset or empty
  std::string option;  ///< the API option it stands in for, or where it applies
  std::string meaning; ///< one sentence
};

/// Every environment variable halox reads, in a fixed order (the table in docs/building.md lists
/// the same).
[[nodiscard]] std::vector<setting_info> const& environment_settings();

/// The variables of environment_settings() set in this process, one "NAME=value" line each, a
/// value halox would reject followed by " (rejected: ...)" with the reason; "" when none is set.
/// Never throws on a bad value: meant for reports (`build_info()` ends with it).
[[nodiscard]] std::string describe_environment();

} // namespace halox
