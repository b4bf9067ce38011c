#pragma once
/// \file distribution.hpp
/// The global, MPI-free description of a block-distributed tensor: shape, element type, how each
/// dimension is split over a process grid, halo widths and periodicity. Every "who owns what"
/// question is answered arithmetically, for any rank, without communication.

#include <halox/box.hpp>
#include <halox/dtype.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace halox {

/// How one tensor dimension is partitioned and padded. The number of parts comes from the
/// process grid.
struct dim_options {
  int halo_lo = 0;            ///< ghost cells before the owned block
  int halo_hi = 0;            ///< ghost cells after the owned block
  bool periodic = false;      ///< wrap around at the global boundary
  std::vector<index_t> sizes; ///< explicit part sizes (sum = extent); empty: balanced blocks

  /// Symmetric halo of width `w`.
  static dim_options halo(int w, bool periodic = false) {
    dim_options o;
    o.halo_lo = o.halo_hi = w;
    o.periodic = periodic;
    return o;
  }
};

/// Most ranks a process grid or distribution may have (2^30): rank numbers and their products
/// stay well inside `int`.
inline constexpr int max_grid_ranks = 1 << 30;

/// Grid coordinates of a rank (one entry per tensor dimension).
using coords_t = std::vector<int>;

/// Global description of a distributed tensor over a grid of `parts` (one count per dimension;
/// ranks are numbered row-major over the grid, last dimension fastest, like MPI_Cart).
///
/// Balanced blocks give the first `extent % parts` parts one extra element; with more parts
/// than elements the trailing parts own nothing, and every query handles such empty ranks.
/// Ranks that own nothing allocate nothing (their local shape is all zeros).
class distribution {
public:
  /// Validates and builds; throws `halox::error` (invalid_argument) naming the bad value.
  ///
  /// Limits: at most 2^30 ranks in the grid (`max_grid_ranks`); the global element count, the
  /// largest rank's allocated element count (owned + halos) and their sizes in bytes must each
  /// fit in a signed 64-bit integer, as must every allocated coordinate (extent + halo). Memory
  /// held is proportional to the number of dimensions and to explicit part sizes only, never
  /// to a balanced part count.
  distribution(std::vector<index_t> shape, dtype type, std::vector<int> parts,
               std::vector<dim_options> options = {});

  /// Tensor rank (1..8).
  [[nodiscard]] int ndim() const noexcept { return static_cast<int>(shape_.size()); }
  /// Global shape.
  [[nodiscard]] std::vector<index_t> const& shape() const noexcept { return shape_; }
  /// Element type.
  [[nodiscard]] dtype type() const noexcept { return type_; }
  /// Parts (grid extent) per dimension.
  [[nodiscard]] std::vector<int> const& parts() const noexcept { return parts_; }
  /// Options per dimension (halo, periodicity, explicit sizes).
  [[nodiscard]] dim_options const& options(int d) const { return options_.at(d); }
  /// Number of ranks of the grid (product of parts).
  [[nodiscard]] int nranks() const noexcept { return nranks_; }

  /// First global index of part `p` along `d` (0 <= p <= parts()[d]; `parts()[d]` gives the
  /// extent).
  [[nodiscard]] index_t part_start(int d, int p) const;
  /// Number of elements of part `p` along `d` (may be 0).
  [[nodiscard]] index_t part_size(int d, int p) const {
    return part_start(d, p + 1) - part_start(d, p);
  }
  /// Part owning global index `i` along `d` (0 <= i < extent). For empty parts sharing a start
  /// with a non-empty one, the non-empty part is returned.
  [[nodiscard]] int part_of(int d, index_t i) const;

  /// Grid coordinates of `rank`.
  [[nodiscard]] coords_t coords_of(int rank) const;
  /// Rank at grid coordinates `c`.
  [[nodiscard]] int rank_of(coords_t const& c) const;
  /// Rank owning global index `idx` (one entry per dimension).
  [[nodiscard]] int owner(std::vector<index_t> const& idx) const;

  /// Owned block of `rank`, in global coordinates (empty for ranks that own nothing).
  [[nodiscard]] box owned_box(int rank) const;
  /// Owned block plus halos, in global coordinates (may reach below 0 or past the extent).
  /// Empty for ranks that own nothing.
  [[nodiscard]] box allocated_box(int rank) const;
  /// Allocated local shape of `rank` (owned + halos per dimension; zeros for an empty rank).
  [[nodiscard]] std::vector<index_t> local_shape(int rank) const;
  /// Row-major element strides of `rank`'s allocated local buffer.
  [[nodiscard]] std::vector<index_t> default_strides(int rank) const;
  /// True when `rank` owns no element.
  [[nodiscard]] bool empty(int rank) const { return owned_box(rank).empty(); }

  /// A 64-bit hash of the whole global description (used for the cross-rank consistency check
  /// and as a plan-cache key).
  [[nodiscard]] std::uint64_t hash() const noexcept;
  /// One-line summary, e.g. `float32[32x64x128x128] grid 1x1x2x2 halo(0,0|0,0|1,1|1,1)`.
  [[nodiscard]] std::string str() const;

private:
  std::vector<index_t> shape_;
  dtype type_;
  std::vector<int> parts_;
  std::vector<dim_options> options_;
  // Per dim: parts+1 offsets for explicit sizes; empty for balanced blocks, whose starts are
  // computed (a balanced split over many parts must not cost memory per part).
  std::vector<std::vector<index_t>> starts_;
  int nranks_ = 1;
};

/// True when the two distributions have the same shape, dtype, parts, sizes, halos and
/// periodicity.
[[nodiscard]] bool operator==(distribution const& a, distribution const& b);

/// Validates explicit strides for a local buffer of `local_shape`: each stride must be at least
/// the span of the faster-varying dimensions it steps over, so no two cells alias, and the
/// buffer's largest offset must fit in a signed 64-bit integer. Throws `halox::error` naming the
/// dimension, the stride and the minimum (or maximum) it must have.
void validate_strides(std::vector<index_t> const& local_shape, std::vector<index_t> const& strides);

/// Elements a buffer with `local_shape` and `strides` must hold (largest offset + 1). Throws
/// `halox::error` when that count does not fit in a signed 64-bit integer.
[[nodiscard]] index_t required_elements(std::vector<index_t> const& local_shape,
                                        std::vector<index_t> const& strides);

} // namespace halox
