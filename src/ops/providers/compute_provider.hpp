#pragma once
// The compute-provider seam: the local kernels every operator calls, whichever library runs
// them. One implementation per folder (src/ops/reference, src/ops/onednn, src/ops/cudnn); the
// operators and `local_kernels<T>` only see this interface.

#include <halox/error.hpp>
#include <halox/ops/lrn.hpp>
#include <halox/ops/provider.hpp>

#include <memory>
#include <string>
#include <vector>

namespace halox::ops::detail {

/// The local kernels of one provider. Signatures and semantics are those of the reference
/// `*_box` functions: forward and backward-data overwrite their box, weight and bias gradients
/// accumulate. Implementations may keep per-shape state (plans, scratch), so an object serves
/// one thread.
template <class T> class compute_kernels {
public:
  virtual ~compute_kernels() = default;
  [[nodiscard]] virtual compute_provider kind() const noexcept = 0;

  virtual void conv_forward(const_block_ref<T> x, dims const& in_extent, const_tensor_ref<T> w,
                            T const* bias, block_ref<T> y, box const& out_box,
                            conv_params const& p) = 0;
  /// `dy_kept`: dy is unchanged since the last conv_backward_weights call of this object, so a
  /// provider may read the copy of it that call made (oneDNN: dy reordered into its layout).
  virtual void conv_backward_data(const_block_ref<T> dy, dims const& in_extent,
                                  const_tensor_ref<T> w, block_ref<T> dx, box const& in_box,
                                  conv_params const& p, bool dy_kept) = 0;
  /// `x_kept`: x is unchanged since the last conv_forward call of this object (as for
  /// pool_backward).
  virtual void conv_backward_weights(const_block_ref<T> x, dims const& in_extent,
                                     const_block_ref<T> dy, tensor_ref<T> dw, box const& out_box,
                                     conv_params const& p, bool x_kept) = 0;
  virtual void conv_backward_bias(const_block_ref<T> dy, box const& out_box, T* db) = 0;
  /// `keep`: the provider may keep what a later backward call over the same outputs needs
  /// (oneDNN: max pooling's winners); providers that keep nothing ignore it.
  virtual void pool_forward(const_block_ref<T> x, dims const& in_extent, block_ref<T> y,
                            box const& out_box, pool_params const& p, bool keep) = 0;
  /// `x_kept`: x is unchanged since the last pool forward call of this object, so a provider
  /// may use what that call kept; the others find the winners again.
  virtual void pool_backward(const_block_ref<T> x, const_block_ref<T> dy, dims const& in_extent,
                             block_ref<T> dx, box const& in_box, pool_params const& p,
                             bool x_kept) = 0;
  virtual void relu_forward(const_tensor_ref<T> x, tensor_ref<T> y) = 0;
  virtual void relu_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy, tensor_ref<T> dx) = 0;
  // The statistics go into the caller's structures, whose storage is reused from step to step.
  virtual void bn_partial_stats(const_tensor_ref<T> x, bn_stats& out) = 0;
  virtual void bn_backward_partial(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                   bn_moments const& m, bn_grad_sums& out) = 0;
  virtual void bn_apply(const_tensor_ref<T> x, bn_moments const& m, T const* gamma, T const* beta,
                        tensor_ref<T> y) = 0;
  virtual void bn_backward_apply(const_tensor_ref<T> x, const_tensor_ref<T> dy, bn_moments const& m,
                                 T const* gamma, bn_grad_sums const& total, bool training,
                                 tensor_ref<T> dx) = 0;
  /// conv_forward followed by ReLU on the box of y it wrote. This default runs the two passes;
  /// oneDNN applies the ReLU inside the convolution (a post-op).
  virtual void conv_forward_relu(const_block_ref<T> x, dims const& in_extent, const_tensor_ref<T> w,
                                 T const* bias, block_ref<T> y, box const& out_box,
                                 conv_params const& p) {
    conv_forward(x, in_extent, w, bias, y, out_box, p);
    box b; // out_box in y's own index coordinates, all batch and channel positions
    b.nd = y.ref.rank();
    b.hi[0] = y.ref.shape[0];
    b.hi[1] = y.ref.shape[1];
    for (int d = 2; d < b.nd; ++d) {
      index_t const o = y.origin.empty() ? 0 : y.origin[static_cast<std::size_t>(d - 2)];
      b.lo[d] = out_box.lo[d - 2] - o;
      b.hi[d] = out_box.hi[d - 2] - o;
    }
    tensor_ref<T> const v = sub_box(y.ref, b);
    relu_forward(v, v);
  }
  /// bn_apply followed by ReLU on y. This default runs the two passes; fast providers fuse them.
  virtual void bn_apply_relu(const_tensor_ref<T> x, bn_moments const& m, T const* gamma,
                             T const* beta, tensor_ref<T> y) {
    bn_apply(x, m, gamma, beta, y);
    relu_forward(y, y);
  }
  /// LRN across channels on whole-channel tensors (as `lrn_forward` / `lrn_backward`). A
  /// provider without LRN keeps these defaults, which throw.
  virtual void lrn_forward(const_tensor_ref<T> x, tensor_ref<T> y, lrn_params const& p) {
    (void)x, (void)y, (void)p;
    unsupported("lrn_forward");
  }
  virtual void lrn_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy, tensor_ref<T> dx,
                            lrn_params const& p) {
    (void)x, (void)dy, (void)dx, (void)p;
    unsupported("lrn_backward");
  }
  /// One line per problem shape: what was chosen and what each candidate cost.
  [[nodiscard]] virtual std::string describe() const = 0;
  /// What this object holds between calls (`held_*`) and in scratch of its own (`call_*`);
  /// the shared scratch is not counted here.
  [[nodiscard]] virtual memory_use memory() const { return {}; }
  /// Whether a convolution's forward keeps its reordered x for the backward (see
  /// dist_options::keep_reorders); providers that reorder nothing ignore it.
  virtual void keep_reorders(bool keep) { (void)keep; }

private:
  [[noreturn]] void unsupported(char const* op) const {
    ::halox::detail::throw_error(errc::invalid_argument,
                                 std::string(op) + ": LRN is not supported by the " +
                                     to_string(kind()) +
                                     " provider; use provider reference or onednn",
                                 op, __FILE__, __LINE__);
  }
};

/// The reference kernels (src/ops/reference).
template <class T> std::unique_ptr<compute_kernels<T>> make_reference_kernels();
/// oneDNN (src/ops/onednn; float only). Defined only when built with oneDNN.
std::unique_ptr<compute_kernels<float>> make_onednn_kernels();
/// cuDNN (src/ops/cudnn). Defined only when built with cuDNN.
template <class T> std::unique_ptr<compute_kernels<T>> make_cudnn_kernels();

/// The kernels of `p` for element type T: `automatic` resolved as `resolve_provider` does.
template <class T> std::unique_ptr<compute_kernels<T>> make_compute_kernels(compute_provider p);

} // namespace halox::ops::detail
