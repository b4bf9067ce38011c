#pragma once
/// The one place that maps a runtime `dtype` to a compile-time element type (internal; host and
/// device). Every typed loop in halox (combining unpacks, fills, fill patterns, the verify
/// oracle) is written once as a generic function of an element tag and dispatched here.

#include "common/half.hpp"
#include <halox/dtype.hpp>

#include <cstdint>
#include <type_traits>

namespace halox::detail {

/// Element tag of an ordinary arithmetic type: stored as `T`, converted with casts.
template <class T> struct plain_elem {
  using storage = T;
  HALOX_HD static T from_double(double v) {
    // Integers wrap like the hardware does (through int64), where a direct cast would be
    // undefined for values out of range (e.g. a uint8 sum above 255).
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(static_cast<std::int64_t>(v));
    else
      return static_cast<T>(v);
  }
  HALOX_HD static double to_double(T v) { return static_cast<double>(v); }
};

/// Element tag of a 16-bit float stored as raw bits (IEEE half, or bfloat16 when `BF16`);
/// arithmetic goes through float.
template <bool BF16> struct half_elem {
  using storage = std::uint16_t;
  HALOX_HD static std::uint16_t from_double(double v) {
    return BF16 ? float_to_bf16(static_cast<float>(v)) : float_to_half(static_cast<float>(v));
  }
  HALOX_HD static double to_double(std::uint16_t v) {
    return BF16 ? bf16_to_float(v) : half_to_float(v);
  }
};

/// Calls `f(tag)` with the element tag of `t` and returns its result. `f` may be host-only or
/// device-only: the dispatch itself runs wherever it is called from.
#ifdef __CUDACC__
#pragma nv_exec_check_disable
#endif
template <class F> HALOX_HD decltype(auto) visit_dtype(dtype t, F&& f) {
  switch (t) {
  case dtype::float32: return f(plain_elem<float>{});
  case dtype::float64: return f(plain_elem<double>{});
  case dtype::int32: return f(plain_elem<std::int32_t>{});
  case dtype::int64: return f(plain_elem<std::int64_t>{});
  case dtype::float16: return f(half_elem<false>{});
  case dtype::bfloat16: return f(half_elem<true>{});
  case dtype::uint8: break;
  }
  return f(plain_elem<std::uint8_t>{});
}

} // namespace halox::detail
