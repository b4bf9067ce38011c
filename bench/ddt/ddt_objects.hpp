#pragma once
// The strided objects of halox-ddtbench (TEMPI / ddtbench style): `blocks` blocks of `block`
// bytes, `stride` bytes apart, described three ways to MPI (vector, hvector, subarray, all of
// MPI_BYTE) and once to halox (a 2-D box of a uint8 buffer with strides {stride, 1}, the shape
// halox's pack path sees for a face of a tensor).

#include "plan/schedule.hpp"

#include <halox/detail/mpi_handle.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace halox::bench {

/// How the object is described to MPI.
enum class construction { vector, hvector, subarray };
/// "vector", "hvector", "subarray".
[[nodiscard]] char const* to_string(construction c) noexcept;

/// One strided object with its buffers, its three MPI datatypes and its halox schedule.
class strided_object {
public:
  /// `total` packed bytes in blocks of `block` bytes, `stride` bytes apart (block <= stride).
  strided_object(std::size_t total, std::size_t block, std::size_t stride);

  [[nodiscard]] std::size_t total() const noexcept { return total_; }
  [[nodiscard]] std::size_t block() const noexcept { return block_; }
  [[nodiscard]] std::size_t blocks() const noexcept { return total_ / block_; }
  /// Bytes the object spans in memory.
  [[nodiscard]] std::size_t extent() const noexcept { return blocks() * stride_; }

  /// The committed datatype for one construction (count 1 describes the whole object).
  [[nodiscard]] MPI_Datatype type(construction c) const noexcept;
  /// The strided buffer and a contiguous buffer of `total()` bytes.
  [[nodiscard]] std::byte* strided() noexcept { return strided_.data(); }
  [[nodiscard]] std::byte* packed() noexcept { return packed_.data(); }

  /// halox's pack of the object into `packed()` (returns bytes packed).
  std::size_t halox_pack();
  /// halox's unpack of `packed()` into the object.
  std::size_t halox_unpack();
  /// The pack a user writes by hand: one memcpy per block (its size known only at run time).
  void hand_pack();
  /// The matching hand-written unpack.
  void hand_unpack();
  /// MPI_Pack / MPI_Unpack of the object with construction `c` into / from `packed()`.
  void mpi_pack(construction c);
  void mpi_unpack(construction c);

private:
  std::size_t total_, block_, stride_;
  std::vector<std::byte> strided_, packed_;
  detail::unique_datatype types_[3];
  detail::schedule sched_;
  detail::region region_;
};

} // namespace halox::bench
