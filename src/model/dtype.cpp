#include <halox/dtype.hpp>
#include <halox/error.hpp>

namespace halox {

std::size_t size_of(dtype t) {
  switch (t) {
  case dtype::float32: return 4;
  case dtype::float64: return 8;
  case dtype::float16: return 2;
  case dtype::bfloat16: return 2;
  case dtype::int32: return 4;
  case dtype::int64: return 8;
  case dtype::uint8: return 1;
  }
  throw error(errc::invalid_argument,
              "unknown dtype value " + std::to_string(static_cast<int>(t)) +
                  "; use one of float32, float64, float16, bfloat16, int32, int64, uint8");
}

char const* to_string(dtype t) noexcept {
  switch (t) {
  case dtype::float32: return "float32";
  case dtype::float64: return "float64";
  case dtype::float16: return "float16";
  case dtype::bfloat16: return "bfloat16";
  case dtype::int32: return "int32";
  case dtype::int64: return "int64";
  case dtype::uint8: return "uint8";
  }
  return "unknown";
}

dtype dtype_from_string(std::string const& name) {
  for (dtype t : {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16, dtype::int32,
                  dtype::int64, dtype::uint8})
    if (name == to_string(t)) return t;
  throw error(errc::invalid_argument,
              "unknown dtype '" + name +
                  "'; use one of float32, float64, float16, bfloat16, int32, int64, uint8");
}

} // namespace halox
