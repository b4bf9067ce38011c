#pragma once
/// \file deep_halo.hpp
/// Deep halos (overlapped tiling, communication-avoiding stencils): exchange a halo `depth`
/// times as wide as a stencil needs, once every `depth` steps, and compute each step on a region
/// that shrinks by the stencil radius per step, so that after `depth` steps the owned block is
/// exact. Fewer, larger messages in exchange for redundant computation near block edges; it pays
/// where message latency dominates. See docs/tiling.md.

#include <halox/box.hpp>
#include <halox/halo.hpp>
#include <halox/tensor_desc.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace halox {

/// The tensor description, the halo plan and the per-step compute regions of a stencil run
/// `depth` steps per halo exchange.
///
/// The stencil reads `radius[d]` cells on each side along dimension d (0 where it does not reach
/// across d). The tensor gets halos of `depth * radius[d]` cells per side; the plan fills them,
/// and between two exchanges step s = 1..depth computes `valid_region(s)`: the owned block grown
/// by `(depth - s) * radius[d]` on both sides of every dimension, except that on a non-periodic
/// dimension it never passes the global domain `[0, extent)`. Cells beyond a non-periodic
/// boundary are boundary values: read by the stencil, never computed, never exchanged
/// (`boundary_fill::constant` sets them only in the buffer being exchanged, so give them their
/// value in both buffers). A periodic side grows like an interior one,
/// including along a dimension that is not split (its halo is then a wrapped copy of the rank's
/// own cells).
///
/// Everything a halo plan supports carries over: uneven and explicit block sizes, ranks that own
/// nothing (their regions are empty), and halos wider than a neighbour's block (the exchange then
/// gathers cells from several ranks along a dimension).
///
/// Typical loop (two buffers of `desc().local_elements()` each, `cur` and `next` pointing to
/// them; both must hold the boundary values beyond non-periodic edges):
/// \code
///   halox::deep_halo_schedule s(grid, {nx, ny, nz}, halox::dtype::float64, {1, 1, 1}, 4);
///   for (int done = 0; done < steps; done += s.exchange_every()) {
///     s.plan().execute(halox::tensor_view(s.desc(), *cur));
///     int const m = std::min(s.exchange_every(), steps - done);
///     for (int step = s.depth() - m + 1; step <= s.depth(); ++step) {
///       stencil(*cur, *next, s.valid_region(step)); // local coordinates of the buffers
///       std::swap(cur, next);
///     }
///   }
/// \endcode
/// A cycle of fewer than `depth` steps (the tail above) runs the last steps of the schedule.
class deep_halo_schedule {
public:
  /// Collective over `grid`. `radius` has one entry per dimension; `depth` (at least 1) is the
  /// number of steps per exchange. `dims` (one per dimension, or empty) gives periodicity and
  /// explicit part sizes; its halo widths must be 0 (they are derived). `plan_options` configure
  /// the halo plan (backend, boundary fill, ...). Invalid input (depth below 1, a negative radius,
  /// a radius vector of the wrong length, a halo width `depth * radius` that overflows `int` or
  /// is wider than a non-periodic extent) throws `halox::error` (invalid_argument) on every rank,
  /// naming the value and the fix; ranks that pass different depths or radii all throw
  /// (inconsistent_ranks).
  deep_halo_schedule(process_grid grid, std::vector<index_t> shape, dtype type,
                     std::vector<int> radius, int depth, std::vector<dim_options> dims = {},
                     halo_options const& plan_options = {});
  /// As above, with the halo plan built on `ctx` (see `halo_plan`).
  deep_halo_schedule(context const& ctx, process_grid grid, std::vector<index_t> shape, dtype type,
                     std::vector<int> radius, int depth, std::vector<dim_options> dims = {},
                     halo_options const& plan_options = {});

  /// Steps computed per halo exchange (the depth).
  [[nodiscard]] int depth() const noexcept { return depth_; }
  /// Exchange the halo once every this many steps (= `depth()`).
  [[nodiscard]] int exchange_every() const noexcept { return depth_; }
  /// The stencil radius per dimension.
  [[nodiscard]] std::vector<int> const& radius() const noexcept { return radius_; }
  /// The tensor with halos of `depth * radius` per side: allocate buffers from it.
  [[nodiscard]] tensor_desc const& desc() const noexcept { return desc_; }
  /// The halo plan of `desc()`: execute it on the current buffer once every `depth` steps.
  [[nodiscard]] halo_plan& plan() noexcept { return plan_; }
  /// The halo plan (const).
  [[nodiscard]] halo_plan const& plan() const noexcept { return plan_; }

  /// The box step `step` (1..depth) must compute, in the local coordinates of the halo'd
  /// buffer (the first allocated cell is the origin; the owned block starts at
  /// `desc().owned_offset()`). Step 0 gives the region valid right after the exchange; step
  /// `depth` is the owned block. Empty (lo == hi) on a rank that owns nothing. Throws
  /// `halox::error` for a step outside 0..depth.
  [[nodiscard]] box valid_region(int step) const;
  /// The same box in global coordinates. On a periodic dimension it may reach below 0 or past
  /// the extent: those cells are the wrapped copies held in the halo.
  [[nodiscard]] box valid_region_global(int step) const;

  /// Messages this rank sends per exchange (one per peer; local periodic copies excluded).
  [[nodiscard]] int messages() const noexcept { return plan_.num_peers(); }
  /// Bytes this rank sends per exchange (local copies excluded).
  [[nodiscard]] std::size_t bytes() const noexcept { return plan_.bytes_sent(); }
  /// Cells this rank computes per cycle of `depth` steps (sum of the step regions).
  [[nodiscard]] index_t cells_computed() const noexcept { return cells_; }
  /// Share of computed cells that are redundant (computed by another rank too):
  /// `1 - depth * owned / cells_computed()`; 0 at depth 1 and on a rank that owns nothing.
  [[nodiscard]] double redundant_fraction() const noexcept;
  /// Human-readable account: depth, radius, regions of each step, and the plan's description.
  [[nodiscard]] std::string describe() const;

private:
  deep_halo_schedule(context const* ctx, process_grid&& grid, std::vector<index_t>&& shape,
                     dtype type, std::vector<int>&& radius, int depth,
                     std::vector<dim_options>&& dims, halo_options const& plan_options);

  std::vector<int> radius_;
  int depth_ = 1;
  tensor_desc desc_;
  halo_plan plan_;
  index_t cells_ = 0;
};

} // namespace halox
