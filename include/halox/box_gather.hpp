#pragma once
/// \file box_gather.hpp
/// Box-gather plans: every rank receives one global box of a block-distributed tensor into a
/// private, contiguous workspace. Built once, executed many times on caller memory.

#include <halox/backend.hpp>
#include <halox/halo.hpp>
#include <halox/tensor_view.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace halox {

/// Options of a box-gather plan. `method`, `memory` and `tune` must be the same on every rank;
/// `own_copy_boxes` may differ.
struct box_gather_options {
  backend method = backend::automatic; ///< how to move data ($HALOX_BACKEND overrides auto)
  /// Where the source tensor and the workspace live; device memory needs a device backend
  /// (`cuda_aware_mpi`, `staged_mpi`, `nccl`, `device_mpi_datatype`) or `automatic`.
  memory_space memory = memory_space::host;
  tune_options tune; ///< automatic selection settings
  /// The cells a rank both owns and needs are copied into its workspace like the others. When
  /// set, only their parts inside these global boxes (all dimensions) are: a caller that reads
  /// the rest of its own block in place saves the copy. Cells outside them are left untouched.
  std::optional<std::vector<box>> own_copy_boxes;
};

/// A gather in which every rank receives one box of a tensor, the product of per-dimension
/// ranges chosen by its grid coordinates: rank r with grid coordinates c receives the global box
/// `need[0][c[0]] x need[1][c[1]] x ...`. The boxes may overlap, reach into any rank's block
/// and be needed by a rank that owns nothing of the tensor, which a halo exchange (whose cells
/// surround an owned block) cannot express. A distributed windowed operator's backward pass,
/// which needs the gradient under the output footprint of its input block, is one use.
///
/// The workspace is row-major, shaped `shape()`, its first element at global position
/// `origin()`. Halo cells of the source are never read.
///
/// Construction is collective over the descriptor's grid communicator, and checks that every
/// rank passed the same tensor, need ranges, backend and tuning. The plan holds its own
/// duplicate of the communicator. Execution is collective too: every rank of the grid must call
/// `start`/`wait` (or `execute`) in the same order, including ranks that need nothing.
class box_gather_plan {
public:
  /// Plans the gather of `need` from tensors described by `src`. `need[d]` holds one range per
  /// part of the grid along dimension d, each empty or inside `[0, shape[d])`. A rank with an
  /// empty range in any dimension receives nothing.
  box_gather_plan(tensor_desc const& src, std::vector<std::vector<index_range>> const& need,
                  box_gather_options const& options = {});
  /// Ends the plan on this rank (not collective): an execution in flight is completed or
  /// cancelled first, and the plan's peers are told this rank left it, so one that executes it
  /// again raises errc::peer_failed instead of waiting.
  ~box_gather_plan();
  /// Plans move; the moved-from plan may only be destroyed or assigned to.
  box_gather_plan(box_gather_plan&&) noexcept;
  /// Move assignment.
  box_gather_plan& operator=(box_gather_plan&&) noexcept;

  /// Gathers (start + wait) from `src` into `workspace`.
  void execute(tensor_view const& src, void* workspace, stream_handle stream = nullptr);
  /// Begins the gather from `src` (a buffer of the planned tensor) into `workspace` (at least
  /// `workspace_bytes()`; may be null when that is 0). `src` may be read but not written, and
  /// `workspace` not touched, until `wait`. For device memory the packing is ordered after the
  /// work already queued on `stream` (a `cudaStream_t`; null: the default stream).
  void start(tensor_view const& src, void* workspace, stream_handle stream = nullptr);
  /// Completes the gather begun by `start`; for device memory the unpacking is queued on
  /// `stream`, so work queued there afterwards sees the gathered workspace.
  void wait(stream_handle stream = nullptr);

  /// Global box this rank receives (all dimensions; empty when it needs nothing).
  [[nodiscard]] box const& my_box() const noexcept;
  /// Shape of the workspace: the extent of this rank's range along each dimension. When one of
  /// them is empty the others keep their extents (so a kernel handed the empty workspace still
  /// sees the right batch and channel counts) and `elements()` is 0.
  [[nodiscard]] std::vector<index_t> const& shape() const noexcept;
  /// Global position of the workspace's first element along each dimension.
  [[nodiscard]] std::vector<index_t> const& origin() const noexcept;
  /// Elements of the workspace.
  [[nodiscard]] index_t elements() const noexcept;
  /// Bytes of the workspace.
  [[nodiscard]] std::size_t workspace_bytes() const noexcept;
  /// Bytes this rank sends per gather (local copies excluded).
  [[nodiscard]] std::size_t bytes_sent() const noexcept;
  /// Bytes this rank receives per gather (local copies excluded).
  [[nodiscard]] std::size_t bytes_received() const noexcept;
  /// The backend in use (the measured winner when `automatic` was requested).
  [[nodiscard]] backend selected_backend() const noexcept;
  /// Human-readable account: the tensor, this rank's box, peers, bytes and the chosen backend.
  [[nodiscard]] std::string describe() const;

  /// Implementation (opaque).
  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

} // namespace halox
