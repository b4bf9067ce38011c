#pragma once
// Internal window geometry of the reference operators.
//
// Every kernel works on exactly three spatial dimensions: a problem with fewer is padded at the
// front with extent-1 dimensions (kernel 1, stride 1, no padding), so one loop nest serves
// NCW, NCHW and NCDHW and the innermost spatial dimension is always index 2.

#include <halox/error.hpp>
#include <halox/ops/tensor_ref.hpp>
#include <halox/ops/window.hpp>

#include <string>
#include <vector>

namespace halox::ops::detail {

inline constexpr int s3 = 3; // spatial dimensions every kernel loops over
/// Below this many elementary steps a kernel runs on the calling thread: waking a team costs
/// more than it saves, and the distributed layer calls the kernels on many small boundary boxes.
inline constexpr index_t parallel_min_work = index_t(1) << 18;

/// Formats `[a, b, c]` for error messages.
std::string fmt(std::vector<index_t> const& v);
/// The same for a view's extents or strides.
std::string fmt(dims const& v);
/// Formats a spatial box `[lo, hi) x ...` for error messages.
std::string fmt(box const& b);

/// A box over the three padded spatial dimensions.
struct box3 {
  index_t lo[s3] = {0, 0, 0}; ///< first position per dimension
  index_t hi[s3] = {1, 1, 1}; ///< one past the last position

  /// Extent along `d` (0 when empty).
  [[nodiscard]] index_t extent(int d) const { return hi[d] > lo[d] ? hi[d] - lo[d] : 0; }
  /// Number of positions.
  [[nodiscard]] index_t volume() const { return extent(0) * extent(1) * extent(2); }
};

/// Resolved window geometry over the three padded spatial dimensions.
struct window3 {
  int nsp = 0;          ///< real spatial dimensions (1 to 3)
  index_t in[s3] = {};  ///< global input extent
  index_t out[s3] = {}; ///< global output extent
  index_t k[s3] = {};   ///< kernel size
  index_t s[s3] = {};   ///< stride
  index_t pl[s3] = {};  ///< padding before
  index_t ph[s3] = {};  ///< padding after
  index_t d[s3] = {};   ///< dilation

