#pragma once
/// Bit-exact float16 / bfloat16 <-> float conversions (round to nearest even), host and device.
/// 16-bit tensors are moved as bytes; these are only needed to combine values in the reverse
/// (accumulating) exchange.

#include <halox/box.hpp>

#include <cstdint>
#include <cstring>

namespace halox::detail {

HALOX_HD inline float bits_to_float(std::uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
HALOX_HD inline std::uint32_t float_to_bits(float f) {
  std::uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/// bfloat16 bits -> float.
HALOX_HD inline float bf16_to_float(std::uint16_t h) {
  return bits_to_float(static_cast<std::uint32_t>(h) << 16);
}
/// float -> bfloat16 bits, round to nearest even; NaN stays NaN.
HALOX_HD inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

/// IEEE binary16 bits -> float.
HALOX_HD inline float half_to_float(std::uint16_t h) {
  std::uint32_t const sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13)); // inf / nan
  if (exp == 0) {
    if (man == 0) return bits_to_float(sign);
    // Subnormal: normalise.
    int e = -1;
    do {
      man <<= 1;
      ++e;
    } while ((man & 0x400u) == 0);
    man &= 0x3ffu;
    return bits_to_float(sign | static_cast<std::uint32_t>(127 - 15 - e) << 23 | (man << 13));
  }
  return bits_to_float(sign | (exp + 112u) << 23 | (man << 13));
}

/// float -> IEEE binary16 bits, round to nearest even, overflow to infinity.
HALOX_HD inline std::uint16_t float_to_half(float f) {
  std::uint32_t const u = float_to_bits(f);
  std::uint16_t const sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  std::uint32_t const absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // nan
  if (absu >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u); // overflow / inf
  if (absu < 0x38800000u) {                                                   // subnormal or zero
    if (absu < 0x33000000u) return sign;
    std::uint32_t const e = absu >> 23;
    std::uint32_t man = (absu & 0x7fffffu) | 0x800000u;
    int const shift = static_cast<int>(126 - e);
    std::uint32_t const rounded = man >> shift;
    std::uint32_t const rem = man & ((1u << shift) - 1u);
    std::uint32_t const half = 1u << (shift - 1);
    std::uint32_t r = rounded + ((rem > half || (rem == half && (rounded & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t v = absu - 0x38000000u; // rebias exponent 127 -> 15
  std::uint32_t const rem = v & 0x1fffu;
  v >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (v & 1u))) ++v;
  return static_cast<std::uint16_t>(sign | v);
}

} // namespace halox::detail
