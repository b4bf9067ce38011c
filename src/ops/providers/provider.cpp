// Provider selection and `local_kernels<T>`, the public face of the provider seam.
#include "ops/providers/compute_provider.hpp"

#include <halox/error.hpp>

#include <type_traits>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace halox::ops {

std::string to_string(compute_provider p) {
  switch (p) {
  case compute_provider::automatic: return "automatic";
  case compute_provider::reference: return "reference";
  case compute_provider::onednn: return "onednn";
  case compute_provider::cudnn: return "cudnn";
  }
  return "unknown";
}

compute_provider provider_from_string(std::string const& name) {
  for (auto p : {compute_provider::automatic, compute_provider::reference, compute_provider::onednn,
                 compute_provider::cudnn})
    if (to_string(p) == name) return p;
  ::halox::detail::throw_error(errc::invalid_argument,
                               "unknown compute provider \"" + name +
                                   "\"; use automatic, reference, onednn or cudnn",
                               "provider_from_string", __FILE__, __LINE__);
}

bool provider_built(compute_provider p) noexcept {
  switch (p) {
  case compute_provider::automatic:
  case compute_provider::reference: return true;
  case compute_provider::onednn:
#ifdef HALOX_OPS_ONEDNN
    return true;
#else
    return false;
#endif
  case compute_provider::cudnn:
#ifdef HALOX_OPS_CUDNN
    return true;
#else
    return false;
#endif
  }
  return false;
}

memory_space provider_memory(compute_provider p) noexcept {
  return p == compute_provider::cudnn ? memory_space::device : memory_space::host;
}

compute_provider resolve_provider(compute_provider requested, dtype t) {
  constexpr auto bad = errc::invalid_argument;
  HALOX_REQUIRE(t == dtype::float32 || t == dtype::float64, bad,
                "compute provider: dtype " + std::string(to_string(t)) +
                    " has no operators; use float32 or float64");
  if (requested == compute_provider::automatic)
    return provider_built(compute_provider::onednn) && t == dtype::float32
               ? compute_provider::onednn
               : compute_provider::reference;
  HALOX_REQUIRE(provider_built(requested), bad,
                "compute provider " + to_string(requested) +
                    " is not built into this halox; reconfigure with -DHALOX_ENABLE_" +
                    (requested == compute_provider::onednn ? "ONEDNN" : "CUDNN") + "=ON (needs " +
                    (requested == compute_provider::onednn ? "libdnnl-dev" : "cuDNN and CUDA") +
                    ") or choose provider automatic or reference");
  HALOX_REQUIRE(!(requested == compute_provider::onednn && t != dtype::float32), bad,
                "compute provider onednn supports float32 only (oneDNN has no float64 "
                "convolution), got " +
                    std::string(to_string(t)) +
                    "; use provider reference or automatic for float64");
  return requested;
}

namespace detail {

template <class T> std::unique_ptr<compute_kernels<T>> make_compute_kernels(compute_provider p) {
  switch (resolve_provider(p, dtype_of<T>())) {
  case compute_provider::onednn:
#ifdef HALOX_OPS_ONEDNN
    if constexpr (std::is_same_v<T, float>) return make_onednn_kernels();
#endif
    break;
  case compute_provider::cudnn:
#ifdef HALOX_OPS_CUDNN
    return make_cudnn_kernels<T>();
#else
    break;
#endif
  default: return make_reference_kernels<T>();
  }
  ::halox::detail::throw_error(errc::internal,
                               "compute provider " + to_string(p) + " could not be created",
                               "make_compute_kernels", __FILE__, __LINE__);
}
template std::unique_ptr<compute_kernels<float>> make_compute_kernels(compute_provider);
template std::unique_ptr<compute_kernels<double>> make_compute_kernels(compute_provider);

} // namespace detail

