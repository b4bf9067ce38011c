#pragma once
// How received values are combined with the values already in place.

#include "common/dtype_dispatch.hpp"
#include "common/half.hpp"
#include <halox/dtype.hpp>

#include <cstdint>
#include <type_traits>

namespace halox::detail {

/// Combine operation of an unpack: plain overwrite (forward exchange) or a reduction (reverse).
enum class combine_op : std::uint8_t { replace, sum, max, min };

/// Combines `src` into `dst` for one element of type T.
template <class T> HALOX_HD inline void combine_value(T& dst, T src, combine_op op) {
  switch (op) {
  case combine_op::replace: dst = src; break;
  case combine_op::sum:
    if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      // Signed overflow is undefined behaviour: add in the unsigned type, which wraps around
      // (two's complement, as MPI_SUM does in practice), so an overflowing sum is still defined.
      using U = std::make_unsigned_t<T>;
      dst = static_cast<T>(static_cast<U>(static_cast<U>(dst) + static_cast<U>(src)));
    } else {
      dst = static_cast<T>(dst + src);
    }
    break;
  case combine_op::max: dst = dst < src ? src : dst; break;
  case combine_op::min: dst = src < dst ? src : dst; break;
  }
}

/// float16 / bfloat16 combine through float (stored as raw 16-bit words).
template <bool BF16>
HALOX_HD inline void combine_half(std::uint16_t& dst, std::uint16_t src, combine_op op) {
  if (op == combine_op::replace) {
    dst = src;
    return;
  }
  float a = BF16 ? bf16_to_float(dst) : half_to_float(dst);
  float const b = BF16 ? bf16_to_float(src) : half_to_float(src);
  combine_value(a, b, op);
  dst = BF16 ? float_to_bf16(a) : float_to_half(a);
}

/// Combines one element of the type tagged `E` (see detail/dtype_dispatch.hpp).
template <class T> HALOX_HD inline void combine_elem(plain_elem<T>, T& dst, T src, combine_op op) {
  combine_value(dst, src, op);
}
template <bool BF16> HALOX_HD inline void combine_elem(half_elem<BF16>, std::uint16_t& dst,
                                                       std::uint16_t src, combine_op op) {
  combine_half<BF16>(dst, src, op);
}

} // namespace halox::detail
