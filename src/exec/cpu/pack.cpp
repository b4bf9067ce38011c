#include "exec/cpu/pack.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <cstring>
#include <utility>

namespace halox::detail {

namespace {

// Calls f(offset) for the element offset of every run of `sr`, in row-major box order. An
// odometer over the outer loops: no division per run (run_offset's div/mod chain costs more
// than copying a short run).
template <class F> inline void for_each_run(strided_region const& sr, F&& f) {
  if (sr.run == 0) return;
  if (sr.nloops == 0) {
    f(sr.offset);
    return;
  }
  int const last = sr.nloops - 1;
  index_t const inner_n = sr.count[last], inner_s = sr.stride[last];
  index_t idx[max_dims] = {};
  index_t off = sr.offset;
  for (;;) {
    index_t o = off;
    for (index_t i = 0; i < inner_n; ++i, o += inner_s) f(o);
    int k = last - 1;
    for (; k >= 0; --k) {
      off += sr.stride[k];
      if (++idx[k] < sr.count[k]) break;
      off -= sr.stride[k] * sr.count[k];
      idx[k] = 0;
    }
    if (k < 0) return;
  }
}

// Copies of one run of a fixed byte count. A memcpy whose size is a compile-time constant is a
// few moves; with a run-time size it is a library call (8-9 ns for an 8-byte run against ~4 ns).
template <std::size_t N> struct fixed_copy {
  static void run(std::byte* d, std::byte const* s, std::size_t) { std::memcpy(d, s, N); }
};
// Runs of N..2N bytes: two fixed N-byte copies that overlap in the middle. Source and
// destination never overlap (a packed stream and a tensor), so the order does not matter.
template <std::size_t N> struct overlap_copy {
  static void run(std::byte* d, std::byte const* s, std::size_t n) {
    std::memcpy(d, s, N);
    std::memcpy(d + n - N, s + n - N, N);
  }
};
struct any_copy {
  static void run(std::byte* d, std::byte const* s, std::size_t n) { std::memcpy(d, s, n); }
};

template <class Copy, bool Pack>
void copy_runs_with(strided_region const& sr, std::size_t e, std::byte* base, std::byte* stream) {
  std::size_t const run_bytes = static_cast<std::size_t>(sr.run) * e;
  for_each_run(sr, [&](index_t off) {
    std::byte* p = base + static_cast<std::size_t>(off) * e;
    if (Pack)
      Copy::run(stream, p, run_bytes);
    else
      Copy::run(p, stream, run_bytes);
    stream += run_bytes;
  });
}

// Copies runs between a strided region and a packed stream, with the run copy chosen once per
// region from the run length.
template <bool Pack>
void copy_runs_any(std::size_t e, strided_region const& sr, std::byte* base, std::byte* stream) {
  if (e != 1 && e != 2 && e != 4 && e != 8)
    throw error(errc::internal, "unsupported element size " + std::to_string(e));
  std::size_t const n = static_cast<std::size_t>(sr.run) * e;
  if (sr.nloops == 0 || n >= 256) {
    // One run, or runs long enough that the call overhead is noise.
    copy_runs_with<any_copy, Pack>(sr, e, base, stream);
    return;
  }
  switch (n) {
  case 1: copy_runs_with<fixed_copy<1>, Pack>(sr, e, base, stream); return;
  case 2: copy_runs_with<fixed_copy<2>, Pack>(sr, e, base, stream); return;
  case 4: copy_runs_with<fixed_copy<4>, Pack>(sr, e, base, stream); return;
  case 8: copy_runs_with<fixed_copy<8>, Pack>(sr, e, base, stream); return;
  case 16: copy_runs_with<fixed_copy<16>, Pack>(sr, e, base, stream); return;
  case 32: copy_runs_with<fixed_copy<32>, Pack>(sr, e, base, stream); return;
  case 64: copy_runs_with<fixed_copy<64>, Pack>(sr, e, base, stream); return;
  default: break;
  }
  if (n < 4)
    copy_runs_with<any_copy, Pack>(sr, e, base, stream);
  else if (n < 8)
    copy_runs_with<overlap_copy<4>, Pack>(sr, e, base, stream);
  else if (n < 16)
    copy_runs_with<overlap_copy<8>, Pack>(sr, e, base, stream);
  else if (n < 32)
    copy_runs_with<overlap_copy<16>, Pack>(sr, e, base, stream);
  else if (n < 64)
    copy_runs_with<overlap_copy<32>, Pack>(sr, e, base, stream);
  else if (n < 128)
    copy_runs_with<overlap_copy<64>, Pack>(sr, e, base, stream);
  else
    copy_runs_with<overlap_copy<128>, Pack>(sr, e, base, stream);
}

// Combines a packed stream into a strided region, element by element, as tag E's type.
template <class E> void combine_runs(E tag, strided_region const& sr, void* base_ptr,
                                     std::byte const* stream, combine_op op) {
  using T = typename E::storage;
  auto* base = static_cast<T*>(base_ptr);
  for_each_run(sr, [&](index_t off) {
    T* p = base + off;
    for (index_t i = 0; i < sr.run; ++i, stream += sizeof(T)) {
      T v;
      std::memcpy(&v, stream, sizeof(T));
      combine_elem(tag, p[i], v, op);
    }
  });
}

template <class E> void fill_runs(E tag, strided_region const& sr, void* base_ptr, double value) {
  using T = typename E::storage;
  auto* base = static_cast<T*>(base_ptr);
  T const v = tag.from_double(value);
  for_each_run(sr, [&](index_t off) {
    T* p = base + off;
    for (index_t i = 0; i < sr.run; ++i) p[i] = v;
  });
}

// A local copy walked on both sides at once: the boxes' dimensions of extent > 1, merged where
// both sides are contiguous across the boundary, with each side's element strides.
struct joint_walk {
  int n = 0;
  index_t cnt[max_dims] = {}, s_str[max_dims] = {}, d_str[max_dims] = {};
  index_t s_off = 0, d_off = 0;
};

// False when the boxes differ in shape (then only the canonical packed order relates them).
bool make_joint(box const& a, index_t const* sa, box const& b, index_t const* sb, joint_walk& w) {
  if (a.nd != b.nd) return false;
  int n = 0;
  for (int d = 0; d < a.nd; ++d) {
    index_t const ext = a.extent(d);
    if (ext != b.extent(d)) return false;
    w.s_off += a.lo[d] * sa[d];
    w.d_off += b.lo[d] * sb[d];
    if (ext == 1) continue;
    if (n > 0 && w.s_str[n - 1] == ext * sa[d] && w.d_str[n - 1] == ext * sb[d]) {
      w.cnt[n - 1] *= ext;
      w.s_str[n - 1] = sa[d];
      w.d_str[n - 1] = sb[d];
    } else {
      w.cnt[n] = ext;
      w.s_str[n] = sa[d];
      w.d_str[n] = sb[d];
      ++n;
    }
  }
  w.n = n;
  return true;
}

// Calls f(src_offset, dst_offset) for every combination of the joint dimensions `dims`
// (outermost first), starting at the walk's offsets.
template <class F> void for_each_outer(joint_walk const& w, int const* dims, int nd, F&& f) {
  index_t idx[max_dims] = {};
  index_t so = w.s_off, dof = w.d_off;
  for (;;) {
    f(so, dof);
    int k = nd - 1;
    for (; k >= 0; --k) {
      int const d = dims[k];
      so += w.s_str[d];
      dof += w.d_str[d];
      if (++idx[k] < w.cnt[d]) break;
      so -= w.s_str[d] * w.cnt[d];
      dof -= w.d_str[d] * w.cnt[d];
      idx[k] = 0;
    }
    if (k < 0) return;
  }
}

// dst = src (or dst op= src) over the joint walk, elements of tag E's type.
template <class E>
void copy_joint(E tag, joint_walk const& w, void const* src_base, void* dst_base, combine_op op) {
  using T = typename E::storage;
  auto const* src = static_cast<T const*>(src_base);
  auto* dst = static_cast<T*>(dst_base);
  auto elem = [&](index_t so, index_t dof) {
    if (op == combine_op::replace)
      dst[dof] = src[so];
    else
      combine_elem(tag, dst[dof], src[so], op);
  };
  if (w.n == 0) {
    elem(w.s_off, w.d_off);
    return;
  }
  int const last = w.n - 1;
  int dims[max_dims];
  if (w.s_str[last] == 1 && w.d_str[last] == 1) {
    // Contiguous runs on both sides: one memcpy per run for a plain copy.
    index_t const run = w.cnt[last];
    for (int k = 0; k < last; ++k) dims[k] = k;
    auto run_fn = [&](index_t so, index_t dof) {
      if (op == combine_op::replace)
        std::memcpy(dst + dof, src + so, static_cast<std::size_t>(run) * sizeof(T));
      else
        for (index_t i = 0; i < run; ++i) combine_elem(tag, dst[dof + i], src[so + i], op);
    };
    if (last == 0)
      run_fn(w.s_off, w.d_off);
    else
      for_each_outer(w, dims, last, run_fn);
    return;
  }
  // The two sides are contiguous along different dimensions (a transpose, e.g. between NCHW
  // and NHWC strides): copy square tiles of those two dimensions, so that both sides touch
  // whole cache lines, instead of striding one side element by element.
  int t = -1;
  for (int k = 0; k < last; ++k)
    if ((w.s_str[last] == 1 && w.d_str[k] == 1) || (w.d_str[last] == 1 && w.s_str[k] == 1)) t = k;
  if (t < 0) {
    for (int k = 0; k < last; ++k) dims[k] = k;
    auto row = [&](index_t so, index_t dof) {
      for (index_t i = 0; i < w.cnt[last]; ++i)
        elem(so + i * w.s_str[last], dof + i * w.d_str[last]);
    };
    if (last == 0)
      row(w.s_off, w.d_off);
    else
      for_each_outer(w, dims, last, row);
    return;
  }
  int nd = 0;
  for (int k = 0; k < last; ++k)
    if (k != t) dims[nd++] = k;
  constexpr index_t tile = 32;
  index_t const na = w.cnt[t], nb = w.cnt[last];
  index_t const sa = w.s_str[t], da = w.d_str[t], sb = w.s_str[last], db = w.d_str[last];
  auto tiles = [&](index_t so, index_t dof) {
    for (index_t a0 = 0; a0 < na; a0 += tile)
      for (index_t b0 = 0; b0 < nb; b0 += tile) {
        index_t const a1 = std::min(na, a0 + tile), b1 = std::min(nb, b0 + tile);
        for (index_t a = a0; a < a1; ++a)
          for (index_t b = b0; b < b1; ++b) elem(so + a * sa + b * sb, dof + a * da + b * db);
      }
  };
  if (nd == 0)
    tiles(w.s_off, w.d_off);
  else
    for_each_outer(w, dims, nd, tiles);
}

// Byte span [lo, hi) a region touches in its buffer.
std::pair<std::byte const*, std::byte const*> byte_span(schedule const& s, region const& r,
                                                        void const* base) {
  auto const& sl = s.slots[r.slot];
  index_t first = 0, last = 0;
  for (int d = 0; d < r.b.nd; ++d) {
    first += r.b.lo[d] * sl.strides[d];
    last += (r.b.hi[d] - 1) * sl.strides[d];
  }
  auto const* p = static_cast<std::byte const*>(base);
  return {p + static_cast<std::size_t>(first) * sl.elem_size,
          p + static_cast<std::size_t>(last + 1) * sl.elem_size};
}

// One pass from source to destination when the two regions have the same shape and cannot
// overlap in memory; false when the copy must go through the packed order instead.
bool copy_direct(schedule const& s, local_copy const& c, void* const* bufs, combine_op op) {
  auto const& ss = s.slots[c.src.slot];
  auto const& ds = s.slots[c.dst.slot];
  if (ss.type != ds.type || c.src.b.empty()) return c.src.b.empty();
  // A copy inside one tensor goes from owned cells to halo cells (or back, accumulating), which
  // are disjoint by construction. Between two buffers, the caller may have aliased them.
  if (c.src.slot != c.dst.slot) {
    auto const a = byte_span(s, c.src, bufs[c.src.slot]);
    auto const b = byte_span(s, c.dst, bufs[c.dst.slot]);
    if (a.first < b.second && b.first < a.second) return false;
  }
  joint_walk w;
  if (!make_joint(c.src.b, ss.strides.data(), c.dst.b, ds.strides.data(), w)) return false;
  visit_dtype(ss.type,
              [&](auto tag) { copy_joint(tag, w, bufs[c.src.slot], bufs[c.dst.slot], op); });
  return true;
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
  // Straight from source to destination where the regions have the same shape (one pass; tiled
  // when the two sides' strides transpose); otherwise through the scratch buffer in the
  // canonical packed order, which both sides agree on whatever their strides.
  for (auto const& c : s.copies) {
    if (copy_direct(s, c, bufs, op)) continue;
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

bool message_contiguous(schedule const& s, message const& m) {
  return m.regions.size() == 1 && region_contiguous(s, m.regions[0]);
}

std::size_t region_byte_offset(schedule const& s, region const& r) {
  auto const& sl = s.slots[r.slot];
  return static_cast<std::size_t>(make_region(r.b, sl.strides.data()).offset) * sl.elem_size;
}

std::vector<wire_box> message_boxes(schedule const& s, message const& m) {
  std::vector<wire_box> out;
  for (auto const& r : m.regions) {
    auto const& sl = s.slots[static_cast<std::size_t>(r.slot)];
    out.push_back({r.slot, make_region(r.b, sl.strides.data()), sl.elem_size});
  }
  return out;
}

std::size_t append_runs(schedule const& s, message const& m, std::vector<run_ref>& out) {
  std::size_t const first = out.size();
  for (auto const& reg : m.regions) {
    auto const& sl = s.slots[static_cast<std::size_t>(reg.slot)];
    strided_region const r = make_region(reg.b, sl.strides.data());
    auto const bytes = static_cast<std::size_t>(r.run) * sl.elem_size;
    if (bytes == 0) continue;
    index_t const nruns = r.runs();
    for (index_t k = 0; k < nruns; ++k) {
      auto const off = static_cast<std::size_t>(r.run_offset(k)) * sl.elem_size;
      if (out.size() > first && out.back().slot == reg.slot &&
          out.back().offset + out.back().bytes == off) {
        out.back().bytes += bytes;
        continue;
      }
      out.push_back({reg.slot, off, bytes});
    }
  }
  return out.size() - first;
}

} // namespace halox::detail
