#pragma once
/// \file dtype.hpp
/// Element types halox can move.

#include <cstddef>
#include <cstdint>
#include <string>

namespace halox {

/// Element type of a distributed tensor. 16-bit floating types are moved as raw bytes; the
/// reverse (accumulating) exchange converts them to float to combine.
enum class dtype : std::uint8_t {
  float32,  ///< `float`, 4 bytes
  float64,  ///< `double`, 8 bytes
  float16,  ///< IEEE 754 half precision, 2 bytes
  bfloat16, ///< bfloat16 (the upper half of a float32), 2 bytes
  int32,    ///< `std::int32_t`, 4 bytes
  int64,    ///< `std::int64_t`, 8 bytes
  uint8     ///< `std::uint8_t`, 1 byte
};

/// Bytes per element.
[[nodiscard]] std::size_t size_of(dtype t);
/// Name ("float32", ...).
[[nodiscard]] char const* to_string(dtype t) noexcept;
/// Parses a name produced by `to_string`; throws `halox::error` naming the accepted names.
[[nodiscard]] dtype dtype_from_string(std::string const& name);

/// Maps a C++ element type to its dtype, e.g. `dtype_of<float>() == dtype::float32`.
template <class T> constexpr dtype dtype_of();
/// `dtype::float32`.
template <> constexpr dtype dtype_of<float>() { return dtype::float32; }
/// `dtype::float64`.
template <> constexpr dtype dtype_of<double>() { return dtype::float64; }
/// `dtype::int32`.
template <> constexpr dtype dtype_of<std::int32_t>() { return dtype::int32; }
/// `dtype::int64`.
template <> constexpr dtype dtype_of<std::int64_t>() { return dtype::int64; }
/// `dtype::uint8`.
template <> constexpr dtype dtype_of<std::uint8_t>() { return dtype::uint8; }

} // namespace halox
