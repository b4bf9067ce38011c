#pragma once
// Internal view of an [N, C, ...] tensor as N x C planes (everything after the channel
// dimension), with the argument checks every batch-norm kernel starts with: shared by the
// reference loops (batch_norm.cpp) and the vectorised host kernels (fast_pointwise.cpp).

#include "ops/kernels/geometry.hpp"

#include <halox/error.hpp>
#include <halox/ops/tensor_ref.hpp>

#include <string>
#include <vector>

namespace halox::ops::detail {

/// Shape and strides of everything after the channel dimension (empty for [N, C]).
struct per_channel {
  index_t n = 0, c = 0, sn = 0, sc = 0, inner = 1;
  dims rest, rest_strides;
};

/// Checks that `t` is a valid [N, C, ...] view of rank >= 2 and splits it into planes.
template <class T> per_channel split(char const* op, char const* name, tensor_ref<T> const& t) {
  check_ref(op, name, t);
  HALOX_REQUIRE(t.rank() >= 2, errc::invalid_argument,
                std::string(op) + ": " + name + " has shape " + fmt(t.shape) +
                    "; expected [N, C, ...] of rank >= 2");
  per_channel r;
  r.n = t.shape[0];
  r.c = t.shape[1];
  r.sn = t.strides[0];
  r.sc = t.strides[1];
  r.rest.assign(t.shape.begin() + 2, t.shape.end());
  r.rest_strides.assign(t.strides.begin() + 2, t.strides.end());
  r.inner = element_count(r.rest);
  return r;
}

} // namespace halox::ops::detail
