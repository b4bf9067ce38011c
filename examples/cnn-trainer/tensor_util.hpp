#pragma once
// Small helpers on the owned blocks of distributed buffers, shared by the layers and the
// network: copies between two layouts of the same blocks, element-wise visits with the global
// index of each element, and the per-phase time accounting.
#include <halox/ops/dist_common.hpp>
#include <halox/tensor_desc.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

namespace trainer {

/// Time of one step (or an epoch) per phase, in seconds, on the calling rank.
struct phase_times {
  double compute = 0;   ///< local kernels (dist ops' compute, FC, loss, copies, optimizer)
  double halo = 0;      ///< halo exchanges and output-gradient gathers of the dist ops
  double shuffle = 0;   ///< redistributions between strategies
  double allreduce = 0; ///< gradient and statistics all-reductions, the loss reduction
  /// The part of `compute` spent inside the layers: every layer's grid spans all the ranks, so
  /// this is the work that follows the ranks' shares of samples and space (--balance); the rest
  /// (data loading, the loss, copies between layers) does not.
  double split = 0;
  /// Adds `o` to these times.
  void add(phase_times const& o) {
    compute += o.compute;
    split += o.split;
    halo += o.halo;
    shuffle += o.shuffle;
    allreduce += o.allreduce;
  }
  /// Adds the times a dist op reported for its last call.
  void add(halox::ops::dist_timings const& t) {
    compute += t.compute;
    halo += t.start + t.wait;
    allreduce += t.reduce;
  }
};

/// Calls `f(offset_a, offset_b, global_index, n, stride_a, stride_b)` for every row of owned
/// elements of two buffers holding the same blocks (`a` and `b` may differ in halos and
/// strides; pass the same descriptor twice to visit one buffer), in row-major order: the row's
/// k-th element lies at `offset_a + k * stride_a` in a, `offset_b + k * stride_b` in b, and has
/// the global index `global_index + k`, row-major over the global shape. Offsets are in
/// elements from the buffers' first allocated cells.
template <class F>
void for_each_owned_run(halox::tensor_desc const& a, halox::tensor_desc const& b, F&& f) {
  halox::box const own = a.owned_box();
  if (own.empty()) return;
  int const nd = a.ndim();
  // Fixed arrays, not vectors: element-wise layers call this every step, allocation-free.
  halox::index_t oa[halox::max_dims] = {}, ob[halox::max_dims] = {}, i[halox::max_dims] = {};
  for (int d = 0; d < nd; ++d) {
    oa[d] = a.owned_offset_at(d);
    ob[d] = b.owned_offset_at(d);
  }
  auto const& sa = a.strides();
  auto const& sb = b.strides();
  auto const& shape = a.shape();
  halox::index_t const inner = own.extent(nd - 1);
  for (;;) {
    halox::index_t pa = 0, pb = 0, g = 0;
    for (int d = 0; d < nd; ++d) {
      pa += (oa[d] + i[d]) * sa[d];
      pb += (ob[d] + i[d]) * sb[d];
      g = g * shape[d] + own.lo[d] + i[d];
    }
    f(pa, pb, g, inner, sa[nd - 1], sb[nd - 1]);
    int d = nd - 2;
    for (; d >= 0; --d) {
      if (++i[d] < own.extent(d)) break;
      i[d] = 0;
    }
    if (d < 0) return;
  }
}

/// Calls `f(pa, pb, pc, n)` for each row of the owned block of three buffers holding the same
/// blocks in layouts `a`, `b` and `c` (halos and strides may differ): `n` consecutive elements
/// along the last dimension starting at element offsets pa, pb, pc. Where the last dimension is
/// not unit-stride in every layout the rows are split into single elements. Allocates nothing,
/// so element-wise layers call it every step; the row loops vectorise.
template <class F> void for_each_owned_row(halox::tensor_desc const& a, halox::tensor_desc const& b,
                                           halox::tensor_desc const& c, F&& f) {
  halox::box const own = a.owned_box();
  if (own.empty()) return;
  int const nd = a.ndim();
  halox::index_t const oa = a.owned_offset_elements(), ob = b.owned_offset_elements(),
                       oc = c.owned_offset_elements();
  auto const &sa = a.strides(), &sb = b.strides(), &sc = c.strides();
  bool const unit = sa[nd - 1] == 1 && sb[nd - 1] == 1 && sc[nd - 1] == 1;
  halox::index_t const inner = own.extent(nd - 1);
  halox::index_t i[halox::max_dims] = {};
  for (;;) {
    halox::index_t pa = oa, pb = ob, pc = oc;
    for (int d = 0; d < nd - 1; ++d) {
      pa += i[d] * sa[d];
      pb += i[d] * sb[d];
      pc += i[d] * sc[d];
    }
    if (unit)
      f(pa, pb, pc, inner);
    else
      for (halox::index_t k = 0; k < inner; ++k)
        f(pa + k * sa[nd - 1], pb + k * sb[nd - 1], pc + k * sc[nd - 1], halox::index_t{1});
    int d = nd - 2;
    for (; d >= 0; --d) {
      if (++i[d] < own.extent(d)) break;
      i[d] = 0;
    }
    if (d < 0) return;
  }
}

/// y = x on the owned block (layouts may differ).
template <class T>
void copy_owned(halox::tensor_desc const& xd, T const* x, halox::tensor_desc const& yd, T* y) {
  for_each_owned_row(xd, yd, yd,
                     [&](halox::index_t a, halox::index_t b, halox::index_t, halox::index_t n) {
                       T const* s = x + a;
                       T* d = y + b;
#pragma omp simd
                       for (halox::index_t k = 0; k < n; ++k) d[k] = s[k];
                     });
}

/// y += x on the owned block (layouts may differ).
template <class T>
void add_owned(halox::tensor_desc const& xd, T const* x, halox::tensor_desc const& yd, T* y) {
  for_each_owned_row(xd, yd, yd,
                     [&](halox::index_t a, halox::index_t b, halox::index_t, halox::index_t n) {
                       T const* s = x + a;
                       T* d = y + b;
#pragma omp simd
                       for (halox::index_t k = 0; k < n; ++k) d[k] += s[k];
                     });
}

/// Options for a tensor of `ndim` dimensions whose first dimension is split into as many parts
/// as `x`'s: `x`'s sample blocks, even or not (--balance), so data need not move between them.
inline std::vector<halox::dim_options> sample_blocks_of(halox::tensor_desc const& x,
                                                        std::size_t ndim) {
  std::vector<halox::dim_options> o(ndim);
  for (int p = 0; p < x.dist().parts()[0]; ++p) o[0].sizes.push_back(x.dist().part_size(0, p));
  return o;
}

/// True when `a` and `b` give every process of the same grid the same owned block (so data
/// moves between them by a local copy). Pure arithmetic, the same answer on every rank.
inline bool same_blocks(halox::tensor_desc const& a, halox::tensor_desc const& b) {
  if (a.shape() != b.shape() || a.grid().dims() != b.grid().dims()) return false;
  for (int r = 0; r < a.grid().size(); ++r) {
    halox::box const x = a.owned_box(r), y = b.owned_box(r);
    if (x.empty() && y.empty()) continue;
    for (int d = 0; d < x.nd; ++d)
      if (x.lo[d] != y.lo[d] || x.hi[d] != y.hi[d]) return false;
  }
  return true;
}

/// A 64-bit hash of (a, b, c, d), splitmix64's finaliser on a combination of the four, for many
/// d with a, b and c fixed: the part that depends on a, b and c only is done once.
class mixer {
public:
  mixer(std::uint64_t a, std::uint64_t b, std::uint64_t c)
      : z0_(a * 0x9E3779B97F4A7C15ULL ^ (b + 0x632BE59BD9B4E019ULL) * 0xBF58476D1CE4E5B9ULL ^
            (c + 0x85157AF5ULL) * 0x94D049BB133111EBULL) {}
  /// The hash of (a, b, c, d).
  std::uint64_t operator()(std::uint64_t d) const {
    std::uint64_t z = z0_ ^ (d + 0x1234567ULL) * 0xD6E8FEB86659FD93ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

private:
  std::uint64_t z0_;
};

/// A 64-bit mix of its inputs: the source of every random number the trainer draws, so that
/// values depend on global indices and the seed, never on the rank.
inline std::uint64_t mix(std::uint64_t a, std::uint64_t b = 0, std::uint64_t c = 0,
                         std::uint64_t d = 0) {
  return mixer(a, b, c)(d);
}

/// A uniform number in [0, 1) from a hash.
inline double uniform01(std::uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

/// The least h >> 11 for which uniform01(h) >= p, for p in [0, 1]: uniform01(h) >= p exactly
/// when (h >> 11) >= this, as h >> 11 and p * 2^53 are exact in double.
inline std::uint64_t uniform01_threshold(double p) {
  return static_cast<std::uint64_t>(std::ceil(p * 0x1.0p53));
}

/// Seconds since an arbitrary origin (MPI_Wtime).
double now();

} // namespace trainer
