#pragma once
/// \file dist_lrn.hpp
/// Local response normalisation across channels on a distributed tensor, which may split the
/// channels.

#include <halox/ops/dist_common.hpp>
#include <halox/ops/lrn.hpp>

#include <cstddef>
#include <memory>
#include <string>

namespace halox::ops {

/// LRN across channels (as `lrn_forward` / `lrn_backward`) on a distributed [N, C, ...] tensor
/// (rank 2 to 8), for `T` = float or double.
///
/// Unlike the other operators, LRN's window runs along the channels, so the grid may split the
/// channel dimension (dimension 1) as well as N and the spatial dimensions (which need no halo).
///
/// Channels not split: purely local, no communication; the provider computes the owned block
/// (oneDNN for float when built), and buffers may have any halos and strides.
///
/// Channels split: `input_desc()` has a channel halo of `size / 2` below and `(size - 1) / 2`
/// above (non-periodic; halo cells beyond the global channel range are never read), which
/// `forward` fills with one halo exchange; channels whose window lies in the rank's own block
/// are computed while it runs. `backward` reads those channel halos of x again (so x must be
/// the buffer of the last `forward`, unchanged since), computes the terms
/// `t_j = dy_j * x_j * s_j^(-beta-1)` of its own channels in float64, exchanges their halo
/// (`(size - 1) / 2` below, `size / 2` above: the channels whose windows hold a given channel),
/// and finishes dx locally. Nothing is accumulated across ranks, so the result is the serial
/// `lrn_forward` / `lrn_backward` bit for bit; the split path runs halox's reference kernels
/// whatever the provider. Every call is then collective over the grid.
template <class T> class dist_lrn {
public:
  /// Collective over `x.grid()`: every rank must pass the same parameters. Of `o`, `provider`
  /// and `threads` apply, and with split channels `method`, `overlap`, `overlap_trials` and
  /// `progress_polls`.
  /// Throws `halox::error` on every rank on bad parameters (see `check_lrn_params`), a
  /// periodic channel dimension, or a provider without LRN (cudnn).
  explicit dist_lrn(tensor_desc const& x, lrn_params const& p = {}, dist_options const& o = {});
  /// Frees the operator's plans and buffers on this rank (not collective; its plans' peers
  /// are told this rank left them).
  ~dist_lrn();
  /// Moves the operator (the moved-from one must not be used).
  dist_lrn(dist_lrn&&) noexcept;
  /// Move-assigns.
  dist_lrn& operator=(dist_lrn&&) noexcept;

  /// The parameters.
  [[nodiscard]] lrn_params const& params() const noexcept;
  /// Whether the grid splits the channels (then the operator exchanges halos).
  [[nodiscard]] bool splits_channels() const noexcept;
  /// Descriptor x must be allocated with: x's blocks, plus the channel halos when the channels
  /// are split (row-major).
  [[nodiscard]] tensor_desc const& input_desc() const noexcept;
  /// Descriptor of y, dy and dx: x's blocks, no halos.
  [[nodiscard]] tensor_desc const& output_desc() const noexcept;

  /// y = LRN(x) on the owned block. With split channels `x` is laid out exactly as
  /// `input_desc()` (its channel halos are overwritten); otherwise any buffer of x's blocks.
  /// `y` has the output's blocks (any halos and strides) and must not overlap `x`.
  void forward(tensor_view const& x, tensor_view const& y);
  /// dx on the owned block from `x` (the buffer of the last `forward`, unchanged since) and
  /// `dy`; `dx` may be `dy`.
  void backward(tensor_view const& x, tensor_view const& dy, tensor_view const& dx);

  /// What this operator uses on this rank (see `memory_use`): held between calls, and scratch
  /// of its own. Sizes follow the calls made so far.
  [[nodiscard]] memory_use memory() const;
  /// Times of the last `forward` or `backward` on this rank.
  [[nodiscard]] dist_timings const& timings() const noexcept;
  /// Bytes this rank sends per forward plus backward call (0 unless the channels are split).
  [[nodiscard]] std::size_t bytes_sent() const noexcept;
  /// Multi-line account: parameters, channel blocks and halos, exchanges, provider.
  [[nodiscard]] std::string describe() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace halox::ops
