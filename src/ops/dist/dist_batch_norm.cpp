#include "ops/dist/dist_window.hpp"
#include "ops/providers/memory.hpp"

#include <halox/collective.hpp>
#include <halox/error.hpp>
#include <halox/ops/dist_batch_norm.hpp>
#include <halox/ops/provider.hpp>

#include <mpi.h>

namespace halox::ops {

template <class T> struct dist_batch_norm<T>::impl {
  tensor_desc desc;
  bn_stats_mode mode;
  bn_params p;
  index_t channels = 0;
  communicator comm;     // spans N and space: the processes sharing a channel block
  local_kernels<T> k;    // the provider of the normalisation passes
  detail::space_ops mem; // where x, y, gamma, beta and the running statistics live
  bn_moments m;          // of the last forward
  // Scratch reused by every step (sized by the first; later steps allocate nothing on the host).
  std::vector<double> buf, mine_buf;
  bn_stats local, total, one;
  bn_grad_sums local_g, total_g;
  dist_timings t;

  void forward(tensor_view const& x, tensor_view const& y, T const* gamma, T const* beta,
               T* running_mean, T* running_var, bool relu);

  impl(tensor_desc const& x, bn_stats_mode md, bn_params const& pp, dist_options const& o)
      : desc(x), mode(md), p(pp), channels(x.ndim() >= 2 ? x.shape()[1] : 0),
        comm(sub_comm(x, md, pp, o)), k(o.provider, o.threads), mem(provider_memory(k.provider())) {
  }

  // Per-channel arrays of the caller (gamma, running statistics, their gradients) live where
  // the provider computes; the statistics are merged on the host. These move them across.
  std::vector<T> fetch(T const* p) const {
    return detail::host_copy(mem, p, static_cast<std::size_t>(channels));
  }
  void store(T* dst, std::vector<T> const& v) const {
    if (dst != nullptr && !v.empty()) mem.from_host(dst, v.data(), v.size() * sizeof(T));
  }

  static communicator sub_comm(tensor_desc const& x, bn_stats_mode md, bn_params const& pp,
                               dist_options const& o) {
    check_collectively(
        x.grid().comm(), "dist_batch_norm",
        [&] {
          HALOX_REQUIRE(x.type() == dtype_of<T>(), errc::invalid_argument,
                        std::string("dist_batch_norm<") + to_string(dtype_of<T>()) +
                            ">: the input has dtype " + to_string(x.type()) +
                            "; instantiate it with the matching type");
          HALOX_REQUIRE(x.ndim() >= 2 && x.dist().parts()[1] == 1, errc::invalid_argument,
                        "dist_batch_norm: the input " + x.dist().str() +
                            " must be [N, C, ...] with the channels not split (grid extent 1 "
                            "along dimension 1)");
          (void)detail::check_provider("dist_batch_norm", o, x.type());
        },
        [&] {
          std::uint64_t h = static_cast<std::uint64_t>(md) * 1099511628211ull;
          h = (h ^ static_cast<std::uint64_t>(pp.eps * 1e12)) * 1099511628211ull;
          h = (h ^ static_cast<std::uint64_t>(pp.momentum * 1e12)) * 1099511628211ull;
          return (h ^ (pp.training ? 1u : 0u)) * 1099511628211ull;
        },
        [&] {
          return std::string("statistics=") + (md == bn_stats_mode::global ? "global" : "local") +
                 "; eps=" + std::to_string(pp.eps) + "; momentum=" + std::to_string(pp.momentum) +
                 "; training=" + (pp.training ? "yes" : "no");
        });
    std::vector<bool> keep(static_cast<std::size_t>(x.ndim()), true);
    keep[1] = false;
    return x.grid().sub_comm(keep);
  }
};

template <class T> dist_batch_norm<T>::dist_batch_norm(tensor_desc const& x, bn_stats_mode mode,
                                                       bn_params const& p, dist_options const& o)
    : impl_(std::make_unique<impl>(x, mode, p, o)) {}
template <class T> dist_batch_norm<T>::~dist_batch_norm() = default;
template <class T> dist_batch_norm<T>::dist_batch_norm(dist_batch_norm&&) noexcept = default;
template <class T>
dist_batch_norm<T>& dist_batch_norm<T>::operator=(dist_batch_norm&&) noexcept = default;

template <class T> bn_stats_mode dist_batch_norm<T>::mode() const noexcept { return impl_->mode; }
template <class T> bn_params const& dist_batch_norm<T>::params() const noexcept { return impl_->p; }
template <class T> void dist_batch_norm<T>::set_training(bool training) noexcept {
  impl_->p.training = training;
}
template <class T> bn_moments const& dist_batch_norm<T>::moments() const noexcept {
  return impl_->m;
}
template <class T> dist_timings const& dist_batch_norm<T>::timings() const noexcept {
  return impl_->t;
}

template <class T> void dist_batch_norm<T>::forward(tensor_view const& x, tensor_view const& y,
                                                    T const* gamma, T const* beta, T* running_mean,
                                                    T* running_var) {
  impl_->forward(x, y, gamma, beta, running_mean, running_var, false);
}

template <class T> void dist_batch_norm<T>::forward_relu(tensor_view const& x, tensor_view const& y,
                                                         T const* gamma, T const* beta,
                                                         T* running_mean, T* running_var) {
  impl_->forward(x, y, gamma, beta, running_mean, running_var, true);
}

template <class T>
void dist_batch_norm<T>::backward_relu(tensor_view const& x, tensor_view const& y,
                                       tensor_view const& dy, T const* gamma, tensor_view const& dx,
                                       T* dgamma, T* dbeta) {
  impl& I = *impl_;
  double const mask =
      detail::mask_relu_gradient(I.k, I.desc, y, dy, "dist_batch_norm::backward_relu: y",
                                 "dist_batch_norm::backward_relu: dy");
  backward(x, dy, gamma, dx, dgamma, dbeta);
  I.t.total += mask;
  I.t.compute += mask;
}

template <class T>
void dist_batch_norm<T>::impl::forward(tensor_view const& x, tensor_view const& y, T const* gamma,
                                       T const* beta, T* running_mean, T* running_var, bool relu) {
  impl& I = *this;
  dist_timings& t = I.t;
  t = {};
  double const t0 = MPI_Wtime();
  detail::check_partition(
      x, I.desc, relu ? "dist_batch_norm::forward_relu: x" : "dist_batch_norm::forward: x");
  detail::check_partition(
      y, I.desc, relu ? "dist_batch_norm::forward_relu: y" : "dist_batch_norm::forward: y");
  bool const mine = !I.desc.empty();
  index_t const c = I.channels;
  bool const host = I.mem.host();
  std::vector<T> rm, rv; // device providers: host copies of the running statistics
  if (!host) {
    rm = I.fetch(running_mean);
    rv = I.fetch(running_var);
  }
  T* const hrm = host ? running_mean : (rm.empty() ? nullptr : rm.data());
  T* const hrv = host ? running_var : (rv.empty() ? nullptr : rv.data());
  if (!I.p.training) {
    bn_inference_moments_into<T>(hrm, hrv, c, I.p.eps, I.m);
  } else {
    bn_stats& s = I.mode == bn_stats_mode::global ? I.total : I.local;
    I.local.count = 0;
    if (mine) I.k.bn_partial_stats(owned_ref<T const>(x), I.local);
    if (I.mode == bn_stats_mode::global) {
      // (count, mean, M2) of every rank, merged in rank order: the same rounding everywhere,
      // and no cancellation (a plain sum of squares would cancel when |mean| >> std).
      std::size_t const per = static_cast<std::size_t>(1 + 2 * c);
      I.mine_buf.assign(per, 0.0);
      I.mine_buf[0] = static_cast<double>(I.local.count);
      for (index_t i = 0; i < c && I.local.count > 0; ++i) {
        I.mine_buf[1 + i] = I.local.mean[i];
        I.mine_buf[1 + c + i] = I.local.m2[i];
      }
      int const np = I.comm.size();
      I.buf.assign(per * static_cast<std::size_t>(np), 0.0);
      double const r0 = MPI_Wtime();
      HALOX_MPI_CHECK(MPI_Allgather(I.mine_buf.data(), static_cast<int>(per), MPI_DOUBLE,
                                    I.buf.data(), static_cast<int>(per), MPI_DOUBLE, I.comm.get()));
      t.reduce += MPI_Wtime() - r0;
      I.total.count = 0;
      for (int r = 0; r < np; ++r) {
        double const* b = I.buf.data() + per * static_cast<std::size_t>(r);
        I.one.count = static_cast<index_t>(b[0]);
        I.one.mean.assign(b + 1, b + 1 + c);
        I.one.m2.assign(b + 1 + c, b + 1 + 2 * c);
        bn_merge_stats(I.total, I.one);
      }
    }
    // A local-mode rank without samples has no statistics (and no output to normalise).
    if (I.mode == bn_stats_mode::global || s.count > 0) {
      bn_finalize_stats_into<T>(s, I.p.eps, I.p.momentum, hrm, hrv, I.m);
      if (!host) {
        I.store(running_mean, rm);
        I.store(running_var, rv);
      }
    } else {
      I.m.mean.clear();
      I.m.invstd.clear();
    }
  }
  if (mine && relu)
    I.k.bn_apply_relu(owned_ref<T const>(x), I.m, gamma, beta, owned_ref<T>(y));
  else if (mine)
    I.k.bn_apply(owned_ref<T const>(x), I.m, gamma, beta, owned_ref<T>(y));
  t.total = MPI_Wtime() - t0;
  t.compute = t.total - t.reduce;
}

template <class T> void dist_batch_norm<T>::backward(tensor_view const& x, tensor_view const& dy,
                                                     T const* gamma, tensor_view const& dx,
                                                     T* dgamma, T* dbeta) {
  impl& I = *impl_;
  dist_timings& t = I.t;
  t = {};
  double const t0 = MPI_Wtime();
  detail::check_partition(x, I.desc, "dist_batch_norm::backward: x");
  detail::check_partition(dy, I.desc, "dist_batch_norm::backward: dy");
  detail::check_partition(dx, I.desc, "dist_batch_norm::backward: dx");
  bool const mine = !I.desc.empty() && !I.m.mean.empty();
  index_t const c = I.channels;
  bn_grad_sums& local = I.local_g;
  local.count = 0;
  local.sum_dy.assign(static_cast<std::size_t>(c), 0.0);
  local.sum_dy_xhat.assign(static_cast<std::size_t>(c), 0.0);
  if (mine) I.k.bn_backward_partial(owned_ref<T const>(x), owned_ref<T const>(dy), I.m, local);
  // Sums of dy and dy * xhat are plain sums: one MPI_SUM of [count, sum_dy, sum_dy_xhat].
  I.buf.assign(static_cast<std::size_t>(1 + 2 * c), 0.0);
  I.buf[0] = static_cast<double>(local.count);
  for (index_t i = 0; i < c; ++i) {
    I.buf[1 + i] = local.sum_dy[i];
    I.buf[1 + c + i] = local.sum_dy_xhat[i];
  }
  double const r0 = MPI_Wtime();
  HALOX_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, I.buf.data(), static_cast<int>(I.buf.size()),
                                MPI_DOUBLE, MPI_SUM, I.comm.get()));
  t.reduce = MPI_Wtime() - r0;
  bn_grad_sums& total = I.total_g;
  total.count = static_cast<index_t>(I.buf[0]);
  total.sum_dy.assign(I.buf.begin() + 1, I.buf.begin() + 1 + c);
  total.sum_dy_xhat.assign(I.buf.begin() + 1 + c, I.buf.end());
  if (mine) {
    bn_grad_sums const& for_dx = I.mode == bn_stats_mode::global ? total : local;
    I.k.bn_backward_apply(owned_ref<T const>(x), owned_ref<T const>(dy), I.m, gamma, for_dx,
                          I.p.training, owned_ref<T>(dx));
  }
  if (I.mem.host()) {
    bn_param_grads<T>(total, dgamma, dbeta);
  } else {
    std::vector<T> dg(static_cast<std::size_t>(c)), dbt(static_cast<std::size_t>(c));
    bn_param_grads<T>(total, dg.data(), dbt.data());
    I.store(dgamma, dg);
    I.store(dbeta, dbt);
  }
  t.total = MPI_Wtime() - t0;
  t.compute = t.total - t.reduce;
}

template <class T> memory_use dist_batch_norm<T>::memory() const {
  impl const& I = *impl_;
  memory_use m = I.k.memory();
  // Per-channel moments and sums: a few arrays of C doubles.
  m.held_host +=
      (I.buf.capacity() + I.mine_buf.capacity() + 8 * static_cast<std::size_t>(I.channels)) *
      sizeof(double);
  return m;
}

template class dist_batch_norm<float>;
template class dist_batch_norm<double>;

} // namespace halox::ops
