#pragma once
/// \file box.hpp
/// Public index type and N-d boxes: the coordinates in which distributions, grids and operators
/// describe the parts of a tensor.
///
/// Plain data and inline functions only, usable from host code and (through HALOX_HD) from CUDA
/// kernels, so that host and device agree on box arithmetic. This header includes no CUDA header.

#include <cstdint>

/// Marks functions callable from both host and device code. Expands to `__host__ __device__`
/// only when compiled by a CUDA compiler, so host-only consumers see plain inline functions.
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

/// `hi - lo` as an extent: 0 when empty, and saturated at the largest index_t (instead of
/// overflowing) when the span does not fit, e.g. from -2^62 to 2^62.
HALOX_HD inline index_t saturating_span(index_t lo, index_t hi) {
  if (hi <= lo) return 0;
  auto const d = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);
  return d > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<index_t>(d);
}

/// A half-open N-d box `[lo, hi)` in some coordinate system (global or local).
///
/// `extent` and `volume` never overflow: a span or a volume that does not fit in index_t
/// saturates at its largest value (2^63 - 1), which no valid buffer reaches. Every box halox
/// derives from a `distribution` fits, because the distribution's constructor rejects tensors
/// whose extents, halos or element counts would not.
struct box {
  int nd = 0;                ///< number of dimensions in use
  index_t lo[max_dims] = {}; ///< first index per dimension
  index_t hi[max_dims] = {}; ///< one past the last index per dimension

  /// Extent along dimension `d` (0 if empty; saturated at 2^63 - 1).
  HALOX_HD index_t extent(int d) const { return saturating_span(lo[d], hi[d]); }
  /// Number of cells (saturated at 2^63 - 1).
  HALOX_HD index_t volume() const {
    index_t v = 1;
    for (int d = 0; d < nd; ++d) {
      index_t const e = extent(d);
      // Both below 2^31: the product fits, no division needed (the common case).
      if ((v | e) < (index_t{1} << 31) || e == 0)
        v *= e;
      else
        v = v > INT64_MAX / e ? INT64_MAX : v * e;
    }
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
  /// Number of positions (0 when empty; saturated at 2^63 - 1).
  HALOX_HD index_t size() const { return saturating_span(lo, hi); }
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

/// Box translated by `delta` per dimension (`delta` holds `a.nd` values).
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

} // namespace halox
