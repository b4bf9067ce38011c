#include "exec/cpu/pack.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <cstring>

namespace halox::detail {

namespace {

// Copies runs between a strided region and a packed stream. Short runs of one element use typed
// loads/stores (a memcpy call per element would dominate); longer runs use memcpy.
template <std::size_t E, bool Pack>
void copy_runs(strided_region const& sr, std::byte* base, std::byte* stream) {
  index_t const runs = sr.runs();
  std::size_t const run_bytes = static_cast<std::size_t>(sr.run) * E;
  if (sr.nloops == 1) {
    // The common face case: one strided loop of contiguous runs.
    std::byte* p = base + static_cast<std::size_t>(sr.offset) * E;
    std::size_t const step = static_cast<std::size_t>(sr.stride[0]) * E;
    for (index_t k = 0; k < runs; ++k, p += step, stream += run_bytes) {
      if (Pack)
        std::memcpy(stream, p, run_bytes);
      else
        std::memcpy(p, stream, run_bytes);
    }
    return;
  }
  for (index_t k = 0; k < runs; ++k, stream += run_bytes) {
    std::byte* p = base + static_cast<std::size_t>(sr.run_offset(k)) * E;
    if (Pack)
      std::memcpy(stream, p, run_bytes);
    else
      std::memcpy(p, stream, run_bytes);
  }
}

template <bool Pack>
void copy_runs_any(std::size_t e, strided_region const& sr, std::byte* base, std::byte* stream) {
  switch (e) {
  case 1: copy_runs<1, Pack>(sr, base, stream); break;
  case 2: copy_runs<2, Pack>(sr, base, stream); break;
  case 4: copy_runs<4, Pack>(sr, base, stream); break;
  case 8: copy_runs<8, Pack>(sr, base, stream); break;
  default: throw error(errc::internal, "unsupported element size " + std::to_string(e));
  }
}

// Combines a packed stream into a strided region, element by element, as tag E's type.
template <class E> void combine_runs(E tag, strided_region const& sr, void* base_ptr,
                                     std::byte const* stream, combine_op op) {
  using T = typename E::storage;
  auto* base = static_cast<T*>(base_ptr);
  index_t const runs = sr.runs();
  for (index_t k = 0; k < runs; ++k) {
    T* p = base + sr.run_offset(k);
    for (index_t i = 0; i < sr.run; ++i, stream += sizeof(T)) {
      T v;
      std::memcpy(&v, stream, sizeof(T));
      combine_elem(tag, p[i], v, op);
    }
  }
}

template <class E> void fill_runs(E tag, strided_region const& sr, void* base_ptr, double value) {
  using T = typename E::storage;
  auto* base = static_cast<T*>(base_ptr);
  T const v = tag.from_double(value);
  index_t const runs = sr.runs();
  for (index_t k = 0; k < runs; ++k) {
    T* p = base + sr.run_offset(k);
    for (index_t i = 0; i < sr.run; ++i) p[i] = v;
  }
}

} // namespace

std::size_t pack_region(schedule const& s, region const& r, void const* const* bufs,
                        std::byte* out) {
  auto const& sl = s.slots[r.slot];
  strided_region const sr = make_region(r.b, sl.strides.data());
  copy_runs_any<true>(sl.elem_size, sr, static_cast<std::byte*>(const_cast<void*>(bufs[r.slot])),
                      out);
  return static_cast<std::size_t>(sr.elements()) * sl.elem_size;
}

std::size_t unpack_region(schedule const& s, region const& r, void* const* bufs,
                          std::byte const* in, combine_op op) {
  auto const& sl = s.slots[r.slot];
  strided_region const sr = make_region(r.b, sl.strides.data());
  if (op == combine_op::replace)
    copy_runs_any<false>(sl.elem_size, sr, static_cast<std::byte*>(bufs[r.slot]),
                         const_cast<std::byte*>(in));
  else
    visit_dtype(sl.type, [&](auto tag) { combine_runs(tag, sr, bufs[r.slot], in, op); });
  return static_cast<std::size_t>(sr.elements()) * sl.elem_size;
}

void pack_message(schedule const& s, message const& m, void const* const* bufs, std::byte* out) {
  for (auto const& r : m.regions) out += pack_region(s, r, bufs, out);
}

void unpack_message(schedule const& s, message const& m, void* const* bufs, std::byte const* in,
                    combine_op op) {
  for (auto const& r : m.regions) in += unpack_region(s, r, bufs, in, op);
}

void run_local_copies(schedule const& s, void* const* bufs, combine_op op, std::byte* scratch) {
  // Through the caller's scratch buffer: the two sides may have different strides (and
  // different buffers), and the canonical packed order is what both agree on.
  for (auto const& c : s.copies) {
    pack_region(s, c.src, bufs, scratch);
    unpack_region(s, c.dst, bufs, scratch, op);
  }
}

std::size_t max_copy_bytes(schedule const& s) {
  std::size_t m = 0;
  for (auto const& c : s.copies) m = std::max(m, region_bytes(s, c.src));
  return m;
}

void run_fills(schedule const& s, void* const* bufs, double value) {
  for (auto const& f : s.fills) {
    auto const& sl = s.slots[f.slot];
    strided_region const sr = make_region(f.b, sl.strides.data());
    visit_dtype(sl.type, [&](auto tag) { fill_runs(tag, sr, bufs[f.slot], value); });
  }
}

bool region_contiguous(schedule const& s, region const& r) {
  return make_region(r.b, s.slots[r.slot].strides.data()).nloops == 0;
}

std::size_t region_byte_offset(schedule const& s, region const& r) {
  auto const& sl = s.slots[r.slot];
  return static_cast<std::size_t>(make_region(r.b, sl.strides.data()).offset) * sl.elem_size;
}

} // namespace halox::detail
