#pragma once
/// \file tensor_desc.hpp
/// The distributed tensor descriptor: a global distribution bound to a process grid, plus the
/// calling rank's local memory layout.

#include <halox/distribution.hpp>
#include <halox/grid.hpp>

#include <vector>

namespace halox {

/// A distributed tensor as seen by the calling rank.
///
/// Construction is collective over the grid: one all-reduce checks that every rank passed the
/// same global description (shape, dtype, grid, halos, periodicity, sizes), and that every
/// rank's own input was valid; otherwise every rank throws, instead of deadlocking later.
/// Local strides are per rank and not part of that check (a framework may pad its buffers).
class tensor_desc {
public:
  /// Collective. `options` has one entry per dimension (or is empty: no halo, not periodic,
  /// balanced). `strides` are the element strides of this rank's local buffer, which holds the
  /// allocated local shape (owned + halos); empty means row-major contiguous.
  tensor_desc(process_grid grid, std::vector<index_t> shape, dtype type,
              std::vector<dim_options> options = {}, std::vector<index_t> strides = {});

  /// The global description.
  [[nodiscard]] distribution const& dist() const noexcept { return dist_; }
  /// The process grid.
  [[nodiscard]] process_grid const& grid() const noexcept { return grid_; }
  /// Tensor rank.
  [[nodiscard]] int ndim() const noexcept { return dist_.ndim(); }
  /// Element type.
  [[nodiscard]] dtype type() const noexcept { return dist_.type(); }
  /// Global shape.
  [[nodiscard]] std::vector<index_t> const& shape() const noexcept { return dist_.shape(); }

  /// Owned block of the calling rank, global coordinates (kept from construction: operators
  /// read it on every execution).
  [[nodiscard]] box owned_box() const noexcept { return owned_; }
  /// Owned block of any rank, global coordinates.
  [[nodiscard]] box owned_box(int rank) const { return dist_.owned_box(rank); }
  /// Rank owning a global index.
  [[nodiscard]] int owner(std::vector<index_t> const& idx) const { return dist_.owner(idx); }
  /// Allocated local shape (owned + halos).
  [[nodiscard]] std::vector<index_t> const& local_shape() const noexcept { return local_shape_; }
  /// Element strides of the local buffer.
  [[nodiscard]] std::vector<index_t> const& strides() const noexcept { return strides_; }
  /// Per-dimension offset of the first owned cell inside the local buffer (= halo_lo, or 0 on
  /// an empty rank).
  [[nodiscard]] std::vector<index_t> owned_offset() const;
  /// `owned_offset()[dim]`, without building the vector.
  [[nodiscard]] index_t owned_offset_at(int dim) const {
    return owned_.empty() ? 0 : static_cast<index_t>(dist_.options(dim).halo_lo);
  }
  /// Element offset of the first owned cell from the buffer base.
  [[nodiscard]] index_t owned_offset_elements() const noexcept { return owned_offset_elements_; }
  /// Elements the local buffer must hold.
  [[nodiscard]] index_t local_elements() const noexcept { return local_elements_; }
  /// Bytes the local buffer must hold.
  [[nodiscard]] std::size_t local_bytes() const { return local_elements_ * size_of(type()); }
  /// Element offset of global index `idx` inside the local buffer; the index may lie in the
  /// halo (then it is taken relative to the allocated box, without periodic wrapping).
  [[nodiscard]] index_t local_offset(std::vector<index_t> const& global_idx) const;
  /// True when the calling rank owns nothing.
  [[nodiscard]] bool empty() const noexcept { return owned_.empty(); }

private:
  process_grid grid_;
  distribution dist_;
  std::vector<index_t> local_shape_;
  std::vector<index_t> strides_;
  index_t local_elements_ = 0;
  box owned_{};
  index_t owned_offset_elements_ = 0;
};

} // namespace halox
