#pragma once
// MPI derived datatypes that describe schedule regions and whole messages, so that MPI itself
// gathers and scatters the strided cells (mpi_datatype and alltoallw backends).
//
// A region type walks its box in row-major order (the canonical message order of
// detail/box.hpp) and starts at displacement 0; the region's offset inside its buffer is added
// when regions are combined into a message type. A message type is an MPI struct of its region
// types at absolute addresses (used with MPI_BOTTOM), because the regions of one message may lie
// in different buffers (slots): that is the only way one datatype can reach all of them.

#include "plan/schedule.hpp"

#include <halox/detail/mpi_handle.hpp>

#include <mpi.h>

#include <cstddef>
#include <vector>

namespace halox::detail {

/// `n` as an MPI `int` count; throws `halox::error` (unsupported) naming `what` when it does not
/// fit, since the non-`_c` MPI calls cannot express it. Also called for the check alone.
int mpi_int_count(std::size_t n, char const* what);

/// Committed datatype of the cells of `sr` (element size `elem_size` bytes) relative to the
/// region's first cell: a contiguous run of bytes nested in one `MPI_Type_create_hvector` per
/// outer loop, so arbitrary (padded, permuted) strides are described exactly.
[[nodiscard]] unique_datatype make_region_type(strided_region const& sr, std::size_t elem_size);

/// The datatypes of a list of messages (one per peer). Region types are built once, at
/// construction; the per-message struct types depend on the buffer addresses and are rebuilt by
/// `bind` only when a slot pointer differs from the previous call, so a plan executed on the
/// same buffers builds them once.
class message_types {
public:
  /// Builds the region types of every message of `msgs` (regions of `s`'s slots).
  message_types(schedule const& s, std::vector<message> const& msgs);

  /// Makes the message types address `bufs` (one pointer per slot). Rebuilding the types is the
  /// only work on the execution path that may allocate (inside MPI), and only on a pointer change.
  void bind(void* const* bufs);
  /// Datatype of message `i` to use with `MPI_BOTTOM` and `count(i)` (valid after `bind`).
  [[nodiscard]] MPI_Datatype type(std::size_t i) const noexcept {
    return structs_[i] ? structs_[i].get() : MPI_BYTE;
  }
  /// Count to pass with `type(i)`: 1, or 0 for a message without cells.
  [[nodiscard]] int count(std::size_t i) const noexcept { return structs_[i] ? 1 : 0; }

private:
  struct part {
    int slot = 0;
    std::size_t byte_offset = 0; ///< of the region's first cell in its slot buffer
    unique_datatype type;        ///< the region's cells, relative to that cell
  };
  std::vector<std::vector<part>> parts_; ///< per message, non-empty regions in agreed order
  std::vector<unique_datatype> structs_; ///< per message (null when it has no cells)
  std::vector<void*> bound_;             ///< slot pointers the structs address
  bool valid_ = false;
  // Argument arrays of MPI_Type_create_struct, sized for the largest message at construction.
  std::vector<int> blocklens_;
  std::vector<MPI_Aint> displs_;
  std::vector<MPI_Datatype> types_;
};

} // namespace halox::detail
