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
  /// Owned cells of `src_buf` (laid out as src) -> owned cells of `dst_buf` (as dst).
  void forward(std::vector<T>& src_buf, std::vector<T>& dst_buf, phase_times& t);
  /// Owned cells of `dst_buf` -> owned cells of `src_buf`; with `accumulate` they are added
  /// to what `src_buf` holds instead of replacing it.
  void backward(std::vector<T>& dst_buf, std::vector<T>& src_buf, phase_times& t,
                bool accumulate = false);

private:
  halox::tensor_desc src_, dst_;
  halox::redistribute_plan plan_;
  std::vector<T> scratch_; // the moved gradient before it is added (accumulate)
};

} // namespace trainer
