#pragma once
/// \file lrn.hpp
/// Reference local response normalisation (LRN) across channels, forward and backward, on
/// [N, C, ...] tensors of any rank >= 2 and any strides.
///
/// With `n = size`, each value is divided by a power of the sum of squares of its `n`
/// neighbours along the channel dimension, as PyTorch's `nn.LocalResponseNorm` does:
/// ```
/// s_c = k + alpha / n * sum_{c' = c - n/2}^{c + (n-1)/2} x_{c'}^2     (zero outside [0, C))
/// y_c = x_c * s_c^(-beta)
/// ```
/// (`n/2` rounded down, so an even `n` reaches one channel further down than up). The sums run
/// in double in increasing channel order, for float as for double.
///
/// Besides the whole-tensor functions, the `*_channels` functions compute the channels of one
/// block of a tensor whose channel dimension is split (`dist_lrn` splits it over ranks): `x`
/// then holds the block plus its neighbours' channels its windows reach. They give the
/// whole-tensor functions' bits on every channel they compute. Instantiated for `float` and
/// `double`.

#include <halox/ops/tensor_ref.hpp>

namespace halox::ops {

/// Parameters of LRN across channels (PyTorch's `nn.LocalResponseNorm(size, alpha, beta, k)`).
struct lrn_params {
  int size = 5;        ///< channels per window (>= 1), centred as above
  double alpha = 1e-4; ///< scale of the sum of squares (divided by `size`; >= 0)
  double beta = 0.75;  ///< exponent (finite)
  double k = 1.0;      ///< additive constant (> 0, so the base is never zero)
};

/// Throws `halox::error` (`errc::invalid_argument`) naming the bad value and the fix unless
/// `p` is valid: size >= 1, alpha >= 0, k > 0, all finite. `what` names the caller.
void check_lrn_params(lrn_params const& p, char const* what = "lrn");

/// Channels below a channel that its window reads: `size / 2`.
[[nodiscard]] constexpr int lrn_reach_lo(lrn_params const& p) noexcept { return p.size / 2; }
/// Channels above a channel that its window reads: `(size - 1) / 2`.
[[nodiscard]] constexpr int lrn_reach_hi(lrn_params const& p) noexcept { return (p.size - 1) / 2; }

/// y = LRN(x). `x` and `y` are [N, C, ...] of the same shape; `y` must not overlap `x`.
template <class T> void lrn_forward(const_tensor_ref<T> x, tensor_ref<T> y, lrn_params const& p);

/// dx = the gradient of `lrn_forward` at `x` for the output gradient `dy` (same shapes). Needs
/// only the forward's input: the sums of squares are recomputed. `dx` must not overlap `x` or
/// `dy`.
template <class T> void lrn_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                     tensor_ref<T> dx, lrn_params const& p);

/// Forward on a channel block. `x` holds the global channels `[x_c0, x_c0 + x.shape[1])` of a
/// tensor with `channels` channels, `y` the channels `[y_c0, y_c0 + y.shape[1])`; every window
/// of a `y` channel, clipped to `[0, channels)`, must lie in `x`'s channels. N and the other
/// dimensions of `x` and `y` must match.
template <class T> void lrn_forward_channels(const_tensor_ref<T> x, index_t x_c0, index_t channels,
                                             tensor_ref<T> y, index_t y_c0, lrn_params const& p);

/// First backward step on a channel block: `t_j = dy_j * x_j * s_j^(-beta-1)` for the channels
/// `[t_c0, t_c0 + t.shape[1])` of `t` (float64, however `T`), which `dy` holds exactly; `x` as
/// for `lrn_forward_channels`.
template <class T> void lrn_backward_terms(const_tensor_ref<T> x, index_t x_c0, index_t channels,
                                           const_tensor_ref<T> dy, tensor_ref<double> t,
                                           index_t t_c0, lrn_params const& p);

/// Second backward step: `dx_c = dy_c * s_c^(-beta) - 2 alpha beta / size * x_c * sum_j t_j`
/// over the channels `j` whose window contains `c` (`[c - (size-1)/2, c + size/2]`, clipped to
/// `[0, channels)`), for the channels `[dx_c0, dx_c0 + dx.shape[1])`, which `dy` holds exactly.
/// `t` holds the channels `[t_c0, t_c0 + t.shape[1])` and must cover those sums; `x` must
/// cover the windows of the `dx` channels.
template <class T> void lrn_backward_apply(const_tensor_ref<T> x, index_t x_c0, index_t channels,
                                           const_tensor_ref<T> dy, const_tensor_ref<double> t,
                                           index_t t_c0, tensor_ref<T> dx, index_t dx_c0,
                                           lrn_params const& p);

} // namespace halox::ops
