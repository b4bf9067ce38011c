#pragma once
// The table of backends: one entry per public `backend` name, saying what the backend is made
// of (its transport, its packing strategy, the memory it serves) and how its executor is made.
// Everything that lists, names, checks or builds backends reads this one table: to_string and
// backend_from_string, host_backends() / device_backends() (which the tuner races, in table
// order), backend_available, make_executor and describe().

#include "exec/executor.hpp"

#include <halox/backend.hpp>

#include <memory>
#include <string>

namespace halox::detail {

/// Makes a backend's executor (`b` is the entry's own backend).
using executor_maker = std::unique_ptr<executor> (*)(backend b, schedule const& s,
                                                     exec_config const& cfg);

/// One backend.
struct backend_entry {
  backend id;
  char const* name;      ///< its public name (halox::to_string)
  memory_space memory;   ///< the buffers it runs on
  char const* transport; ///< how bytes travel ("mpi", "ucx", "mpi collective", "nccl", ...)
  char const* packing;   ///< how non-contiguous data is put on the wire ("pack", "iov", ...)
  executor_maker make;   ///< null when this build lacks it (its library or platform)
};

/// A range of table entries.
struct backend_range {
  backend_entry const* first;
  backend_entry const* last;
  [[nodiscard]] backend_entry const* begin() const noexcept { return first; }
  [[nodiscard]] backend_entry const* end() const noexcept { return last; }
};

/// Every backend but `automatic`, in the stable order of host_backends() / device_backends().
[[nodiscard]] backend_range backend_table() noexcept;
/// The entry of `b`; null for `automatic` (and for a value outside the enumeration).
[[nodiscard]] backend_entry const* find_backend(backend b) noexcept;

/// "transport T, packing P" of `b`, for describe(); empty for `automatic`.
[[nodiscard]] std::string backend_axes(backend b);

} // namespace halox::detail
