#pragma once
/// \file redistribute.hpp
/// Redistribution plans: move a distributed tensor from one distribution to another (another
/// grid, other block sizes, other halo widths or strides, even another communicator), built
/// once and executed many times on caller memory. Only owned cells move; halo cells of the
/// destination are left alone unless `redistribute_options::halo_after` asks for an exchange.
/// Gather and scatter are redistributions to and from a distribution held by one rank.

#include <halox/backend.hpp>
#include <halox/halo.hpp>
#include <halox/tensor_view.hpp>

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace halox {

/// Options of a redistribution plan. Every rank of the plan's communicator must pass the same
/// options.
struct redistribute_options {
  backend method = backend::automatic;      ///< how to move data ($HALOX_BACKEND overrides auto)
  memory_space memory = memory_space::host; ///< where the buffers live
  /// Run the destination's halo exchange right after every forward execution, so the
  /// destination is ready for a stencil. Skipped on ranks outside the destination group.
  bool halo_after = false;
  halo_options halo; ///< options of that halo exchange (used when `halo_after`)
  tune_options tune; ///< automatic backend selection settings
  /// When true the plan allocates no workspace: the caller passes one with `set_workspace`
  /// (at least `workspace_bytes()`, which includes the `halo_after` exchange's) before
  /// executing. When false the plan draws it from its context's allocator.
  bool external_workspace = false;
  /// Bound on this plan's waits in seconds (unset: the context's; 0: unbounded; see
  /// context_options).
  std::optional<double> timeout_seconds;
  /// Agree with every rank before each execution (false: the context's; see context_options).
  bool check_execute = false;
};

/// A redistribution of one global tensor from a source distribution to a destination
/// distribution (same global shape and dtype).
///
/// Construction is collective over the plan's communicator (the source grid's communicator, or
/// `parent`); the plan's messages travel on that communicator's context (the default one, or
/// the one passed) under a tag of its own. Execution is collective over it too:
/// every rank must call `execute` / `start` / `wait` / `execute_inverse` in the same order,
/// including ranks that belong to neither grid (they pass empty views and move nothing).
/// Each process exchanges messages only with the processes whose blocks overlap its own, plus
/// one local copy for the part it keeps. The source and destination buffers must not overlap,
/// except that a plan which sends no message anywhere may run in place.
class redistribute_plan {
public:
  /// Plans `src` -> `dst` for descriptors whose grids hold the same processes (congruent or
  /// similar communicators). Collective over `src.grid().comm()`.
  redistribute_plan(tensor_desc const& src, tensor_desc const& dst,
                    redistribute_options const& options = {});
  /// Plans `src` -> `dst` across communicators, possibly of different sizes. Collective over
  /// `parent`, which must contain every process of both grids. `src` is nullptr on ranks
  /// outside the source grid, `dst` nullptr on ranks outside the destination grid (a rank may
  /// be in one, both or neither). Ranks outside a grid learn its distribution at plan time.
  redistribute_plan(MPI_Comm parent, tensor_desc const* src, tensor_desc const* dst,
                    redistribute_options const& options = {});
  /// Like `redistribute_plan(src, dst, options)`, on `ctx`, which must hold the source grid's
  /// processes in its rank order.
  redistribute_plan(context const& ctx, tensor_desc const& src, tensor_desc const& dst,
                    redistribute_options const& options = {});
  /// Like `redistribute_plan(parent, src, dst, options)`, with `ctx` built on the parent.
  redistribute_plan(context const& ctx, tensor_desc const* src, tensor_desc const* dst,
                    redistribute_options const& options = {});
  /// Ends the plan on this rank (not collective): an execution in flight is completed or
  /// cancelled first, and the plan's peers are told this rank left it, so one that executes it
  /// again raises errc::peer_failed instead of waiting.
  ~redistribute_plan();
  /// Moves the plan (the moved-from plan must not be used).
  redistribute_plan(redistribute_plan&&) noexcept;
  /// Move-assigns, releasing this plan's resources first.
  redistribute_plan& operator=(redistribute_plan&&) noexcept;

  /// Forward redistribution (start + wait): owned cells of `src` are copied to the owned cells
  /// of `dst` holding the same global indices. A view for a side this rank is not part of is
  /// ignored (pass `tensor_view{}`).
  void execute(tensor_view const& src, tensor_view const& dst, stream_handle stream = nullptr);
  /// Begins a forward redistribution; `src` may be read but not written, and `dst` not touched,
  /// until `wait`.
  void start(tensor_view const& src, tensor_view const& dst, stream_handle stream = nullptr);
  /// Completes the redistribution begun by `start` or `start_inverse` (then, for a forward one
  /// with `halo_after`, exchanges the destination's halos).
  void wait(stream_handle stream = nullptr);

  /// Inverse redistribution (start_inverse + wait): owned cells of `dst` are copied back to the
  /// owned cells of `src`. No halo exchange follows, whatever `halo_after` says.
  void execute_inverse(tensor_view const& dst, tensor_view const& src,
                       stream_handle stream = nullptr);
  /// Begins an inverse redistribution (reading `dst`, writing `src`).
  void start_inverse(tensor_view const& dst, tensor_view const& src,
                     stream_handle stream = nullptr);

  /// This rank will not run the plan's next forward (or `inverse`) redistribution, because of
  /// `reason`: as
  /// halo_plan::skip_execution (true when every peer skipped it too, false when one went ahead
  /// and has been told).
  [[nodiscard]] bool skip_execution(std::string const& reason, bool inverse = false);

  /// Scratch memory the plan uses while executing (its own and the `halo_after` exchange's).
  [[nodiscard]] workspace_size workspace_bytes() const noexcept;
  /// Hands the plan a caller-owned workspace (see `halo_plan::set_workspace`).
  void set_workspace(workspace const& w);
  /// The context the plan was built on.
  [[nodiscard]] context const& get_context() const noexcept;

  /// The backend in use (the measured winner when `automatic` was requested).
  [[nodiscard]] backend selected_backend() const noexcept;
  /// Bytes this rank sends / receives per forward redistribution (the local copy excluded).
  [[nodiscard]] std::size_t bytes_sent() const noexcept;
  /// Bytes this rank receives per forward redistribution (the local copy excluded).
  [[nodiscard]] std::size_t bytes_received() const noexcept;
  /// Number of distinct processes this rank sends to or receives from.
  [[nodiscard]] int num_peers() const noexcept;
  /// True when this rank belongs to the source grid.
  [[nodiscard]] bool is_source() const noexcept;
  /// True when this rank belongs to the destination grid.
  [[nodiscard]] bool is_destination() const noexcept;
  /// Human-readable account: both distributions, this rank's membership, peers, bytes, the
  /// chosen backend and the per-peer boxes.
  [[nodiscard]] std::string describe() const;

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

/// Collective over `like`'s grid. A descriptor of the same global tensor (shape, dtype) over
/// the same processes in which rank `root` holds everything, row-major and without halos, and
/// every other rank holds nothing: the target of `gather` and the source of `scatter`. Build it
/// once and plan with it to gather or scatter repeatedly without re-planning.
[[nodiscard]] tensor_desc whole_on_rank(tensor_desc const& like, int root);

/// Collective over `src`'s grid. Gathers the whole global tensor, row-major, on `root` (a rank
/// of `src.grid()`), into `out` of `out_bytes` bytes (at least the global size on `root`;
/// ignored elsewhere). Plans a redistribution per call.
void gather(tensor_desc const& src, tensor_view const& src_buf, int root, void* out,
            std::size_t out_bytes, redistribute_options const& options = {});
/// Like the above, returning the global tensor on `root` (an empty vector elsewhere).
[[nodiscard]] std::vector<std::byte> gather(tensor_desc const& src, tensor_view const& src_buf,
                                            int root, redistribute_options const& options = {});
/// Collective over `dst`'s grid. Scatters the global tensor `global` (row-major, `bytes` bytes,
/// read on `root` only) into each rank's owned block of `dst_buf`; with `options.halo_after`
/// the halos are exchanged too. Plans a redistribution per call.
void scatter(int root, void const* global, std::size_t bytes, tensor_desc const& dst,
             tensor_view const& dst_buf, redistribute_options const& options = {});

} // namespace halox
