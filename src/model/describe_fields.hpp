#pragma once
// "name=value; ..." descriptions of what every rank must pass alike, for errors that say which
// field differs between ranks (see collective_check's `describe`).

#include <halox/distribution.hpp>

#include <string>

namespace halox::detail {

/// dtype, shape, grid, and per dimension halo widths, periodicity and explicit part sizes.
[[nodiscard]] std::string describe_fields(distribution const& d);

} // namespace halox::detail
