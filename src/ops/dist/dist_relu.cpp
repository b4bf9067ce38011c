#include "ops/dist/dist_window.hpp"

#include <halox/error.hpp>
#include <halox/ops/dist_relu.hpp>

namespace halox::ops {

template <class T> dist_relu<T>::dist_relu(tensor_desc const& x, dist_options const& o)
    : desc_(x), kernels_([&] {
        // No collective: ReLU is pointwise and exchanges nothing, so a rank that cannot run the
        // provider fails alone without leaving the others waiting.
        (void)detail::check_provider("dist_relu", o, x.type());
        return std::make_shared<local_kernels<T>>(o.provider, o.threads);
      }()) {
  HALOX_REQUIRE(x.type() == dtype_of<T>(), errc::invalid_argument,
                std::string("dist_relu<") + to_string(dtype_of<T>()) + ">: the input has dtype " +
                    to_string(x.type()) + "; instantiate it with the matching type");
}

template <class T> void dist_relu<T>::forward(tensor_view const& x, tensor_view const& y) const {
  detail::check_partition(x, desc_, "dist_relu::forward: x");
  detail::check_partition(y, desc_, "dist_relu::forward: y");
  if (desc_.empty()) return;
  kernels_->relu_forward(owned_ref<T const>(x), owned_ref<T>(y));
}

template <class T> void dist_relu<T>::backward(tensor_view const& x, tensor_view const& dy,
                                               tensor_view const& dx) const {
  detail::check_partition(x, desc_, "dist_relu::backward: x");
  detail::check_partition(dy, desc_, "dist_relu::backward: dy");
  detail::check_partition(dx, desc_, "dist_relu::backward: dx");
  if (desc_.empty()) return;
  kernels_->relu_backward(owned_ref<T const>(x), owned_ref<T const>(dy), owned_ref<T>(dx));
}

template <class T> memory_use dist_relu<T>::memory() const { return kernels_->memory(); }

template class dist_relu<float>;
template class dist_relu<double>;

} // namespace halox::ops
