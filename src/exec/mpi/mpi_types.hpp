#pragma once
// MPI derived datatypes that describe schedule messages, so that MPI itself gathers and
// scatters the strided cells (the MPI transport walking a message's boxes, behind mpi_datatype
// and device_mpi_datatype, and alltoallw).
//
// A message whose regions lie in several buffers (slots) travels as several MPI messages, one
// per run of consecutive regions of one slot ("part"), each described by one committed type
// whose displacements are relative to its slot's base address. Types therefore never depend on
// where the caller's buffers are: one set, built at plan time, serves every address (a caching
// allocator may hand out different buffers every step). Sender and receiver split a message at
// the same places, because both walk the regions in the agreed order and region k has the same
// slot role (same tensor, or source -> destination) on both sides.

#include "exec/transport.hpp"
#include "plan/schedule.hpp"

#include <halox/detail/mpi_handle.hpp>

#include <mpi.h>

#include <cstddef>
#include <vector>

namespace halox::detail {

/// `n` as an MPI `int` count; throws `halox::error` (unsupported) naming `what` when it does not
/// fit, since the non-`_c` MPI calls cannot express it.
int mpi_int_count(std::size_t n, char const* what);

/// Committed datatype of the cells of `sr` (element size `elem_size` bytes) relative to the
/// region's first cell: a contiguous run of bytes nested in one `MPI_Type_create_hvector` per
/// outer loop, so arbitrary (padded, permuted) strides are described exactly. Not committed.
[[nodiscard]] unique_datatype make_region_type(strided_region const& sr, std::size_t elem_size);

/// Commits `t` in place.
void commit(unique_datatype& t);

/// One MPI message of a part of a schedule message: `count` (0 or 1) of `type` at the base of
/// slot `slot`'s buffer.
struct typed_part {
  int slot = 0;
  unique_datatype type;
  std::size_t bytes = 0; ///< packed size (the part's share of the message, in order)
};

/// The MPI messages one message's `boxes` travel as: one part per run of consecutive boxes in
/// one buffer, empty boxes left out (empty when nothing moves).
[[nodiscard]] std::vector<typed_part> make_parts(std::vector<wire_box> const& boxes);

/// The datatypes of a list of schedule messages (one per peer), built once.
class message_types {
public:
  /// Builds the part types of every message of `msgs` (regions of `s`'s slots).
  message_types(schedule const& s, std::vector<message> const& msgs);

  /// Parts of message `i` (empty when it moves no cell: then no MPI message travels).
  [[nodiscard]] std::vector<typed_part> const& parts(std::size_t i) const noexcept {
    return parts_[i];
  }
  /// MPI messages of all messages together.
  [[nodiscard]] std::size_t total_parts() const noexcept { return total_; }
  /// The one slot every part lies in, or -1 when parts lie in several slots (or there are none).
  [[nodiscard]] int single_slot() const noexcept { return single_slot_; }

private:
  std::vector<std::vector<typed_part>> parts_;
  std::size_t total_ = 0;
  int single_slot_ = -1;
};

} // namespace halox::detail
