#pragma once
// Checks that a caller's buffer fits the descriptor a plan was built for.

#include <halox/error.hpp>
#include <halox/tensor_view.hpp>

#include <string>

namespace halox::detail {

/// True when `v` is a buffer for a tensor laid out exactly like `expected` and large enough:
/// the condition every check below enforces, cheap enough for every execution.
inline bool view_matches(tensor_view const& v, tensor_desc const& expected) {
  return v.desc != nullptr &&
         (v.desc == &expected ||
          (v.desc->dist() == expected.dist() && v.desc->strides() == expected.strides())) &&
         v.bytes >= expected.local_bytes() && (expected.local_bytes() == 0 || v.data != nullptr);
}

/// Throws `halox::error` unless `v` is a buffer for a tensor laid out exactly like `expected`
/// (same global description and local strides) and large enough. `what` names the argument.
inline void check_view(tensor_view const& v, tensor_desc const& expected, std::string const& what) {
  HALOX_REQUIRE(v.desc != nullptr, errc::invalid_argument,
                what + " has no descriptor; build it as tensor_view(desc, data, bytes)");
  HALOX_REQUIRE(v.desc == &expected ||
                    (v.desc->dist() == expected.dist() && v.desc->strides() == expected.strides()),
                errc::invalid_argument,
                what + " was described as " + v.desc->dist().str() +
                    " but the plan was built for " + expected.dist().str() +
                    " (or its strides differ); pass the buffer of the planned tensor, or build a "
                    "plan for this one");
  std::size_t const need = expected.local_bytes();
  HALOX_REQUIRE(v.bytes >= need, errc::invalid_argument,
                what + " holds " + std::to_string(v.bytes) + " bytes but the descriptor needs " +
                    std::to_string(need) + " on this rank; allocate tensor_desc::local_bytes()");
  HALOX_REQUIRE(need == 0 || v.data != nullptr, errc::invalid_argument,
                what + " is a null pointer but this rank holds " + std::to_string(need) + " bytes");
}

/// Like the above, for argument `index` of a list (`index` < 0: a single argument called
/// `what`); builds no string unless the view is rejected, so it may run on every execution.
inline void check_view(tensor_view const& v, tensor_desc const& expected, char const* what,
                       int index) {
  if (!view_matches(v, expected))
    check_view(v, expected,
               index < 0 ? std::string(what) : std::string(what) + " " + std::to_string(index));
}

} // namespace halox::detail
