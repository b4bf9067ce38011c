#include "exec/mpi/mpi_types.hpp"

#include "exec/cpu/pack.hpp"

#include <halox/error.hpp>

#include <climits>
#include <string>

namespace halox::detail {

int mpi_int_count(std::size_t n, char const* what) {
  HALOX_REQUIRE(n <= static_cast<std::size_t>(INT_MAX), errc::unsupported,
                std::string(what) + " of " + std::to_string(n) + " exceeds MPI's int count (" +
                    std::to_string(INT_MAX) +
                    "); split the tensor over more ranks or use a packing backend with smaller "
                    "messages");
  return static_cast<int>(n);
}

void commit(unique_datatype& t) {
  // MPI_Type_commit takes the handle by pointer; keep ownership even when it fails.
  MPI_Datatype raw = t.release();
  int const rc = MPI_Type_commit(&raw);
  t = unique_datatype(raw);
  HALOX_MPI_CHECK(rc);
}

unique_datatype make_region_type(strided_region const& sr, std::size_t elem_size) {
  unique_datatype t;
  std::size_t const run_bytes = static_cast<std::size_t>(sr.run) * elem_size;
  HALOX_MPI_CHECK(MPI_Type_contiguous(mpi_int_count(run_bytes, "a contiguous run in bytes"),
                                      MPI_BYTE, t.out()));
  // Innermost loop first: each hvector repeats the type below it, so the outermost loop ends up
  // outermost in the type map, which is row-major box order.
  for (int k = sr.nloops - 1; k >= 0; --k) {
    unique_datatype outer;
    auto const stride = static_cast<MPI_Aint>(sr.stride[k] * static_cast<index_t>(elem_size));
    HALOX_MPI_CHECK(MPI_Type_create_hvector(
        mpi_int_count(static_cast<std::size_t>(sr.count[k]), "a region's loop trip count"), 1,
        stride, t.get(), outer.out()));
    t = std::move(outer);
  }
  return t;
}

namespace {

// One part: the boxes [first, last) of one buffer, as a struct of region types at their byte
// offsets from the buffer's base.
unique_datatype make_part_type(wire_box const* boxes, std::size_t n) {
  std::vector<unique_datatype> owned;
  std::vector<int> lens(n, 1);
  std::vector<MPI_Aint> displs(n);
  std::vector<MPI_Datatype> types(n);
  for (std::size_t j = 0; j < n; ++j) {
    owned.push_back(make_region_type(boxes[j].cells, boxes[j].elem_size));
    displs[j] =
        static_cast<MPI_Aint>(boxes[j].cells.offset) * static_cast<MPI_Aint>(boxes[j].elem_size);
    types[j] = owned.back().get();
  }
  unique_datatype t;
  HALOX_MPI_CHECK(MPI_Type_create_struct(mpi_int_count(n, "the number of regions of one message"),
                                         lens.data(), displs.data(), types.data(), t.out()));
  commit(t);
  return t;
}

} // namespace

std::vector<typed_part> make_parts(std::vector<wire_box> const& boxes) {
  // Empty boxes are left out on both sides alike (a region and its counterpart have the same
  // volume), so sender and receiver still split at the same places.
  std::vector<wire_box> live;
  for (auto const& b : boxes)
    if (b.cells.elements() != 0) live.push_back(b);
  std::vector<typed_part> parts;
  for (std::size_t first = 0; first < live.size();) {
    std::size_t last = first + 1;
    while (last < live.size() && live[last].slot == live[first].slot) ++last;
    typed_part p;
    p.slot = live[first].slot;
    p.type = make_part_type(live.data() + first, last - first);
    for (std::size_t j = first; j < last; ++j)
      p.bytes += static_cast<std::size_t>(live[j].cells.elements()) * live[j].elem_size;
    parts.push_back(std::move(p));
    first = last;
  }
  return parts;
}

message_types::message_types(schedule const& s, std::vector<message> const& msgs)
    : parts_(msgs.size()) {
  bool several = false;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    parts_[i] = make_parts(message_boxes(s, msgs[i]));
    for (auto const& p : parts_[i]) {
      if (single_slot_ < 0 && !several) single_slot_ = p.slot;
      if (p.slot != single_slot_) several = true;
      ++total_;
    }
  }
  if (several) single_slot_ = -1;
}

} // namespace halox::detail
