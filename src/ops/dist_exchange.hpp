#pragma once
// A "box gather": every rank receives one box of a block-distributed tensor into a private,
// contiguous workspace. The boxes may overlap each other, and a rank may need a box although it
// owns nothing of the tensor. That is what backward-data of a windowed operator needs from dy:
// the output footprint of its input block, which reaches into other ranks' outputs and which a
// rank that computes no output at all (7x7 pooling split four ways) needs too. A halo exchange
// cannot serve it, because a halo surrounds an owned block and an empty rank allocates nothing.
//
// The schedule is built arithmetically (every rank's needed box is a product of per-dimension
// ranges that depend only on the rank's part index along each dimension) and run by the same
// plan engine and executors as halo exchanges and redistributions.

#include "ops/dist_geometry.hpp"

#include <halox/backend.hpp>
#include <halox/halo.hpp>
#include <halox/tensor_desc.hpp>

#include <memory>
#include <string>
#include <vector>

namespace halox::detail {
class plan_engine;
}

namespace halox::ops::detail {

/// Gathers, on every rank, the global box `need[d][coords[d]]` (a product over all dimensions)
/// of a tensor described by `src` into a contiguous row-major workspace of that box's shape.
class box_gather {
public:
  /// Collective over `src`'s grid. `need[d]` has one range per part of dimension d. The part of
  /// the box this rank owns itself is copied into the workspace too, unless `self_copy` lists
  /// the global boxes (all dimensions) of it that are read from the workspace: then only those
  /// are (a caller that reads the rest of its own block in place saves the copy).
  box_gather(tensor_desc const& src, std::vector<std::vector<range1>> need, backend method,
             tune_options const& tune, std::vector<box> const* self_copy = nullptr);
  ~box_gather();
  box_gather(box_gather&&) noexcept;
  box_gather& operator=(box_gather&&) noexcept;

  /// Global box this rank receives (all dimensions; empty when it needs nothing).
  [[nodiscard]] box const& my_box() const noexcept { return mine_; }
  /// Shape of the workspace: the extent of the needed range along each dimension. When one of
  /// them is empty the others keep their extents, so that a kernel given the (empty) workspace
  /// still sees the right batch and channel counts.
  [[nodiscard]] std::vector<index_t> const& shape() const noexcept { return shape_; }
  /// Global position of the workspace's first element along each dimension.
  [[nodiscard]] std::vector<index_t> const& origin() const noexcept { return origin_; }
  /// Elements of the workspace.
  [[nodiscard]] index_t elements() const noexcept { return elements_; }

  /// Begins the gather from `src` (a buffer laid out as the descriptor) into `ws`; `src` may be
  /// read but not written, and `ws` not touched, until `wait`.
  void start(void const* src, void* ws);
  /// Completes it.
  void wait();
  /// Bytes this rank sends per gather (local copies excluded).
  [[nodiscard]] std::size_t bytes_sent() const noexcept;
  /// Peers and bytes, for describe().
  [[nodiscard]] std::string summary() const;

private:
  std::unique_ptr<halox::detail::plan_engine> engine_;
  box mine_;
  std::vector<index_t> shape_, origin_;
  index_t elements_ = 0;
  void* bufs_[2] = {nullptr, nullptr}; // slots of the gather in flight
};

} // namespace halox::ops::detail