  /// Taps per window.
  [[nodiscard]] index_t kvol() const { return k[0] * k[1] * k[2]; }
  /// The whole output as a box.
  [[nodiscard]] box3 out_box() const;
  /// The whole input as a box.
  [[nodiscard]] box3 in_box() const;
};

/// Checks that a tensor rank is 3 to 5 (NC plus 1 to 3 spatial dims); returns the spatial count.
int spatial_dims(char const* op, char const* name, int rank);

/// Per-dimension parameter: empty gives `def`, one value is broadcast, otherwise one per
/// spatial dimension; each value must be >= `min`.
dims resolve(char const* op, char const* name, std::vector<index_t> const& v, int nsp, index_t def,
             index_t min);

/// Builds and validates a convolution window (kernel from the weight shape).
window3 conv_window(char const* op, dims const& in_extent, dims const& kernel,
                    conv_params const& p);
/// Builds and validates a pooling window.
window3 pool_window(char const* op, dims const& in_extent, pool_params const& p);

/// Output shape of a convolution, checking ranks, channels and parameters (errors name `op`).
std::vector<index_t> conv_shape(char const* op, dims const& x_shape, dims const& w_shape,
                                conv_params const& p);
/// Output shape of pooling, checking ranks and parameters.
std::vector<index_t> pool_shape(char const* op, dims const& x_shape, pool_params const& p);
/// Throws unless tensors `a` and `b` of operation `op` have the same shape.
void require_same(char const* op, char const* a, dims const& sa, char const* b, dims const& sb);
/// Throws unless views `a` and `b` of operation `op` have the same shape.
template <class A, class B> void require_same(char const* op, char const* a,
                                              tensor_ref<A> const& ta, char const* b,
                                              tensor_ref<B> const& tb) {
  require_same(op, a, ta.shape, b, tb.shape);
}
/// Throws unless `shape == expected`; `why` explains where the expectation comes from.
void require_shape(char const* op, char const* name, dims const& shape, dims const& expected,
                   std::string const& why);

/// A public spatial box (nd == nsp) padded to three dimensions; checks its rank.
box3 to_box3(char const* op, char const* name, box const& b, int nsp);
/// The spatial box `[0, shape[2 + i])` covering a whole NC... tensor.
inline box spatial_box(dims const& shape) {
  box b;
  b.nd = shape.size() > 2 ? static_cast<int>(shape.size()) - 2 : 0;
  for (int i = 0; i < b.nd; ++i) b.hi[i] = shape[2 + i];
  return b;
}
/// The spatial extents `shape[2:]` of an NC... shape.
inline dims spatial_extent(dims const& shape) {
  return shape.size() > 2 ? dims(shape.begin() + 2, shape.end()) : dims{};
}
/// Back to a public spatial box of `nsp` dimensions.
box from_box3(box3 const& b, int nsp);
/// Intersection.
box3 intersect3(box3 const& a, box3 const& b);

/// Input positions (clipped to the input) read by the outputs in `out`.
box3 input_footprint(window3 const& w, box3 const& out);
/// The same before clipping to the input (padding positions included).
box3 input_span(window3 const& w, box3 const& out);
/// Outputs (clipped to the output) whose windows touch the inputs in `in`.
box3 output_footprint(window3 const& w, box3 const& in);

/// Along spatial dimension `d`: the inputs the outputs [ob.lo, ob.hi) read, clipped to the
/// input ([lo, hi), empty when they read padding only), and how many padding positions their
/// windows cover below and above it (`pl`, `pr`): a provider's local problem for those outputs.
struct source_span {
  index_t lo = 0, hi = 0, pl = 0, pr = 0;
};
source_span source_geometry(window3 const& w, box3 const& ob, int d);

/// Divisor of the average window at output position `o`: its taps inside the padded input
/// (`include_pad`), or only the real ones.
index_t avg_divisor(window3 const& w, index_t const (&o)[s3], bool include_pad);

/// The local backward-data problem of a provider along spatial dimension `d`: the input
/// gradient over [in.lo, in.hi) as a transposed convolution of the output gradient over
/// [olo, ohi), which is the output footprint `ofp` extended with `ext_lo` zero outputs below
/// and some above where the strided windows need whole outputs, so that neither padding
/// (`pl`, `pr`, in input positions) is negative. `extended`: the footprint was extended.
struct backward_data_span {
  index_t olo = 0, ohi = 0, ext_lo = 0, pl = 0, pr = 0;
  bool extended = false;
};
backward_data_span backward_data_geometry(window3 const& w, box3 const& in, box3 const& ofp, int d);

/// Internal 3-D view of a block: NC plus three spatial dims, with the global origin.
template <class T> struct block3 {
  T* data = nullptr;         ///< element (0, 0, 0, 0, 0)
  index_t n = 0;             ///< batch extent
  index_t c = 0;             ///< channel extent
  index_t sn = 0;            ///< batch stride
  index_t sc = 0;            ///< channel stride
  index_t ext[s3] = {};      ///< spatial extents of the buffer
  index_t str[s3] = {};      ///< spatial strides
  index_t org[s3] = {};      ///< global position of the buffer's first spatial element
  bool zero_padding = false; ///< elements outside the global extent hold zero (block_ref)

  /// The global box the buffer covers.
  [[nodiscard]] box3 covers() const {
    box3 b;
    for (int d = 0; d < s3; ++d) {
      b.lo[d] = org[d];
      b.hi[d] = org[d] + ext[d];
    }
    return b;
  }
  /// Element offset of global spatial position `g` (must be covered) in plane (n, c).
  [[nodiscard]] index_t offset(index_t i, index_t ch, index_t g0, index_t g1, index_t g2) const {
    return i * sn + ch * sc + (g0 - org[0]) * str[0] + (g1 - org[1]) * str[1] +
           (g2 - org[2]) * str[2];
  }
};

/// Validates a block (rank `2 + nsp`, strides, non-negative extents, origin length) and views
/// it in three spatial dimensions.
template <class T>
block3<T> to_block3(char const* op, char const* name, block_ref<T> const& b, int nsp);

/// Throws unless the block covers every position of `need` (ignored when `need` is empty),
/// naming the block, the missing region and the fix.
template <class T> void require_covers(char const* op, char const* name, block3<T> const& b,
                                       box3 const& need, int nsp, char const* why);

/// Throws unless `b` lies in `[0, extent)` of the window's output (or input when `input`).
void require_inside(char const* op, char const* name, box3 const& b, window3 const& w, bool input);

/// Checks that a tensor_ref's strides match its shape and its extents are non-negative.
template <class T> void check_ref(char const* op, char const* name, tensor_ref<T> const& t);

} // namespace halox::ops::detail
