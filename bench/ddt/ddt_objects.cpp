#include "ddt/ddt_objects.hpp"

#include "exec/cpu/pack.hpp"

#include <halox/error.hpp>

#include <climits>
#include <cstring>

namespace halox::bench {

char const* to_string(construction c) noexcept {
  switch (c) {
  case construction::vector: return "vector";
  case construction::hvector: return "hvector";
  case construction::subarray: return "subarray";
  }
  return "?";
}

strided_object::strided_object(std::size_t total, std::size_t block, std::size_t stride)
    : total_(total), block_(block), stride_(stride) {
  HALOX_REQUIRE(block > 0 && block <= stride && total % block == 0, errc::invalid_argument,
                "a strided object needs 0 < block <= stride and block dividing the total; got "
                "block " +
                    std::to_string(block) + ", stride " + std::to_string(stride) + ", total " +
                    std::to_string(total));
  HALOX_REQUIRE(blocks() <= static_cast<std::size_t>(INT_MAX), errc::unsupported,
                std::to_string(blocks()) + " blocks exceed MPI's int count");
  strided_.resize(extent());
  std::memset(strided_.data(), 0x5a, strided_.size()); // fault the pages in
  packed_.assign(total_, std::byte{0});

  int const n = static_cast<int>(blocks()), b = static_cast<int>(block_),
            s = static_cast<int>(stride_);
  MPI_Datatype raw[3];
  HALOX_MPI_CHECK(MPI_Type_vector(n, b, s, MPI_BYTE, &raw[0]));
  HALOX_MPI_CHECK(MPI_Type_create_hvector(n, b, static_cast<MPI_Aint>(stride_), MPI_BYTE, &raw[1]));
  int const sizes[2] = {n, s}, sub[2] = {n, b}, starts[2] = {0, 0};
  HALOX_MPI_CHECK(MPI_Type_create_subarray(2, sizes, sub, starts, MPI_ORDER_C, MPI_BYTE, &raw[2]));
  for (int i = 0; i < 3; ++i) {
    HALOX_MPI_CHECK(MPI_Type_commit(&raw[i]));
    types_[i] = detail::unique_datatype(raw[i]);
  }

  // The same bytes as halox sees a tensor face: a box [0, blocks) x [0, block) of a uint8 buffer
  // whose rows are `stride` bytes apart.
  detail::slot_layout sl;
  sl.strides = {static_cast<index_t>(stride_), 1};
  sl.elements = static_cast<index_t>(extent());
  sl.type = dtype::uint8;
  sl.elem_size = 1;
  sched_.slots.push_back(sl);
  region_.slot = 0;
  region_.b.nd = 2;
  region_.b.hi[0] = static_cast<index_t>(blocks());
  region_.b.hi[1] = static_cast<index_t>(block_);
}

MPI_Datatype strided_object::type(construction c) const noexcept {
  return types_[static_cast<int>(c)].get();
}

std::size_t strided_object::halox_pack() {
  void const* bufs[1] = {strided_.data()};
  return detail::pack_region(sched_, region_, bufs, packed_.data());
}

std::size_t strided_object::halox_unpack() {
  void* bufs[1] = {strided_.data()};
  return detail::unpack_region(sched_, region_, bufs, packed_.data(), detail::combine_op::replace);
}

void strided_object::hand_pack() {
  std::byte* out = packed_.data();
  std::byte const* in = strided_.data();
  for (std::size_t k = 0; k < blocks(); ++k, out += block_, in += stride_)
    std::memcpy(out, in, block_);
}

void strided_object::hand_unpack() {
  std::byte const* in = packed_.data();
  std::byte* out = strided_.data();
  for (std::size_t k = 0; k < blocks(); ++k, in += block_, out += stride_)
    std::memcpy(out, in, block_);
}

void strided_object::mpi_pack(construction c) {
  int pos = 0;
  HALOX_MPI_CHECK(MPI_Pack(strided_.data(), 1, type(c), packed_.data(), static_cast<int>(total_),
                           &pos, MPI_COMM_WORLD));
}

void strided_object::mpi_unpack(construction c) {
  int pos = 0;
  HALOX_MPI_CHECK(MPI_Unpack(packed_.data(), static_cast<int>(total_), &pos, strided_.data(), 1,
                             type(c), MPI_COMM_WORLD));
}

} // namespace halox::bench
