#pragma once
/// \file box.hpp
/// N-d boxes and the strided-region arithmetic shared by host and device code.
///
/// Everything here is plain data and inline functions so the CPU pack loops and the CUDA
/// kernels walk exactly the same element order: a region is packed in row-major order of its
/// box (last dimension fastest), whatever the strides of the buffer it lives in. That canonical
/// order is what lets two ranks with different local layouts agree on message contents.

#include <cstdint>

#if defined(__CUDACC__)
#define HALOX_HD __host__ __device__
#else
#define HALOX_HD
#endif

namespace halox {

/// Signed index type used for extents, offsets and strides (in elements).
using index_t = std::int64_t;
/// Largest tensor rank halox supports.
inline constexpr int max_dims = 8;

/// A half-open N-d box `[lo, hi)` in some coordinate system (global or local).
struct box {
  int nd = 0;                ///< number of dimensions in use
  index_t lo[max_dims] = {}; ///< first index per dimension
  index_t hi[max_dims] = {}; ///< one past the last index per dimension

  /// Extent along dimension `d` (0 if empty).
  HALOX_HD index_t extent(int d) const { return hi[d] > lo[d] ? hi[d] - lo[d] : 0; }
  /// Number of cells.
  HALOX_HD index_t volume() const {
    index_t v = 1;
    for (int d = 0; d < nd; ++d) v *= extent(d);
    return v;
  }
  /// True when the box holds no cell.
  HALOX_HD bool empty() const { return volume() == 0; }
};

/// A half-open range `[lo, hi)` of positions along one dimension: one factor of a box.
struct index_range {
  index_t lo = 0; ///< first position
  index_t hi = 0; ///< one past the last position

  /// True when the range holds no position.
  HALOX_HD bool empty() const { return hi <= lo; }
  /// Number of positions (0 when empty).
  HALOX_HD index_t size() const { return hi > lo ? hi - lo : 0; }
};

/// Intersection of two ranges (empty, with `hi == lo`, when they do not meet).
HALOX_HD inline index_range intersect(index_range a, index_range b) {
  index_range r{a.lo > b.lo ? a.lo : b.lo, a.hi < b.hi ? a.hi : b.hi};
  if (r.hi < r.lo) r.hi = r.lo;
  return r;
}

/// Intersection of two boxes of the same rank (may be empty).
HALOX_HD inline box intersect(box const& a, box const& b) {
  box r;
  r.nd = a.nd;
  for (int d = 0; d < a.nd; ++d) {
    r.lo[d] = a.lo[d] > b.lo[d] ? a.lo[d] : b.lo[d];
    r.hi[d] = a.hi[d] < b.hi[d] ? a.hi[d] : b.hi[d];
    if (r.hi[d] < r.lo[d]) r.hi[d] = r.lo[d];
  }
  return r;
}

/// Box translated by `delta` per dimension.
HALOX_HD inline box shifted(box const& a, index_t const* delta) {
  box r = a;
  for (int d = 0; d < a.nd; ++d) {
    r.lo[d] += delta[d];
    r.hi[d] += delta[d];
  }
  return r;
}

/// Equality of two boxes (same rank and bounds).
HALOX_HD inline bool operator==(box const& a, box const& b) {
  if (a.nd != b.nd) return false;
  for (int d = 0; d < a.nd; ++d)
    if (a.lo[d] != b.lo[d] || a.hi[d] != b.hi[d]) return false;
  return true;
}

/// A box inside a strided buffer, reduced to the fewest nested loops of contiguous runs.
///
/// `count[k]`/`stride[k]` for k < `nloops` describe outer loops (stride in elements), and each
/// innermost iteration is one contiguous run of `run` elements. `offset` is the element offset of
/// the box's first cell. Dimensions whose extent is 1 are dropped and dimensions that are
/// contiguous with the next one are merged, so a full face is one run.
struct strided_region {
  index_t offset = 0;            ///< element offset of the first cell from the buffer base
  index_t run = 0;               ///< contiguous elements per innermost iteration
  int nloops = 0;                ///< number of outer loops in use
  index_t count[max_dims] = {};  ///< trip counts of the outer loops (outermost first)
  index_t stride[max_dims] = {}; ///< element strides of the outer loops

  /// Number of runs.
  HALOX_HD index_t runs() const {
    index_t r = 1;
    for (int k = 0; k < nloops; ++k) r *= count[k];
    return r;
  }
  /// Number of elements.
  HALOX_HD index_t elements() const { return run == 0 ? 0 : run * runs(); }
  /// Element offset of run number `i` (0 <= i < runs()), runs in row-major box order.
  HALOX_HD index_t run_offset(index_t i) const {
    index_t off = offset;
    for (int k = nloops - 1; k >= 0; --k) {
      index_t c = i % count[k];
      i /= count[k];
      off += c * stride[k];
    }
    return off;
  }
};

/// Describes box `b` (local coordinates) of a buffer with element strides `strides`.
HALOX_HD inline strided_region make_region(box const& b, index_t const* strides) {
  strided_region r;
  if (b.empty()) return r;
  index_t cnt[max_dims];
  index_t str[max_dims];
  int n = 0;
  for (int d = 0; d < b.nd; ++d) {
    r.offset += b.lo[d] * strides[d];
    if (b.extent(d) == 1) continue;
    cnt[n] = b.extent(d);
    str[n] = strides[d];
    ++n;
  }
  // Merge dimension k into k+1 when stepping k is the same as running past the end of k+1.
  int m = 0;
  for (int k = 0; k < n; ++k) {
    if (m > 0 && str[m - 1] == cnt[k] * str[k]) {
      cnt[m - 1] *= cnt[k];
      str[m - 1] = str[k];
    } else {
      cnt[m] = cnt[k];
      str[m] = str[k];
      ++m;
    }
  }
  if (m > 0 && str[m - 1] == 1) {
    r.run = cnt[m - 1];
    --m;
  } else {
    r.run = 1;
  }
  r.nloops = m;
  for (int k = 0; k < m; ++k) {
    r.count[k] = cnt[k];
    r.stride[k] = str[k];
  }
  return r;
}

} // namespace halox