namespace {
// Sets the OpenMP thread count of the calling thread for one call and restores it after.
class thread_scope {
public:
  explicit thread_scope(int n) {
#ifdef _OPENMP
    if (n > 0) {
      saved_ = omp_get_max_threads();
      omp_set_num_threads(n);
    }
#else
    (void)n;
#endif
  }
  ~thread_scope() {
#ifdef _OPENMP
    if (saved_ > 0) omp_set_num_threads(saved_);
#endif
  }
  thread_scope(thread_scope const&) = delete;
  thread_scope& operator=(thread_scope const&) = delete;

private:
  int saved_ = 0;
};
} // namespace

template <class T> local_kernels<T>::local_kernels(compute_provider p, int threads)
    : impl_(detail::make_compute_kernels<T>(p)), threads_(threads) {
  HALOX_REQUIRE(threads >= 0, errc::invalid_argument,
                "local_kernels: threads = " + std::to_string(threads) +
                    " is negative; pass 0 (default_threads()) or a positive count");
  if (threads > 0) {
    run_threads_ = threads;
    threads_why_ = "chosen by the caller";
  } else {
    thread_default const d = default_threads();
    run_threads_ = d.threads;
    threads_why_ = (d.threads > 0 ? "default: " : "") + d.reason;
  }
}
template <class T> local_kernels<T>::~local_kernels() = default;
template <class T> local_kernels<T>::local_kernels(local_kernels&&) noexcept = default;
template <class T>
local_kernels<T>& local_kernels<T>::operator=(local_kernels&&) noexcept = default;

template <class T> compute_provider local_kernels<T>::provider() const noexcept {
  return impl_->kind();
}
template <class T> int local_kernels<T>::threads() const noexcept { return threads_; }

