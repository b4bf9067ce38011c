#include "ops/kernels/elementwise.hpp"
#include "ops/kernels/geometry.hpp"

#include <halox/error.hpp>
#include <halox/ops/relu.hpp>

#include <string>

namespace halox::ops {
using detail::require_same;

template <class T> void relu_forward(const_tensor_ref<T> x, tensor_ref<T> y) {
  char const* op = "relu_forward";
  detail::check_ref(op, "x", x);
  detail::check_ref(op, "y", y);
  require_same(op, "y", y.shape, "x", x.shape);
  detail::for_each_element(x.shape, x.strides, y.strides, y.strides,
                           [&](index_t ox, index_t oy, index_t) {
                             T const v = x.data[ox];
                             y.data[oy] = v < T(0) ? T(0) : v;
                           });
}

template <class T>
void relu_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy, tensor_ref<T> dx) {
  char const* op = "relu_backward";
  detail::check_ref(op, "x", x);
  detail::check_ref(op, "dy", dy);
  detail::check_ref(op, "dx", dx);
  require_same(op, "dy", dy.shape, "x", x.shape);
  require_same(op, "dx", dx.shape, "x", x.shape);
  detail::for_each_element(x.shape, x.strides, dy.strides, dx.strides,
                           [&](index_t ox, index_t od, index_t oo) {
                             dx.data[oo] = x.data[ox] <= T(0) ? T(0) : dy.data[od];
                           });
}

template void relu_forward(const_tensor_ref<float>, tensor_ref<float>);
template void relu_forward(const_tensor_ref<double>, tensor_ref<double>);
template void relu_backward(const_tensor_ref<float>, const_tensor_ref<float>, tensor_ref<float>);
template void relu_backward(const_tensor_ref<double>, const_tensor_ref<double>, tensor_ref<double>);

} // namespace halox::ops
