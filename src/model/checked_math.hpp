#pragma once
// Overflow-checked 64-bit arithmetic for validating user-supplied extents, strides and counts.
// Signed overflow is undefined behaviour, so every product or sum of values a caller chose must
// go through these before it is used; the caller turns `false` into a halox::error that names
// the values and the limit.

#include <halox/box.hpp>

#include <limits>
#include <string>

namespace halox::detail {

/// Largest value an index_t holds (2^63 - 1).
inline constexpr index_t index_max = std::numeric_limits<index_t>::max();

/// `out = a * b`; false (and `out` unspecified) when the product does not fit in index_t.
[[nodiscard]] inline bool checked_mul(index_t a, index_t b, index_t& out) noexcept {
  return !__builtin_mul_overflow(a, b, &out);
}

/// `out = a + b`; false (and `out` unspecified) when the sum does not fit in index_t.
[[nodiscard]] inline bool checked_add(index_t a, index_t b, index_t& out) noexcept {
  return !__builtin_add_overflow(a, b, &out);
}

/// `a * b`, or index_max when it does not fit (non-negative operands): for cost models, where a
/// saturated value compares as "too big" rather than wrapping to a small one.
[[nodiscard]] inline index_t saturating_mul(index_t a, index_t b) noexcept {
  index_t r = 0;
  return checked_mul(a, b, r) ? r : index_max;
}

/// `a + b`, or index_max when it does not fit (non-negative operands).
[[nodiscard]] inline index_t saturating_add(index_t a, index_t b) noexcept {
  index_t r = 0;
  return checked_add(a, b, r) ? r : index_max;
}

/// "2^63-1 (9223372036854775807)": the limit as error messages name it.
[[nodiscard]] inline std::string index_limit_str() {
  return "2^63-1 (" + std::to_string(index_max) + ")";
}

} // namespace halox::detail