template <class T>
void local_kernels<T>::conv_forward_box(const_block_ref<T> x, dims const& in_extent,
                                        const_tensor_ref<T> w, T const* bias, block_ref<T> y,
                                        box const& out_box, conv_params const& p) {
  thread_scope s(run_threads_);
  impl_->conv_forward(std::move(x), in_extent, std::move(w), bias, std::move(y), out_box, p);
}
template <class T>
void local_kernels<T>::conv_forward_relu_box(const_block_ref<T> x, dims const& in_extent,
                                             const_tensor_ref<T> w, T const* bias, block_ref<T> y,
                                             box const& out_box, conv_params const& p) {
  thread_scope s(run_threads_);
  impl_->conv_forward_relu(std::move(x), in_extent, std::move(w), bias, std::move(y), out_box, p);
}
template <class T>
void local_kernels<T>::conv_backward_data_box(const_block_ref<T> dy, dims const& in_extent,
                                              const_tensor_ref<T> w, block_ref<T> dx,
                                              box const& in_box, conv_params const& p,
                                              bool dy_kept) {
  thread_scope s(run_threads_);
  impl_->conv_backward_data(std::move(dy), in_extent, std::move(w), std::move(dx), in_box, p,
                            dy_kept);
}
template <class T>
void local_kernels<T>::conv_backward_weights_box(const_block_ref<T> x, dims const& in_extent,
                                                 const_block_ref<T> dy, tensor_ref<T> dw,
                                                 box const& out_box, conv_params const& p,
                                                 bool x_kept) {
  thread_scope s(run_threads_);
  impl_->conv_backward_weights(std::move(x), in_extent, std::move(dy), std::move(dw), out_box, p,
                               x_kept);
}
template <class T>
void local_kernels<T>::conv_backward_bias_box(const_block_ref<T> dy, box const& out_box, T* db) {
  thread_scope s(run_threads_);
  impl_->conv_backward_bias(std::move(dy), out_box, db);
}
template <class T>
void local_kernels<T>::pool_forward_box(const_block_ref<T> x, dims const& in_extent, block_ref<T> y,
                                        box const& out_box, pool_params const& p, bool keep) {
  thread_scope s(run_threads_);
  impl_->pool_forward(std::move(x), in_extent, std::move(y), out_box, p, keep);
}
template <class T>
void local_kernels<T>::pool_backward_box(const_block_ref<T> x, const_block_ref<T> dy,
                                         dims const& in_extent, block_ref<T> dx, box const& in_box,
                                         pool_params const& p, bool x_kept) {
  thread_scope s(run_threads_);
  impl_->pool_backward(std::move(x), std::move(dy), in_extent, std::move(dx), in_box, p, x_kept);
}
template <class T> void local_kernels<T>::relu_forward(const_tensor_ref<T> x, tensor_ref<T> y) {
  thread_scope s(run_threads_);
  impl_->relu_forward(std::move(x), std::move(y));
}
template <class T> void local_kernels<T>::relu_backward(const_tensor_ref<T> x,
                                                        const_tensor_ref<T> dy, tensor_ref<T> dx) {
  thread_scope s(run_threads_);
  impl_->relu_backward(std::move(x), std::move(dy), std::move(dx));
}
template <class T> bn_stats local_kernels<T>::bn_partial_stats(const_tensor_ref<T> x) {
  bn_stats out;
  bn_partial_stats(x, out);
  return out;
}
template <class T> void local_kernels<T>::bn_partial_stats(const_tensor_ref<T> x, bn_stats& out) {
  thread_scope s(run_threads_);
  impl_->bn_partial_stats(x, out);
}
template <class T> bn_grad_sums local_kernels<T>::bn_backward_partial(const_tensor_ref<T> x,
                                                                      const_tensor_ref<T> dy,
                                                                      bn_moments const& m) {
  bn_grad_sums out;
  bn_backward_partial(x, dy, m, out);
  return out;
}
template <class T>
void local_kernels<T>::bn_backward_partial(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                           bn_moments const& m, bn_grad_sums& out) {
  thread_scope s(run_threads_);
  impl_->bn_backward_partial(x, dy, m, out);
}
template <class T> void local_kernels<T>::bn_apply(const_tensor_ref<T> x, bn_moments const& m,
                                                   T const* gamma, T const* beta, tensor_ref<T> y) {
  thread_scope s(run_threads_);
  impl_->bn_apply(std::move(x), m, gamma, beta, std::move(y));
}
template <class T> void local_kernels<T>::bn_apply_relu(const_tensor_ref<T> x, bn_moments const& m,
                                                        T const* gamma, T const* beta,
                                                        tensor_ref<T> y) {
  thread_scope s(run_threads_);
  impl_->bn_apply_relu(std::move(x), m, gamma, beta, std::move(y));
}
template <class T> void local_kernels<T>::bn_backward_apply(const_tensor_ref<T> x,
                                                            const_tensor_ref<T> dy,
                                                            bn_moments const& m, T const* gamma,
                                                            bn_grad_sums const& total,
                                                            bool training, tensor_ref<T> dx) {
  thread_scope s(run_threads_);
  impl_->bn_backward_apply(std::move(x), std::move(dy), m, gamma, total, training, std::move(dx));
}
template <class T>
void local_kernels<T>::lrn_forward(const_tensor_ref<T> x, tensor_ref<T> y, lrn_params const& p) {
  thread_scope s(run_threads_);
  impl_->lrn_forward(std::move(x), std::move(y), p);
}
template <class T> void local_kernels<T>::lrn_backward(const_tensor_ref<T> x,
                                                       const_tensor_ref<T> dy, tensor_ref<T> dx,
                                                       lrn_params const& p) {
  thread_scope s(run_threads_);
  impl_->lrn_backward(std::move(x), std::move(dy), std::move(dx), p);
}
template <class T> std::string local_kernels<T>::describe() const { return impl_->describe(); }
template <class T> memory_use local_kernels<T>::memory() const { return impl_->memory(); }
template <class T> void local_kernels<T>::keep_reorders(bool keep) { impl_->keep_reorders(keep); }
template <class T> std::string local_kernels<T>::threads_description() const {
  if (run_threads_ == 0) return "OpenMP's default threads (" + threads_why_ + ")";
  return std::to_string(run_threads_) + (run_threads_ == 1 ? " thread (" : " threads (") +
         threads_why_ + ")";
}

template class local_kernels<float>;
template class local_kernels<double>;

} // namespace halox::ops
