// The reference provider: halox's own kernels (conv.hpp, pool.hpp, relu.hpp, batch_norm.hpp,
// lrn.hpp), the oracle every other provider is tested against.
#include "ops/providers/compute_provider.hpp"

#include <halox/ops/batch_norm.hpp>
#include <halox/ops/conv.hpp>
#include <halox/ops/lrn.hpp>
#include <halox/ops/pool.hpp>
#include <halox/ops/relu.hpp>

namespace halox::ops::detail {
namespace {

template <class T> class reference_kernels final : public compute_kernels<T> {
public:
  compute_provider kind() const noexcept override { return compute_provider::reference; }

  void conv_forward(const_block_ref<T> x, dims const& in_extent, const_tensor_ref<T> w,
                    T const* bias, block_ref<T> y, box const& out_box,
                    conv_params const& p) override {
    conv_forward_box<T>(x, in_extent, w, bias, y, out_box, p);
  }
  void conv_backward_data(const_block_ref<T> dy, dims const& in_extent, const_tensor_ref<T> w,
                          block_ref<T> dx, box const& in_box, conv_params const& p,
                          bool /*dy_kept: nothing kept*/) override {
    conv_backward_data_box<T>(dy, in_extent, w, dx, in_box, p);
  }
  void conv_backward_weights(const_block_ref<T> x, dims const& in_extent, const_block_ref<T> dy,
                             tensor_ref<T> dw, box const& out_box, conv_params const& p,
                             bool /*x_kept: nothing kept*/) override {
    conv_backward_weights_box<T>(x, in_extent, dy, dw, out_box, p);
  }
  void conv_backward_bias(const_block_ref<T> dy, box const& out_box, T* db) override {
    conv_backward_bias_box<T>(dy, out_box, db);
  }
  void pool_forward(const_block_ref<T> x, dims const& in_extent, block_ref<T> y, box const& out_box,
                    pool_params const& p, bool /*keep: nothing to keep*/) override {
    pool_forward_box<T>(x, in_extent, y, out_box, p);
  }
  void pool_backward(const_block_ref<T> x, const_block_ref<T> dy, dims const& in_extent,
                     block_ref<T> dx, box const& in_box, pool_params const& p,
                     bool /*x_kept: the winners are found again*/) override {
    pool_backward_box<T>(x, dy, in_extent, dx, in_box, p);
  }
  void relu_forward(const_tensor_ref<T> x, tensor_ref<T> y) override { ops::relu_forward<T>(x, y); }
  void relu_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy, tensor_ref<T> dx) override {
    ops::relu_backward<T>(x, dy, dx);
  }
  void bn_partial_stats(const_tensor_ref<T> x, bn_stats& out) override {
    ops::bn_partial_stats_into<T>(x, out);
  }
  void bn_backward_partial(const_tensor_ref<T> x, const_tensor_ref<T> dy, bn_moments const& m,
                           bn_grad_sums& out) override {
    ops::bn_backward_partial_into<T>(x, dy, m, out);
  }
  void bn_apply(const_tensor_ref<T> x, bn_moments const& m, T const* gamma, T const* beta,
                tensor_ref<T> y) override {
    ops::bn_apply<T>(x, m, gamma, beta, y);
  }
  void bn_backward_apply(const_tensor_ref<T> x, const_tensor_ref<T> dy, bn_moments const& m,
                         T const* gamma, bn_grad_sums const& total, bool training,
                         tensor_ref<T> dx) override {
    ops::bn_backward_apply<T>(x, dy, m, gamma, total, training, dx);
  }
  void lrn_forward(const_tensor_ref<T> x, tensor_ref<T> y, lrn_params const& p) override {
    ops::lrn_forward<T>(x, y, p);
  }
  void lrn_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy, tensor_ref<T> dx,
                    lrn_params const& p) override {
    ops::lrn_backward<T>(x, dy, dx, p);
  }
  std::string describe() const override {
    return "reference: im2col gather + src/ops/gemm.cpp (no per-shape choice)\n";
  }
};

} // namespace

template <class T> std::unique_ptr<compute_kernels<T>> make_reference_kernels() {
  return std::make_unique<reference_kernels<T>>();
}
template std::unique_ptr<compute_kernels<float>> make_reference_kernels();
template std::unique_ptr<compute_kernels<double>> make_reference_kernels();

} // namespace halox::ops::detail
