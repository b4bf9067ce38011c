#pragma once
// Moving activations between two layouts of the same tensor whose blocks differ (another
// strategy): a halox redistribution, planned once. Backward runs the same move in reverse.
// Layouts with the same blocks need no move: the network chains their buffers instead.
#include "tensor_util.hpp"

#include <halox/redistribute.hpp>

#include <memory>
#include <vector>

namespace trainer {

/// A move from layout `src` to layout `dst` (same global shape and dtype, other blocks).
template <class T> class transfer {
public:
  /// Collective over the grids' communicator (plans the redistribution, moved by `method`).
  transfer(halox::tensor_desc const& src, halox::tensor_desc const& dst, halox::backend method);
  /// Owned cells of `src_buf` (laid out as src) -> owned cells of `dst_buf` (as dst). Each
  /// buffer holds its layout's `local_elements()`.
  void forward(T const* src_buf, T* dst_buf, phase_times& t);
  /// Owned cells of `dst_buf` -> owned cells of `src_buf`; with `accumulate` they are added
  /// to what `src_buf` holds instead of replacing it.
  void backward(T const* dst_buf, T* src_buf, phase_times& t, bool accumulate = false);
  /// Bytes the move holds between calls (the redistribution's workspace, the scratch of an
  /// accumulating backward).
  [[nodiscard]] std::size_t held_bytes() const noexcept;

private:
  halox::tensor_desc src_, dst_;
  halox::redistribute_plan plan_;
  std::vector<T> scratch_; // the moved gradient before it is added (accumulate)
};

} // namespace trainer
