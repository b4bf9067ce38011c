#include "exec/backend_table.hpp"

#include <halox/backend.hpp>
#include <halox/error.hpp>

namespace halox {

char const* to_string(backend b) noexcept {
  if (b == backend::automatic) return "auto";
  detail::backend_entry const* e = detail::find_backend(b);
  return e ? e->name : "unknown";
}

backend backend_from_string(std::string const& name) {
  if (name == "automatic" || name == "auto") return backend::automatic;
  if (name == "p2p") return backend::mpi_pack;
  std::string names = "auto";
  for (auto const& e : detail::backend_table()) {
    if (name == e.name) return e.id;
    names += std::string(", ") + e.name;
  }
  throw error(errc::invalid_argument,
              "unknown backend '" + name + "'; use one of " + names + " (or p2p = mpi_pack)");
}

std::vector<backend> host_backends() {
  std::vector<backend> out;
  for (auto const& e : detail::backend_table())
    if (detail::backend_available(e.id, memory_space::host)) out.push_back(e.id);
  return out;
}

std::vector<backend> device_backends() {
  std::vector<backend> out;
  for (auto const& e : detail::backend_table())
    if (detail::backend_available(e.id, memory_space::device)) out.push_back(e.id);
  return out;
}

} // namespace halox
