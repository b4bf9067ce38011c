#pragma once
/// \file dist_batch_norm.hpp
/// Batch normalisation over a tensor distributed along N and the spatial dimensions.

#include <halox/ops/batch_norm.hpp>
#include <halox/ops/dist_common.hpp>

#include <memory>

namespace halox::ops {

/// Where training-mode batch statistics come from.
enum class bn_stats_mode {
  /// Each rank normalises its block with the statistics of that block alone, as a
  /// data-parallel framework without synchronised batch norm does. No communication in the
  /// forward pass; the running statistics then differ from rank to rank.
  local,
  /// Statistics over the whole tensor: every rank's (count, mean, M2) per channel is gathered
  /// over the processes splitting N and space, and merged in rank order, so every rank gets the
  /// same moments and running statistics. What a spatially split layer needs to compute the
  /// same function as on one process.
  global
};

/// Batch normalisation (as `batch_norm_forward` / `batch_norm_backward`) on a distributed
/// [N, C, ...] tensor (rank 2 to 8, channels not split), for `T` = float or double.
///
/// Pointwise once the moments are known, so no halo is needed: the operator works on the owned
/// block of buffers of any halo widths and strides. The moments of the last training forward
/// are kept for `backward`. In both modes the parameter gradients dgamma and dbeta are summed
/// over the grid (every rank's outputs depend on the same gamma and beta), so they come out
/// identical everywhere; dx uses the statistics the forward used (global sums in global mode,
/// the rank's own in local mode). Calls are collective over the grid except a local-mode
/// forward, and an inference forward in either mode.
template <class T> class dist_batch_norm {
public:
  /// Collective over `x.grid()`. `p` gives eps, momentum and training (changeable later);
  /// of `o` only `provider` and `threads` apply (the normalisation passes; the statistics are
  /// always reduced as (count, mean, M2) by halox).
  dist_batch_norm(tensor_desc const& x, bn_stats_mode mode = bn_stats_mode::global,
                  bn_params const& p = {}, dist_options const& o = {});
  /// Frees the operator's plans and buffers on this rank (not collective; its plans' peers
  /// are told this rank left them).
  ~dist_batch_norm();
  /// Moves the operator (the moved-from one must not be used).
  dist_batch_norm(dist_batch_norm&&) noexcept;
  /// Move-assigns.
  dist_batch_norm& operator=(dist_batch_norm&&) noexcept;

  /// The statistics mode.
  [[nodiscard]] bn_stats_mode mode() const noexcept;
  /// The parameters (eps, momentum, training).
  [[nodiscard]] bn_params const& params() const noexcept;
  /// Switches between training (batch statistics) and inference (running statistics).
  void set_training(bool training) noexcept;

  /// y = (x - mean) * invstd * gamma + beta on the owned block. `x` and `y` have the blocks of
  /// the descriptor given at construction (any halos and strides; `y` may be `x`). `gamma`,
  /// `beta` [C] may be null (1 and 0). Training updates `running_mean` / `running_var` [C]
  /// when non-null; inference reads them (required then).
  void forward(tensor_view const& x, tensor_view const& y, T const* gamma, T const* beta,
               T* running_mean, T* running_var);
  /// dx on the owned block and, when non-null, dgamma / dbeta [C] (overwritten, summed over the
  /// grid). `x` is the input of the last forward; `dx` may be `dy`.
  void backward(tensor_view const& x, tensor_view const& dy, T const* gamma, tensor_view const& dx,
                T* dgamma, T* dbeta);

  /// Batch norm followed by ReLU, y = max(forward(x), 0), as one layer: the statistics and the
  /// running statistics are those of `forward`, and the providers that fuse the two (oneDNN)
  /// write y in a single pass over the block. `y` may be `x`.
  void forward_relu(tensor_view const& x, tensor_view const& y, T const* gamma, T const* beta,
                    T* running_mean, T* running_var);
  /// The backward of `forward_relu`: `y` is its output and `dy` the gradient of y. `dy` is
  /// overwritten with the gradient of the batch norm's output (dy where y > 0, else 0), then dx
  /// and the parameter gradients follow as in `backward`; `dx` may be `dy`.
  void backward_relu(tensor_view const& x, tensor_view const& y, tensor_view const& dy,
                     T const* gamma, tensor_view const& dx, T* dgamma, T* dbeta);

  /// What this operator uses on this rank (see `memory_use`): held between calls, and scratch
  /// of its own. Sizes follow the calls made so far.
  [[nodiscard]] memory_use memory() const;
  /// The moments used by the last forward on this rank.
  [[nodiscard]] bn_moments const& moments() const noexcept;
  /// Times of the last call on this rank (`reduce`: the statistics / gradient-sum exchanges).
  [[nodiscard]] dist_timings const& timings() const noexcept;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace halox::ops
