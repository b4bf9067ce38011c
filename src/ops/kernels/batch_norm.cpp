#include "ops/kernels/bn_affine.hpp"
#include "ops/kernels/elementwise.hpp"
#include "ops/kernels/geometry.hpp"
#include "ops/kernels/parallel.hpp"
#include "ops/kernels/per_channel.hpp"

#include <halox/error.hpp>
#include <halox/ops/batch_norm.hpp>

#include <cmath>
#include <string>

namespace halox::ops {
namespace detail {
namespace {

constexpr auto bad = errc::invalid_argument;

// Calls f(offset) for each element of channel c, in a fixed order.
template <class F> void for_channel(per_channel const& g, index_t c, F&& f) {
  for (index_t n = 0; n < g.n; ++n) {
    index_t const base = n * g.sn + c * g.sc;
    for_each_element(g.rest, g.rest_strides, g.rest_strides, g.rest_strides,
                     [&](index_t o, index_t, index_t) { f(base + o); });
  }
}

// Same walk over two tensors of the same shape.
template <class F> void for_channel2(per_channel const& a, per_channel const& b, index_t c, F&& f) {
  for (index_t n = 0; n < a.n; ++n) {
    index_t const ba = n * a.sn + c * a.sc, bb = n * b.sn + c * b.sc;
    for_each_element(a.rest, a.rest_strides, b.rest_strides, b.rest_strides,
                     [&](index_t oa, index_t ob, index_t) { f(ba + oa, bb + ob); });
  }
}

} // namespace

void require_moments(char const* op, bn_moments const& m, index_t c) {
  HALOX_REQUIRE(
      static_cast<index_t>(m.mean.size()) == c && static_cast<index_t>(m.invstd.size()) == c, bad,
      std::string(op) + ": the moments hold " + std::to_string(m.mean.size()) + " means and " +
          std::to_string(m.invstd.size()) + " inverse deviations but the tensor has " +
          std::to_string(c) + " channels; pass the moments computed for this layer");
}

void require_grad_sums(char const* op, bn_grad_sums const& total, index_t c) {
  HALOX_REQUIRE(static_cast<index_t>(total.sum_dy.size()) == c && total.count > 0 &&
                    static_cast<index_t>(total.sum_dy_xhat.size()) == c,
                errc::invalid_argument,
                std::string(op) + ": the gradient sums hold " +
                    std::to_string(total.sum_dy.size()) + " channels and count " +
                    std::to_string(total.count) + "; expected " + std::to_string(c) +
                    " channels with a positive count (merge every rank's bn_backward_partial)");
}
} // namespace detail

template <class T> bn_stats bn_partial_stats(const_tensor_ref<T> x) {
  bn_stats s;
  bn_partial_stats_into<T>(x, s);
  return s;
}

template <class T> void bn_partial_stats_into(const_tensor_ref<T> x, bn_stats& s) {
  auto g = detail::split("bn_partial_stats", "x", x);
  s.count = g.n * g.inner;
  s.mean.assign(g.c, 0.0);
  s.m2.assign(g.c, 0.0);
  if (s.count == 0) return;
  detail::parallel_for(g.c, detail::use_threads(s.count * g.c), [&](index_t c) {
    double sum = 0;
    detail::for_channel(g, c, [&](index_t o) { sum += static_cast<double>(x.data[o]); });
    double const mean = sum / static_cast<double>(s.count);
    double m2 = 0;
    detail::for_channel(g, c, [&](index_t o) {
      double const d = static_cast<double>(x.data[o]) - mean;
      m2 += d * d;
    });
    s.mean[c] = mean;
    s.m2[c] = m2;
  });
}

void bn_merge_stats(bn_stats& into, bn_stats const& other) {
  if (other.count == 0) return;
  if (into.count == 0) {
    into = other;
    return;
  }
  HALOX_REQUIRE(into.mean.size() == other.mean.size() && into.m2.size() == other.m2.size(),
                errc::invalid_argument,
                "bn_merge_stats: statistics of " + std::to_string(into.mean.size()) + " and " +
                    std::to_string(other.mean.size()) +
                    " channels cannot be merged; merge the statistics of one layer");
  double const na = static_cast<double>(into.count), nb = static_cast<double>(other.count);
  double const n = na + nb;
  for (std::size_t c = 0; c < into.mean.size(); ++c) {
    double const delta = other.mean[c] - into.mean[c];
    into.mean[c] += delta * (nb / n);
    into.m2[c] += other.m2[c] + delta * delta * (na * nb / n);
  }
  into.count += other.count;
}

template <class T> bn_moments bn_finalize_stats(bn_stats const& total, double eps, double momentum,
                                                T* running_mean, T* running_var) {
  bn_moments m;
  bn_finalize_stats_into<T>(total, eps, momentum, running_mean, running_var, m);
  return m;
}

template <class T> void bn_finalize_stats_into(bn_stats const& total, double eps, double momentum,
                                               T* running_mean, T* running_var, bn_moments& m) {
  char const* op = "bn_finalize_stats";
  HALOX_REQUIRE(total.count >= 2, errc::invalid_argument,
                std::string(op) + ": " + std::to_string(total.count) +
                    " value(s) per channel; training batch norm needs at least 2 (merge every "
                    "rank's statistics first, or use inference mode)");
  HALOX_REQUIRE(eps >= 0 && momentum >= 0 && momentum <= 1, errc::invalid_argument,
                std::string(op) + ": eps " + std::to_string(eps) + " must be >= 0 and momentum " +
                    std::to_string(momentum) + " must lie in [0, 1]");
  std::size_t const c = total.mean.size();
  m.mean.assign(total.mean.begin(), total.mean.end());
  m.invstd.resize(c);
  double const n = static_cast<double>(total.count);
  for (std::size_t i = 0; i < c; ++i) {
    m.invstd[i] = 1.0 / std::sqrt(total.m2[i] / n + eps);
    if (running_mean)
      running_mean[i] = static_cast<T>((1 - momentum) * static_cast<double>(running_mean[i]) +
                                       momentum * total.mean[i]);
    if (running_var)
      running_var[i] = static_cast<T>((1 - momentum) * static_cast<double>(running_var[i]) +
                                      momentum * total.m2[i] / (n - 1));
  }
}

template <class T> bn_moments bn_inference_moments(T const* running_mean, T const* running_var,
                                                   index_t channels, double eps) {
  bn_moments m;
  bn_inference_moments_into<T>(running_mean, running_var, channels, eps, m);
  return m;
}

template <class T> void bn_inference_moments_into(T const* running_mean, T const* running_var,
                                                  index_t channels, double eps, bn_moments& m) {
  HALOX_REQUIRE(channels == 0 || (running_mean && running_var), errc::invalid_argument,
                "bn_inference_moments: running_mean and running_var must be non-null in "
                "inference mode");
  m.mean.resize(channels);
  m.invstd.resize(channels);
  for (index_t c = 0; c < channels; ++c) {
    double const v = static_cast<double>(running_var[c]);
    HALOX_REQUIRE(v + eps > 0, errc::invalid_argument,
                  "bn_inference_moments: running_var[" + std::to_string(c) +
                      "] + eps = " + std::to_string(v + eps) + " is not positive");
    m.mean[c] = static_cast<double>(running_mean[c]);
    m.invstd[c] = 1.0 / std::sqrt(v + eps);
  }
}

template <class T> void bn_apply(const_tensor_ref<T> x, bn_moments const& m, T const* gamma,
                                 T const* beta, tensor_ref<T> y) {
  char const* op = "bn_apply";
  auto gx = detail::split(op, "x", x);
  auto gy = detail::split(op, "y", y);
  detail::require_same(op, "y", y.shape, "x", x.shape);
  detail::require_moments(op, m, gx.c);
  detail::parallel_for(gx.c, detail::use_threads(gx.n * gx.inner * gx.c), [&](index_t c) {
    double const scale = m.invstd[c] * (gamma ? static_cast<double>(gamma[c]) : 1.0);
    double const shift = (beta ? static_cast<double>(beta[c]) : 0.0) - m.mean[c] * scale;
    detail::for_channel2(gx, gy, c, [&](index_t ox, index_t oy) {
      y.data[oy] = static_cast<T>(static_cast<double>(x.data[ox]) * scale + shift);
    });
  });
}

template <class T> bn_grad_sums bn_backward_partial(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                                    bn_moments const& m) {
  bn_grad_sums s;
  bn_backward_partial_into<T>(x, dy, m, s);
  return s;
}

template <class T> void bn_backward_partial_into(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                                 bn_moments const& m, bn_grad_sums& s) {
  char const* op = "bn_backward_partial";
  auto gx = detail::split(op, "x", x);
  auto gd = detail::split(op, "dy", dy);
  detail::require_same(op, "dy", dy.shape, "x", x.shape);
  detail::require_moments(op, m, gx.c);
  s.count = gx.n * gx.inner;
  s.sum_dy.assign(gx.c, 0.0);
  s.sum_dy_xhat.assign(gx.c, 0.0);
  detail::parallel_for(gx.c, detail::use_threads(gx.n * gx.inner * gx.c), [&](index_t c) {
    double sd = 0, sdx = 0;
    detail::for_channel2(gx, gd, c, [&](index_t ox, index_t od) {
      double const g = static_cast<double>(dy.data[od]);
      sd += g;
      sdx += g * (static_cast<double>(x.data[ox]) - m.mean[c]);
    });
    s.sum_dy[c] = sd;
    s.sum_dy_xhat[c] = sdx * m.invstd[c];
  });
}

void bn_merge_grad_sums(bn_grad_sums& into, bn_grad_sums const& other) {
  if (other.count == 0) return;
  if (into.count == 0) {
    into = other;
    return;
  }
  HALOX_REQUIRE(into.sum_dy.size() == other.sum_dy.size(), errc::invalid_argument,
                "bn_merge_grad_sums: sums of " + std::to_string(into.sum_dy.size()) + " and " +
                    std::to_string(other.sum_dy.size()) + " channels cannot be merged");
  for (std::size_t c = 0; c < into.sum_dy.size(); ++c) {
    into.sum_dy[c] += other.sum_dy[c];
    into.sum_dy_xhat[c] += other.sum_dy_xhat[c];
  }
  into.count += other.count;
}

template <class T>
void bn_backward_apply(const_tensor_ref<T> x, const_tensor_ref<T> dy, bn_moments const& m,
                       T const* gamma, bn_grad_sums const& total, bool training, tensor_ref<T> dx) {
  char const* op = "bn_backward_apply";
  auto gx = detail::split(op, "x", x);
  auto gd = detail::split(op, "dy", dy);
  auto gdx = detail::split(op, "dx", dx);
  detail::require_same(op, "dy", dy.shape, "x", x.shape);
  detail::require_same(op, "dx", dx.shape, "x", x.shape);
  detail::require_moments(op, m, gx.c);
  if (training) detail::require_grad_sums(op, total, gx.c);
  detail::parallel_for(gx.c, detail::use_threads(gx.n * gx.inner * gx.c), [&](index_t c) {
    double const k = m.invstd[c] * (gamma ? static_cast<double>(gamma[c]) : 1.0);
    double mdy = 0, mdyx = 0;
    if (training) {
      double const n = static_cast<double>(total.count);
      mdy = total.sum_dy[c] / n;
      mdyx = total.sum_dy_xhat[c] / n;
    }
    double const mean = m.mean[c], is = m.invstd[c];
    for (index_t n = 0; n < gx.n; ++n) {
      index_t const bx = n * gx.sn + c * gx.sc, bd = n * gd.sn + c * gd.sc,
                    bo = n * gdx.sn + c * gdx.sc;
      detail::for_each_element(gx.rest, gx.rest_strides, gd.rest_strides, gdx.rest_strides,
                               [&](index_t ox, index_t od, index_t oo) {
                                 double const xhat =
                                     (static_cast<double>(x.data[bx + ox]) - mean) * is;
                                 double const g = static_cast<double>(dy.data[bd + od]);
                                 dx.data[bo + oo] = static_cast<T>(k * (g - mdy - xhat * mdyx));
                               });
    }
  });
}

template <class T> void bn_param_grads(bn_grad_sums const& total, T* dgamma, T* dbeta) {
  for (std::size_t c = 0; c < total.sum_dy.size(); ++c) {
    if (dgamma) dgamma[c] = static_cast<T>(total.sum_dy_xhat[c]);
    if (dbeta) dbeta[c] = static_cast<T>(total.sum_dy[c]);
  }
}

template <class T> bn_moments batch_norm_forward(const_tensor_ref<T> x, T const* gamma,
                                                 T const* beta, T* running_mean, T* running_var,
                                                 tensor_ref<T> y, bn_params const& p) {
  bn_moments m;
  if (p.training) {
    m = bn_finalize_stats<T>(bn_partial_stats<T>(x), p.eps, p.momentum, running_mean, running_var);
  } else {
    auto g = detail::split("batch_norm_forward", "x", x);
    m = bn_inference_moments<T>(running_mean, running_var, g.c, p.eps);
  }
  bn_apply<T>(x, m, gamma, beta, y);
  return m;
}

template <class T> void batch_norm_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                            bn_moments const& saved, T const* gamma,
                                            tensor_ref<T> dx, T* dgamma, T* dbeta,
                                            bn_params const& p) {
  bn_grad_sums s = bn_backward_partial<T>(x, dy, saved);
  bn_backward_apply<T>(x, dy, saved, gamma, s, p.training, dx);
  bn_param_grads<T>(s, dgamma, dbeta);
}

