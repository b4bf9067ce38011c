#pragma once
// Vectorised host LRN across channels (float and double): the same functions as lrn_forward /
// lrn_backward (lrn.hpp), computed on chunks of contiguous positions with every channel of the
// chunk at hand, so each pass is a SIMD loop over positions and backward needs no second
// forward, no workspace and no layout change. The fast host provider (oneDNN) uses them where
// they beat oneDNN's primitives; the reference provider keeps its plain loops as the oracle.
// Arithmetic is in T (the reference works in double), so float results differ from the
// reference's in the last bits; they are the same on every CPU (no contraction into FMA under
// -std=c++17, and square root and division are correctly rounded at every vector width).

#include <halox/ops/lrn.hpp>
#include <halox/ops/tensor_ref.hpp>

namespace halox::ops::detail {

/// The instruction set the kernels run with on this CPU ("avx512f", "avx2" or "baseline"): on
/// x86-64 with GCC or Clang they are compiled for each and the fastest the CPU has is chosen
/// when the program loads.
char const* fast_lrn_isa();

/// As `lrn_forward`.
template <class T>
void fast_lrn_forward(const_tensor_ref<T> x, tensor_ref<T> y, lrn_params const& p);
/// As `lrn_backward`.
template <class T> void fast_lrn_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                          tensor_ref<T> dx, lrn_params const& p);

} // namespace halox::ops::detail
