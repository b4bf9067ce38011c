#pragma once
/// \file dist_conv.hpp
/// Convolution over a tensor distributed along N and the spatial dimensions.

#include <halox/ops/dist_common.hpp>
#include <halox/ops/window.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace halox::ops {

/// A convolution layer (cross-correlation, groups = 1, as `conv_forward`) on a distributed
/// NC[D]HW tensor, for `T` = float or double.
///
/// Built once from the input's descriptor (its grid and block sizes; its halos are ignored)
/// and the layer's parameters, it derives:
/// - `input_desc()`: the input with the halo widths this convolution needs (per dimension and
///   side, the largest reach of any part's windows outside its block; asymmetric when padding
///   or the output distribution make it so). Allocate x with it.
/// - `output_desc()`: the output, without halos, with explicit part sizes so that each rank
///   computes exactly its outputs from its block: output `o` belongs to the part owning input
///   `clamp(o * stride - pad_lo + floor(dilation * (kernel - 1) / 2), 0, in - 1)` (its
///   window's centre tap). Parts may be uneven or empty. N keeps the input's split.
///
/// `forward` exchanges the input halos (zero-filled beyond the global boundary) and computes
/// the owned outputs, the interior ones while the exchange runs. `backward` gathers the dy each
/// rank's input block needs (from the ranks owning it, whichever they are), computes dx on the
/// owned block and the weight and bias gradients of the owned outputs, then sums those over the
/// grid (MPI_Allreduce). Every call is collective over the input's grid. Results equal the
/// serial operators: forward and dx bitwise; dw and db up to the order of the sum over ranks.
template <class T> class dist_conv {
public:
  /// Collective over `x.grid()`. `w_shape` is [Cout, Cin, k...]; `p` as for `conv_forward`.
  /// Throws `halox::error` on a descriptor the operators cannot split (channels split,
  /// periodic, rank not 3-5, dtype not matching T) or on invalid parameters.
  dist_conv(tensor_desc const& x, std::vector<index_t> w_shape, conv_params const& p,
            dist_options const& o = {});
  /// Completes a deferred gradient all-reduce still in flight (see `finish_gradients`), then
  /// frees the layer's plans and buffers on this rank (its plans' peers are told this rank
  /// left them).
  ~dist_conv();
  /// Moves the layer (the moved-from layer must not be used).
  dist_conv(dist_conv&&) noexcept;
  /// Move-assigns, releasing this layer's plans first.
  dist_conv& operator=(dist_conv&&) noexcept;

  /// Descriptor x must be allocated with (input blocks plus halos, row-major).
  [[nodiscard]] tensor_desc const& input_desc() const noexcept;
  /// Descriptor of y (and of dy in `backward`).
  [[nodiscard]] tensor_desc const& output_desc() const noexcept;
  /// The weight shape [Cout, Cin, k...].
  [[nodiscard]] std::vector<index_t> const& weight_shape() const noexcept;
  /// Halo widths of `input_desc()` per dimension (0 on N and C).
  [[nodiscard]] std::vector<int> const& halo_lo() const noexcept;
  /// See `halo_lo()`.
  [[nodiscard]] std::vector<int> const& halo_hi() const noexcept;

  /// y = conv(x, w) + bias on the owned outputs. `x` is laid out as `input_desc()`; its halo
  /// cells are overwritten by the exchange. `y` has `output_desc()`'s blocks (its halos and
  /// strides may differ, e.g. the next layer's input). `w` [Cout, Cin, k...] and `bias` [Cout]
  /// (may be null) are replicated on every rank.
  void forward(tensor_view const& x, const_tensor_ref<T> w, T const* bias, tensor_view const& y);

  /// Gradients given dy (laid out exactly as `output_desc()`).
  ///
  /// `x` is the buffer of the last `forward`, unchanged since (its halos are read). `dx` (the
  /// input's blocks, any halos and strides) receives the owned gradient; pass a default
  /// `tensor_view{}` on every rank to skip it. `dw` [Cout, Cin, k...] and `db` [Cout] are
  /// overwritten with the gradients summed over the whole grid, identical on every rank; pass
  /// an empty `dw` (null data) and a null `db` to skip them (the same on every rank).
  void backward(tensor_view const& x, tensor_view const& dy, const_tensor_ref<T> w,
                tensor_view const& dx, tensor_ref<T> dw, T* db);

  /// Convolution followed by ReLU as one layer: y = max(conv(x, w) + bias, 0), written in one
  /// pass by providers that fuse the two (oneDNN's ReLU post-op); arguments as `forward`.
  void forward_relu(tensor_view const& x, const_tensor_ref<T> w, T const* bias,
                    tensor_view const& y);
  /// The backward of `forward_relu`: `y` is its output (the blocks of `output_desc()`) and `dy`
  /// the gradient of y, laid out as `output_desc()`. `dy` is overwritten with the gradient of
  /// the convolution's output (dy where y > 0, else 0), then the gradients follow as in
  /// `backward`.
  void backward_relu(tensor_view const& x, tensor_view const& y, tensor_view const& dy,
                     const_tensor_ref<T> w, tensor_view const& dx, tensor_ref<T> dw, T* db);

  /// Fills x's halo cells as `forward` does (the exchange, and the zero fill beyond the global
  /// boundary) without computing: for a caller that computed x's owned cells again (it dropped
  /// x after forward to save memory) before calling `backward`, which reads those halos.
  /// Collective over the input's grid.
  void exchange_halo(tensor_view const& x);
  /// Completes the weight and bias gradient all-reduce that `backward` left in flight with
  /// `dist_options::defer_gradient_reduce`, and writes the sums into the `dw` and `db` that
  /// call was given (which must still be valid); its wait is added to that call's `timings()`.
  /// Returns at once when nothing is pending. The next `forward` or `backward`, and the
  /// destructor, complete a pending reduction first, so one is never lost; until then dw and db
  /// must not be read.
  void finish_gradients();
  /// True while a deferred gradient all-reduce has not been completed.
  [[nodiscard]] bool gradients_pending() const noexcept;

  /// What this operator uses on this rank (see `memory_use`): held between calls, and scratch
  /// of its own. Sizes follow the calls made so far.
  [[nodiscard]] memory_use memory() const;
  /// Sets `dist_options::keep_reorders` from now on; false frees the copy of x kept now (the
  /// next backward then reorders x again). Not collective.
  void keep_reorders(bool keep);
  /// Times of the last `forward` or `backward` on this rank.
  [[nodiscard]] dist_timings const& timings() const noexcept;
  /// Bytes this rank sends per forward plus backward call (input halos and dy gather).
  [[nodiscard]] std::size_t bytes_sent() const noexcept;
  /// Multi-line account: descriptors, this rank's boxes, exchanges.
  [[nodiscard]] std::string describe() const;

private:
  void run_forward(tensor_view const& x, const_tensor_ref<T> w, T const* bias, tensor_view const& y,
                   bool relu);
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace halox::ops
