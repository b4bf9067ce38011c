#pragma once
// Strided-region arithmetic shared by host and device code (internal). The public part, index_t
// and struct box, lives in <halox/box.hpp>.
//
// Everything here is plain data and inline functions so the CPU pack loops and the CUDA
// kernels walk exactly the same element order: a region is packed in row-major order of its
// box (last dimension fastest), whatever the strides of the buffer it lives in. That canonical
// order is what lets two ranks with different local layouts agree on message contents.

#include <halox/box.hpp>

namespace halox::detail {

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

} // namespace halox::detail
