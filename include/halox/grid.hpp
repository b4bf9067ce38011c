#pragma once
/// \file grid.hpp
/// Cartesian process grids over an MPI communicator.

#include <halox/box.hpp>
#include <halox/detail/mpi_handle.hpp>
#include <halox/topology.hpp>

#include <memory>
#include <vector>

namespace halox {

/// An owned MPI communicator (freed on destruction; move-only).
class communicator {
public:
  /// Holds no communicator (`get()` is MPI_COMM_NULL).
  communicator() = default;
  /// Takes ownership of `c` (which must not be MPI_COMM_WORLD/SELF).
  explicit communicator(MPI_Comm c) : h_(c) {}
  /// The raw handle (still owned by this object).
  [[nodiscard]] MPI_Comm get() const noexcept { return h_.get(); }
  /// Rank of the calling process in it.
  [[nodiscard]] int rank() const;
  /// Number of processes in it.
  [[nodiscard]] int size() const;

private:
  detail::unique_comm h_;
};

/// Chooses the grid for `nprocs` processes over a tensor of `shape`: entries of `dims` that are
/// positive are kept, zeros are chosen. The grid chosen, among those that split no dimension
/// into more parts than it has elements (when any does not), minimises the halo cells received
/// by the busiest rank: for each rank, the cells of its halo (`halo_lo`/`halo_hi` per dimension)
/// that another process owns, counted exactly for balanced blocks (the first `extent % parts`
/// parts one element larger). A non-periodic dimension's first and last part have no halo on
/// their outer side; a periodic dimension's halo wraps around, and cells that wrap back onto the
/// rank itself (a periodic dimension not split) cost nothing. Ties go to the smallest largest
/// owned block, then the fewest halo cells over all ranks, then the grid that splits outer
/// dimensions most, so an NCHW tensor with halos only on H and W goes sample-parallel when it
/// can. Unlike MPI_Dims_create, the shape and the halos are taken into account. Pure; throws
/// `halox::error` when the fixed entries do not divide `nprocs` or an input is invalid.
[[nodiscard]] std::vector<int> choose_grid(int nprocs, std::vector<int> dims,
                                           std::vector<index_t> const& shape,
                                           std::vector<int> const& halo_lo,
                                           std::vector<int> const& halo_hi);

/// `choose_grid` for dimensions that may be periodic: `periodic` has one flag per dimension
/// (or is empty: none periodic), as the tensor's `dim_options::periodic` will have.
[[nodiscard]] std::vector<int> choose_grid(int nprocs, std::vector<int> dims,
                                           std::vector<index_t> const& shape,
                                           std::vector<int> const& halo_lo,
                                           std::vector<int> const& halo_hi,
                                           std::vector<bool> const& periodic);

/// A Cartesian grid of processes: one process count per tensor dimension (1 for dimensions
/// that are not split). Holds its own duplicate of the caller's communicator, shared by copies of
/// the grid and freed with the last of them. Ranks are numbered row-major over the grid.
class process_grid {
public:
  /// Collective over `comm`. `dims` must be positive with product equal to the size of `comm`;
  /// every rank must pass the same `dims` (checked: a mismatch throws on every rank).
  process_grid(MPI_Comm comm, std::vector<int> dims);

  /// Collective. Like the constructor above, with `opts`: when `opts.reorder` is
  /// `topology_reorder::nodes`, the processes are placed on the grid by `map_grid` so that each
  /// node (then socket) holds a compact sub-block and fewer halo bytes cross nodes: `comm()` then
  /// numbers them in grid order (rank = row-major grid position), which may differ from the
  /// caller's. Nodes are the groups of MPI_COMM_TYPE_SHARED (or `opts.fake_nodes` /
  /// HALOX_FAKE_NODES runs of consecutive ranks), sockets those of the cores each process is
  /// bound to (hwloc; unknown: one per node). Every rank must pass the same options (checked);
  /// a bad option or HALOX_FAKE_NODES value throws `halox::error` on every rank.
  process_grid(MPI_Comm comm, std::vector<int> dims, grid_options const& opts);

  /// Collective. Like the constructor, but zeros in `dims` are chosen by `choose_grid` for a
  /// tensor of `shape` with the given per-dimension halo widths (none periodic).
  [[nodiscard]] static process_grid create(MPI_Comm comm, std::vector<int> dims,
                                           std::vector<index_t> const& shape,
                                           std::vector<int> const& halo_lo = {},
                                           std::vector<int> const& halo_hi = {});
  /// Collective. Like the above, for a tensor whose dimensions may be periodic (one flag per
  /// dimension, or empty: none): periodic halos wrap, so they cost messages at the global
  /// boundary too, except along a dimension left whole.
  [[nodiscard]] static process_grid create(MPI_Comm comm, std::vector<int> dims,
                                           std::vector<index_t> const& shape,
                                           std::vector<int> const& halo_lo,
                                           std::vector<int> const& halo_hi,
                                           std::vector<bool> const& periodic);
  /// Collective. Like the above, with `opts` (see the constructor taking `grid_options`): the
  /// halo bytes per face come from `shape`, the halo widths and `opts.element_size` unless
  /// `opts.face_bytes` gives them; `periodic` replaces `opts.periodic`.
  [[nodiscard]] static process_grid
  create(MPI_Comm comm, std::vector<int> dims, std::vector<index_t> const& shape,
         std::vector<int> const& halo_lo, std::vector<int> const& halo_hi,
         std::vector<bool> const& periodic, grid_options const& opts);

  /// What the grid did about the machine: `requested` is false unless it was built with
  /// `topology_reorder::nodes`; then `mapping` holds the placement (`process_of[g]`: the rank,
  /// in the caller's communicator, of the process at grid position g) and its inter-node and
  /// inter-socket bytes before (caller's order) and after. The same on every rank.
  [[nodiscard]] topology_report const& topology() const noexcept;

  /// The grid's own communicator (a duplicate of the caller's).
  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_->get(); }
  /// Calling process's rank in `comm()`.
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// Number of processes.
  [[nodiscard]] int size() const noexcept { return size_; }
  /// Number of grid dimensions.
  [[nodiscard]] int ndim() const noexcept { return static_cast<int>(dims_.size()); }
  /// Processes per dimension.
  [[nodiscard]] std::vector<int> const& dims() const noexcept { return dims_; }
  /// Grid coordinates of `rank`.
  [[nodiscard]] std::vector<int> coords(int rank) const;
  /// Grid coordinates of the calling process.
  [[nodiscard]] std::vector<int> coords() const { return coords(rank_); }
  /// Rank at grid coordinates `c` (each 0 <= c[d] < dims[d]).
  [[nodiscard]] int rank_of(std::vector<int> const& c) const;

  /// Collective. Communicator of the processes that share the caller's coordinates along every
  /// dimension where `keep[d]` is false, i.e. spanning the dimensions where `keep[d]` is true.
  /// Its ranks are ordered row-major over the kept dimensions. Example: for an NCHW grid,
  /// `sub_comm({true,false,true,true})` spans samples and space (batch-norm statistics).
  [[nodiscard]] communicator sub_comm(std::vector<bool> const& keep) const;

private:
  void reorder_by_topology(grid_options const& opts);

  std::shared_ptr<communicator> comm_;
  std::shared_ptr<topology_report const> topology_;
  std::vector<int> dims_;
  int rank_ = 0;
  int size_ = 1;
};

} // namespace halox
