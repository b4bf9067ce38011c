#include "model/describe_fields.hpp"

#include <sstream>

namespace halox::detail {

std::string describe_fields(distribution const& d) {
  std::ostringstream os;
  os << "dtype=" << to_string(d.type()) << "; shape=";
  for (int k = 0; k < d.ndim(); ++k) os << (k ? "x" : "") << d.shape()[k];
  os << "; grid=";
  for (int k = 0; k < d.ndim(); ++k) os << (k ? "x" : "") << d.parts()[k];
  for (int k = 0; k < d.ndim(); ++k) {
    auto const& o = d.options(k);
    os << "; halo of dim " << k << "=" << o.halo_lo << "," << o.halo_hi << "; periodic dim " << k
       << "=" << (o.periodic ? "yes" : "no");
    if (!o.sizes.empty()) {
      os << "; part sizes of dim " << k << "=";
      std::size_t const shown = o.sizes.size() > 16 ? 16 : o.sizes.size();
      for (std::size_t i = 0; i < shown; ++i) os << (i ? "," : "") << o.sizes[i];
      if (shown < o.sizes.size()) os << ",...(" << o.sizes.size() << " parts)";
    }
  }
  return os.str();
}

} // namespace halox::detail
