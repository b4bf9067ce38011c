#include "exec/mpi/mpi_types.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <climits>
#include <string>

namespace halox::detail {

namespace {
// MPI_Type_commit takes the handle by pointer; commit without letting go of ownership on error.
void commit(unique_datatype& t) {
  MPI_Datatype raw = t.release();
  int const rc = MPI_Type_commit(&raw);
  t = unique_datatype(raw);
  HALOX_MPI_CHECK(rc);
}
} // namespace

int mpi_int_count(std::size_t n, char const* what) {
  HALOX_REQUIRE(n <= static_cast<std::size_t>(INT_MAX), errc::unsupported,
                std::string(what) + " of " + std::to_string(n) + " exceeds MPI's int count (" +
                    std::to_string(INT_MAX) +
                    "); split the tensor over more ranks or use a packing backend with smaller "
                    "messages");
  return static_cast<int>(n);
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
  commit(t);
  return t;
}

message_types::message_types(schedule const& s, std::vector<message> const& msgs)
    : parts_(msgs.size()), structs_(msgs.size()), bound_(s.slots.size(), nullptr) {
  std::size_t most = 0;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    for (auto const& r : msgs[i].regions) {
      auto const& sl = s.slots[r.slot];
      strided_region const sr = make_region(r.b, sl.strides.data());
      if (sr.elements() == 0) continue;
      part p;
      p.slot = r.slot;
      p.byte_offset = static_cast<std::size_t>(sr.offset) * sl.elem_size;
      p.type = make_region_type(sr, sl.elem_size);
      parts_[i].push_back(std::move(p));
    }
    most = std::max(most, parts_[i].size());
  }
  mpi_int_count(most, "the number of regions of one message");
  blocklens_.assign(most, 1);
  displs_.assign(most, 0);
  types_.assign(most, MPI_DATATYPE_NULL);
}

void message_types::bind(void* const* bufs) {
  if (valid_ && std::equal(bound_.begin(), bound_.end(), bufs)) return;
  valid_ = false; // stays false if a rebuild below throws half-way
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    auto const& ps = parts_[i];
    structs_[i].reset();
    if (ps.empty()) continue;
    for (std::size_t j = 0; j < ps.size(); ++j) {
      auto const* cell = static_cast<std::byte const*>(bufs[ps[j].slot]) + ps[j].byte_offset;
      HALOX_MPI_CHECK(MPI_Get_address(cell, &displs_[j]));
      types_[j] = ps[j].type.get();
    }
    HALOX_MPI_CHECK(MPI_Type_create_struct(static_cast<int>(ps.size()), blocklens_.data(),
                                           displs_.data(), types_.data(), structs_[i].out()));
    commit(structs_[i]);
  }
  std::copy(bufs, bufs + bound_.size(), bound_.begin());
  valid_ = true;
}

} // namespace halox::detail