#define HALOX_INSTANTIATE(T)                                                                       \
  template bn_stats bn_partial_stats(const_tensor_ref<T>);                                         \
  template void bn_partial_stats_into(const_tensor_ref<T>, bn_stats&);                             \
  template bn_moments bn_finalize_stats(bn_stats const&, double, double, T*, T*);                  \
  template void bn_finalize_stats_into(bn_stats const&, double, double, T*, T*, bn_moments&);      \
  template bn_moments bn_inference_moments(T const*, T const*, index_t, double);                   \
  template void bn_inference_moments_into(T const*, T const*, index_t, double, bn_moments&);       \
  template void bn_apply(const_tensor_ref<T>, bn_moments const&, T const*, T const*,               \
                         tensor_ref<T>);                                                           \
  template bn_grad_sums bn_backward_partial(const_tensor_ref<T>, const_tensor_ref<T>,              \
                                            bn_moments const&);                                    \
  template void bn_backward_partial_into(const_tensor_ref<T>, const_tensor_ref<T>,                 \
                                         bn_moments const&, bn_grad_sums&);                        \
  template void bn_backward_apply(const_tensor_ref<T>, const_tensor_ref<T>, bn_moments const&,     \
                                  T const*, bn_grad_sums const&, bool, tensor_ref<T>);             \
  template void bn_param_grads(bn_grad_sums const&, T*, T*);                                       \
  template bn_moments batch_norm_forward(const_tensor_ref<T>, T const*, T const*, T*, T*,          \
                                         tensor_ref<T>, bn_params const&);                         \
  template void batch_norm_backward(const_tensor_ref<T>, const_tensor_ref<T>, bn_moments const&,   \
                                    T const*, tensor_ref<T>, T*, T*, bn_params const&);
HALOX_INSTANTIATE(float)
HALOX_INSTANTIATE(double)
#undef HALOX_INSTANTIATE

} // namespace halox::ops
