#pragma once
/// \file dist_pool.hpp
/// Max and average pooling over a tensor distributed along N and the spatial dimensions.

#include <halox/ops/dist_common.hpp>
#include <halox/ops/window.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace halox::ops {

/// A pooling layer (as `pool_forward`) on a distributed NC[D]HW tensor, for `T` = float or
/// double.
///
/// Halo widths and output distribution are derived as for `dist_conv` (output `o` belongs to
/// the part owning its window's centre tap). Windows may reach past neighbouring ranks (7x7
/// global pooling split four ways): the halo exchange then takes data from non-adjacent ranks.
/// For max pooling the input halo is wide enough for backward too, which re-evaluates the
/// windows of every output whose window touches the rank's block; the halo cells beyond the
/// global boundary are never read (the kernels treat them as padding that never wins), so they
/// are not filled. With the oneDNN provider (float, host memory) a rank whose backward reads
/// outputs another rank owns computes those outputs too in forward (into a scratch block; only
/// its own are written to y), so that the winners kept for backward are the ones it reads.
/// Every call is collective over the input's grid. Results equal the serial operators bitwise
/// (the reference provider; others within their own rounding).
template <class T> class dist_pool {
public:
  /// Collective over `x.grid()`; `p` as for `pool_forward`. Throws `halox::error` on a
  /// descriptor the operators cannot split or on invalid parameters.
  dist_pool(tensor_desc const& x, pool_params const& p, dist_options const& o = {});
  /// Frees the operator's plans and buffers on this rank (not collective; its plans' peers
  /// are told this rank left them).
  ~dist_pool();
  /// Moves the layer (the moved-from layer must not be used).
  dist_pool(dist_pool&&) noexcept;
  /// Move-assigns, releasing this layer's plans first.
  dist_pool& operator=(dist_pool&&) noexcept;

  /// Descriptor x must be allocated with (input blocks plus halos, row-major).
  [[nodiscard]] tensor_desc const& input_desc() const noexcept;
  /// Descriptor of y (and of dy in `backward`).
  [[nodiscard]] tensor_desc const& output_desc() const noexcept;
  /// Halo widths of `input_desc()` per dimension (0 on N and C).
  [[nodiscard]] std::vector<int> const& halo_lo() const noexcept;
  /// See `halo_lo()`.
  [[nodiscard]] std::vector<int> const& halo_hi() const noexcept;

  /// y = pool(x) on the owned outputs. `x` is laid out as `input_desc()` (its halos are
  /// overwritten); `y` has `output_desc()`'s blocks (any halos and strides).
  void forward(tensor_view const& x, tensor_view const& y);
  /// dx on the owned input block, given dy laid out exactly as `output_desc()`. Max pooling
  /// reads `x`, the buffer of the last `forward`, unchanged since; average pooling ignores it
  /// (pass `tensor_view{}`). `dx` has the input's blocks (any halos and strides).
  void backward(tensor_view const& x, tensor_view const& dy, tensor_view const& dx);

  /// What this operator uses on this rank (see `memory_use`): held between calls, and scratch
  /// of its own. Sizes follow the calls made so far.
  [[nodiscard]] memory_use memory() const;
  /// Fills x's halo cells as `forward` does (the exchange) without computing: for a caller that
  /// computed x's owned cells again (it dropped x after forward to save memory) before calling
  /// `backward`, which reads those halos. Collective over the input's grid.
  void exchange_halo(tensor_view const& x);
  /// Times of the last `forward` or `backward` on this rank.
  [[nodiscard]] dist_timings const& timings() const noexcept;
  /// Bytes this rank sends per forward plus backward call (input halos and dy gather).
  [[nodiscard]] std::size_t bytes_sent() const noexcept;
  /// Multi-line account: descriptors, this rank's boxes, exchanges.
  [[nodiscard]] std::string describe() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace halox::ops
