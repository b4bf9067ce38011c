#include "ops/kernels/geometry.hpp"

#include <halox/error.hpp>
#include <halox/ops/window.hpp>

#include <algorithm>
#include <sstream>

namespace halox::ops {

namespace detail {
namespace {

constexpr auto bad = errc::invalid_argument;

// Floor and ceiling division for a positive divisor and any sign of numerator.
index_t floor_div(index_t a, index_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
index_t ceil_div(index_t a, index_t b) { return -floor_div(-a, b); }

std::string where(char const* op, int dim) {
  std::string s = op;
  if (dim >= 0) s += ", spatial dim " + std::to_string(dim);
  return s + ": ";
}

index_t extent_1d(char const* op, int dim, index_t in, index_t k, index_t s, index_t pl, index_t ph,
                  index_t d) {
  // Checked on every kernel call: the prefix becomes a string only for an error message.
  auto at = [op, dim] { return where(op, dim); };
  HALOX_REQUIRE(in >= 0, bad, at() + "input extent " + std::to_string(in) + " is negative");
  HALOX_REQUIRE(k >= 1, bad, at() + "kernel size " + std::to_string(k) + " must be >= 1");
  HALOX_REQUIRE(s >= 1, bad, at() + "stride " + std::to_string(s) + " must be >= 1");
  HALOX_REQUIRE(d >= 1, bad, at() + "dilation " + std::to_string(d) + " must be >= 1");
  HALOX_REQUIRE(pl >= 0 && ph >= 0, bad,
                at() + "padding (" + std::to_string(pl) + ", " + std::to_string(ph) +
                    ") must be >= 0");
  index_t eff = d * (k - 1) + 1;
  index_t padded = in + pl + ph;
  HALOX_REQUIRE(eff <= padded, bad,
                at() + "dilated kernel extent " + std::to_string(eff) + " (kernel " +
                    std::to_string(k) + ", dilation " + std::to_string(d) +
                    ") is larger than the padded input " + std::to_string(padded) + " (input " +
                    std::to_string(in) + " + padding " + std::to_string(pl) + " + " +
                    std::to_string(ph) + "); use a smaller kernel or dilation, or more padding");
  return (padded - eff) / s + 1;
}

// Every window along one dimension must hold at least one real input position, otherwise a
// max (or an average over real positions) is undefined.
void require_real_taps(char const* op, int dim, window3 const& w, int i) {
  for (index_t o = 0; o < w.out[i]; ++o) {
    bool any = false;
    for (index_t j = 0; j < w.k[i] && !any; ++j) {
      index_t g = o * w.s[i] - w.pl[i] + j * w.d[i];
      any = g >= 0 && g < w.in[i];
    }
    HALOX_REQUIRE(any, bad,
                  where(op, dim) + "output position " + std::to_string(o) +
                      " has a window made only of padding (padding " + std::to_string(w.pl[i]) +
                      ", " + std::to_string(w.ph[i]) + ", kernel " + std::to_string(w.k[i]) +
                      "); reduce the padding to at most half the kernel");
  }
}

} // namespace

std::string fmt(dims const& v) { return fmt(std::vector<index_t>(v)); }

std::string fmt(std::vector<index_t> const& v) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ']';
  return os.str();
}

std::string fmt(box const& b) {
  std::ostringstream os;
  for (int d = 0; d < b.nd; ++d) os << (d ? " x " : "") << '[' << b.lo[d] << ", " << b.hi[d] << ')';
  return b.nd == 0 ? "(rank-0 box)" : os.str();
}

box3 window3::out_box() const {
  box3 b;
  for (int d = 0; d < s3; ++d) b.hi[d] = out[d];
  return b;
}

box3 window3::in_box() const {
  box3 b;
  for (int d = 0; d < s3; ++d) b.hi[d] = in[d];
  return b;
}

int spatial_dims(char const* op, char const* name, int rank) {
  HALOX_REQUIRE(rank >= 3 && rank <= 5, bad,
                std::string(op) + ": " + name + " has rank " + std::to_string(rank) +
                    "; expected 3 to 5 (N, C and 1 to 3 spatial dimensions: NCW, NCHW, NCDHW)");
  return rank - 2;
}

dims resolve(char const* op, char const* name, std::vector<index_t> const& v, int nsp, index_t def,
             index_t min) {
  HALOX_REQUIRE(v.size() <= 1 || static_cast<int>(v.size()) == nsp, bad,
                std::string(op) + ": " + name + " " + fmt(v) + " has " + std::to_string(v.size()) +
                    " entries for " + std::to_string(nsp) +
                    " spatial dimensions; give none, one, or one per spatial dimension");
  dims r;
  if (v.empty())
    r.assign(static_cast<std::size_t>(nsp), def);
  else if (v.size() == 1)
    r.assign(static_cast<std::size_t>(nsp), v[0]);
  else
    r.assign(v.begin(), v.end());
  for (index_t x : r)
    HALOX_REQUIRE(x >= min, bad,
                  std::string(op) + ": " + name + " " + fmt(v) + " has value " + std::to_string(x) +
                      "; every entry must be >= " + std::to_string(min));
  return r;
}

namespace {
window3 make_window(char const* op, dims const& in_extent, dims const& k, dims const& s,
                    dims const& pl, dims const& ph, dims const& d) {
  window3 w;
  w.nsp = static_cast<int>(in_extent.size());
  int off = s3 - w.nsp;
  for (int i = 0; i < s3; ++i) {
    w.in[i] = w.out[i] = w.k[i] = w.s[i] = w.d[i] = 1;
    w.pl[i] = w.ph[i] = 0;
  }
  for (int i = 0; i < w.nsp; ++i) {
    int j = off + i;
    w.in[j] = in_extent[i];
    w.k[j] = k[i];
    w.s[j] = s[i];
    w.pl[j] = pl[i];
    w.ph[j] = ph[i];
    w.d[j] = d[i];
    w.out[j] = extent_1d(op, i, w.in[j], w.k[j], w.s[j], w.pl[j], w.ph[j], w.d[j]);
  }
  return w;
}
} // namespace

window3 conv_window(char const* op, dims const& in_extent, dims const& kernel,
                    conv_params const& p) {
  int nsp = static_cast<int>(in_extent.size());
  HALOX_REQUIRE(nsp >= 1 && nsp <= 3, bad,
                std::string(op) + ": input extent " + fmt(in_extent) +
                    " must have 1 to 3 spatial dimensions");
  HALOX_REQUIRE(kernel.size() == in_extent.size(), bad,
                std::string(op) + ": kernel " + fmt(kernel) + " has " +
                    std::to_string(kernel.size()) + " spatial dimensions but the input " +
                    fmt(in_extent) + " has " + std::to_string(nsp));
  return make_window(op, in_extent, kernel, resolve(op, "stride", p.stride, nsp, 1, 1),
                     resolve(op, "pad_lo", p.pad_lo, nsp, 0, 0),
                     resolve(op, "pad_hi", p.pad_hi, nsp, 0, 0),
                     resolve(op, "dilation", p.dilation, nsp, 1, 1));
}

window3 pool_window(char const* op, dims const& in_extent, pool_params const& p) {
  int nsp = static_cast<int>(in_extent.size());
  HALOX_REQUIRE(nsp >= 1 && nsp <= 3, bad,
                std::string(op) + ": input extent " + fmt(in_extent) +
                    " must have 1 to 3 spatial dimensions");
  HALOX_REQUIRE(!p.kernel.empty(), bad,
                std::string(op) + ": pool_params::kernel is empty; give the window size");
  auto k = resolve(op, "kernel", p.kernel, nsp, 1, 1);
  window3 w = make_window(
      op, in_extent, k, p.stride.empty() ? k : resolve(op, "stride", p.stride, nsp, 1, 1),
      resolve(op, "pad_lo", p.pad_lo, nsp, 0, 0), resolve(op, "pad_hi", p.pad_hi, nsp, 0, 0),
      resolve(op, "dilation", p.dilation, nsp, 1, 1));
  if (p.kind == pool_kind::max || !p.count_include_pad)
    for (int i = 0; i < nsp; ++i) require_real_taps(op, i, w, s3 - nsp + i);
  return w;
}

box3 to_box3(char const* op, char const* name, box const& b, int nsp) {
  HALOX_REQUIRE(b.nd == nsp, bad,
                std::string(op) + ": " + name + " has " + std::to_string(b.nd) +
                    " dimensions; expected one per spatial dimension (" + std::to_string(nsp) +
                    ")");
  box3 r;
  for (int i = 0; i < nsp; ++i) {
    r.lo[s3 - nsp + i] = b.lo[i];
    r.hi[s3 - nsp + i] = std::max(b.lo[i], b.hi[i]);
  }
  return r;
}

box from_box3(box3 const& b, int nsp) {
  box r;
  r.nd = nsp;
  for (int i = 0; i < nsp; ++i) {
    r.lo[i] = b.lo[s3 - nsp + i];
    r.hi[i] = b.hi[s3 - nsp + i];
  }
  return r;
}

box3 intersect3(box3 const& a, box3 const& b) {
  box3 r;
  for (int d = 0; d < s3; ++d) {
    r.lo[d] = std::max(a.lo[d], b.lo[d]);
    r.hi[d] = std::max(r.lo[d], std::min(a.hi[d], b.hi[d]));
  }
  return r;
}

namespace {
// Empty boxes come back as [0, 0) in every dimension, whatever the arithmetic produced.
box3 canonical(box3 const& b) {
  if (b.volume() != 0) return b;
  box3 r;
  for (int d = 0; d < s3; ++d) r.lo[d] = r.hi[d] = 0;
  return r;
}
} // namespace

box3 input_span(window3 const& w, box3 const& out) {
  box3 r;
  if (out.volume() == 0) {
    for (int d = 0; d < s3; ++d) r.lo[d] = r.hi[d] = 0;
    return r;
  }
  for (int d = 0; d < s3; ++d) {
    r.lo[d] = out.lo[d] * w.s[d] - w.pl[d];
    r.hi[d] = (out.hi[d] - 1) * w.s[d] - w.pl[d] + (w.k[d] - 1) * w.d[d] + 1;
  }
  return r;
}

box3 input_footprint(window3 const& w, box3 const& out) {
  if (out.volume() == 0) return input_span(w, out);
  return canonical(intersect3(input_span(w, out), w.in_box()));
}

box3 output_footprint(window3 const& w, box3 const& in) {
  box3 r;
  if (in.volume() == 0) {
    for (int d = 0; d < s3; ++d) r.lo[d] = r.hi[d] = 0;
    return r;
  }
  for (int d = 0; d < s3; ++d) {
    r.lo[d] = ceil_div(in.lo[d] + w.pl[d] - (w.k[d] - 1) * w.d[d], w.s[d]);
    r.hi[d] = floor_div(in.hi[d] - 1 + w.pl[d], w.s[d]) + 1;
  }
  return canonical(intersect3(r, w.out_box()));
}

// Divisor of an average window: taps inside the padded input, or only the real ones.
index_t avg_divisor(window3 const& w, index_t const (&o)[s3], bool include_pad) {
  index_t n = 1;
  for (int d = 0; d < s3; ++d) {
    index_t lo = include_pad ? -w.pl[d] : 0, hi = include_pad ? w.in[d] + w.ph[d] : w.in[d];
    index_t c = 0;
    for (index_t k = 0; k < w.k[d]; ++k) {
      index_t g = o[d] * w.s[d] - w.pl[d] + k * w.d[d];
      c += (g >= lo && g < hi) ? 1 : 0;
    }
    n *= c;
  }
  return n;
}

source_span source_geometry(window3 const& w, box3 const& ob, int d) {
  index_t const span = (w.k[d] - 1) * w.d[d] + 1;
  index_t const g0 = ob.lo[d] * w.s[d] - w.pl[d];
  index_t const g1 = (ob.hi[d] - 1) * w.s[d] - w.pl[d] + span;
  source_span r;
  r.lo = std::max<index_t>(g0, 0);
  r.hi = std::min(g1, w.in[d]);
  r.pl = r.lo - g0;
  r.pr = g1 - r.hi;
  return r;
}

backward_data_span backward_data_geometry(window3 const& w, box3 const& in, box3 const& ofp,
                                          int d) {
  backward_data_span r;
  index_t const s = w.s[d], span = (w.k[d] - 1) * w.d[d] + 1, len = in.extent(d);
  r.olo = ofp.lo[d];
  r.ohi = ofp.hi[d];
  r.pl = in.lo[d] - (r.olo * s - w.pl[d]);
  if (r.pl < 0) { // outputs below the footprint whose windows start above in.lo
    r.ext_lo = (-r.pl + s - 1) / s;
    r.olo -= r.ext_lo;
    r.pl += r.ext_lo * s;
  }
  r.pr = (r.ohi - r.olo - 1) * s + span - len - r.pl;
  if (r.pr < 0) { // and above it, until the last window reaches past in.hi
    index_t const m = (-r.pr + s - 1) / s;
    r.ohi += m;
    r.pr += m * s;
    r.extended = true;
  }
  r.extended = r.extended || r.ext_lo > 0;
  return r;
}

void require_inside(char const* op, char const* name, box3 const& b, window3 const& w, bool input) {
  box3 all = input ? w.in_box() : w.out_box();
  bool ok = true;
  for (int d = 0; d < s3; ++d) ok = ok && b.lo[d] >= 0 && b.hi[d] <= all.hi[d];
  HALOX_REQUIRE(ok || b.volume() == 0, bad,
                std::string(op) + ": " + name + " " + fmt(from_box3(b, w.nsp)) +
                    " is not inside the global " + (input ? "input " : "output ") +
                    fmt(from_box3(all, w.nsp)) + "; clip it to that extent");
}

template <class T> void check_ref(char const* op, char const* name, tensor_ref<T> const& t) {
  HALOX_REQUIRE(t.strides.size() == t.shape.size(), bad,
                std::string(op) + ": " + name + " has shape " + fmt(t.shape) + " but strides " +
                    fmt(t.strides) + "; give one stride per dimension");
  for (index_t e : t.shape)
    HALOX_REQUIRE(e >= 0, bad,
                  std::string(op) + ": " + name + " has a negative extent in " + fmt(t.shape));
  HALOX_REQUIRE(t.data != nullptr || t.size() == 0, bad,
                std::string(op) + ": " + name + " has shape " + fmt(t.shape) +
                    " but a null data pointer");
}

template <class T>
block3<T> to_block3(char const* op, char const* name, block_ref<T> const& b, int nsp) {
  check_ref(op, name, b.ref);
  HALOX_REQUIRE(b.ref.rank() == 2 + nsp, bad,
                std::string(op) + ": " + name + " has shape " + fmt(b.ref.shape) +
                    "; expected rank " + std::to_string(2 + nsp) + " (N, C and " +
                    std::to_string(nsp) + " spatial dimensions)");
  HALOX_REQUIRE(b.origin.empty() || static_cast<int>(b.origin.size()) == nsp, bad,
                std::string(op) + ": " + name + " origin " + fmt(b.origin) + " has " +
                    std::to_string(b.origin.size()) + " entries; give one per spatial dimension (" +
                    std::to_string(nsp) + ") or none");
  block3<T> r;
  r.data = b.ref.data;
  r.n = b.ref.shape[0];
  r.c = b.ref.shape[1];
  r.sn = b.ref.strides[0];
  r.sc = b.ref.strides[1];
  r.zero_padding = b.zero_padding;
  for (int d = 0; d < s3; ++d) {
    r.ext[d] = 1;
    r.str[d] = 0;
    r.org[d] = 0;
  }
  for (int i = 0; i < nsp; ++i) {
    int d = s3 - nsp + i;
    r.ext[d] = b.ref.shape[2 + i];
    r.str[d] = b.ref.strides[2 + i];
    r.org[d] = b.origin.empty() ? 0 : b.origin[i];
  }
  return r;
}

template <class T> void require_covers(char const* op, char const* name, block3<T> const& b,
                                       box3 const& need, int nsp, char const* why) {
  if (need.volume() == 0) return;
  box3 have = b.covers();
  bool ok = true;
  for (int d = 0; d < s3; ++d) ok = ok && have.lo[d] <= need.lo[d] && need.hi[d] <= have.hi[d];
  HALOX_REQUIRE(ok, bad,
                std::string(op) + ": " + name + " covers global " + fmt(from_box3(have, nsp)) +
                    " but " + why + " needs " + fmt(from_box3(need, nsp)) +
                    "; enlarge the block (halo) or shift its origin");
}

template void check_ref(char const*, char const*, tensor_ref<float> const&);
template void check_ref(char const*, char const*, tensor_ref<double> const&);
template void check_ref(char const*, char const*, tensor_ref<float const> const&);
template void check_ref(char const*, char const*, tensor_ref<double const> const&);
template block3<float> to_block3(char const*, char const*, block_ref<float> const&, int);
template block3<double> to_block3(char const*, char const*, block_ref<double> const&, int);
template block3<float const> to_block3(char const*, char const*, block_ref<float const> const&,
                                       int);
template block3<double const> to_block3(char const*, char const*, block_ref<double const> const&,
                                        int);
template void require_covers(char const*, char const*, block3<float> const&, box3 const&, int,
                             char const*);
template void require_covers(char const*, char const*, block3<double> const&, box3 const&, int,
                             char const*);
template void require_covers(char const*, char const*, block3<float const> const&, box3 const&, int,
                             char const*);
template void require_covers(char const*, char const*, block3<double const> const&, box3 const&,
                             int, char const*);

} // namespace detail

// ---- public shape helpers -----------------------------------------------------------------------

index_t conv_output_extent(index_t in, index_t kernel, index_t stride, index_t pad_lo,
                           index_t pad_hi, index_t dilation) {
  return detail::extent_1d("conv_output_extent", -1, in, kernel, stride, pad_lo, pad_hi, dilation);
}

namespace detail {
std::vector<index_t> conv_shape(char const* op, dims const& x_shape, dims const& w_shape,
                                conv_params const& p) {
  int nsp = spatial_dims(op, "x", static_cast<int>(x_shape.size()));
  HALOX_REQUIRE(w_shape.size() == x_shape.size(), bad,
                std::string(op) + ": w has shape " + fmt(w_shape) + " but x has shape " +
                    fmt(x_shape) + "; w must be [Cout, Cin, k...] with " + std::to_string(nsp) +
                    " kernel extents");
  HALOX_REQUIRE(w_shape[1] == x_shape[1], bad,
                std::string(op) + ": x " + fmt(x_shape) + " has " + std::to_string(x_shape[1]) +
                    " channels but w " + fmt(w_shape) + " expects " + std::to_string(w_shape[1]) +
                    "; w must be [Cout, " + std::to_string(x_shape[1]) + ", k...]");
  std::vector<index_t> in(x_shape.begin() + 2, x_shape.end());
  std::vector<index_t> k(w_shape.begin() + 2, w_shape.end());
  window3 w = conv_window(op, in, k, p);
  std::vector<index_t> out{x_shape[0], w_shape[0]};
  for (int i = 0; i < nsp; ++i) out.push_back(w.out[s3 - nsp + i]);
  return out;
}

std::vector<index_t> pool_shape(char const* op, dims const& x_shape, pool_params const& p) {
  int nsp = spatial_dims(op, "x", static_cast<int>(x_shape.size()));
  std::vector<index_t> in(x_shape.begin() + 2, x_shape.end());
  window3 w = pool_window(op, in, p);
  std::vector<index_t> out{x_shape[0], x_shape[1]};
  for (int i = 0; i < nsp; ++i) out.push_back(w.out[s3 - nsp + i]);
  return out;
}

void require_same(char const* op, char const* a, dims const& sa, char const* b, dims const& sb) {
  HALOX_REQUIRE(sa == sb, bad,
                std::string(op) + ": " + a + " has shape " + fmt(sa) + " but " + b + " has shape " +
                    fmt(sb) + "; they must match");
}

void require_shape(char const* op, char const* name, dims const& shape, dims const& expected,
                   std::string const& why) {
  HALOX_REQUIRE(shape == expected, bad,
                std::string(op) + ": " + name + " has shape " + fmt(shape) + "; expected " +
                    fmt(expected) + " " + why);
}
} // namespace detail

std::vector<index_t> conv_output_shape(dims const& x_shape, dims const& w_shape,
                                       conv_params const& p) {
  return detail::conv_shape("conv_output_shape", x_shape, w_shape, p);
}

std::vector<index_t> pool_output_shape(dims const& x_shape, pool_params const& p) {
  return detail::pool_shape("pool_output_shape", x_shape, p);
}

box conv_input_footprint(box const& out_box, dims const& in_extent, dims const& kernel,
                         conv_params const& p) {
  char const* op = "conv_input_footprint";
  detail::window3 w = detail::conv_window(op, in_extent, kernel, p);
  return detail::from_box3(
      detail::input_footprint(w, detail::to_box3(op, "out_box", out_box, w.nsp)), w.nsp);
}

box conv_input_span(box const& out_box, dims const& in_extent, dims const& kernel,
                    conv_params const& p) {
  char const* op = "conv_input_span";
  detail::window3 w = detail::conv_window(op, in_extent, kernel, p);
  return detail::from_box3(detail::input_span(w, detail::to_box3(op, "out_box", out_box, w.nsp)),
                           w.nsp);
}

box conv_output_footprint(box const& in_box, dims const& in_extent, dims const& kernel,
                          conv_params const& p) {
  char const* op = "conv_output_footprint";
  detail::window3 w = detail::conv_window(op, in_extent, kernel, p);
  return detail::from_box3(
      detail::output_footprint(w, detail::to_box3(op, "in_box", in_box, w.nsp)), w.nsp);
}

box pool_input_footprint(box const& out_box, dims const& in_extent, pool_params const& p) {
  char const* op = "pool_input_footprint";
  detail::window3 w = detail::pool_window(op, in_extent, p);
  return detail::from_box3(
      detail::input_footprint(w, detail::to_box3(op, "out_box", out_box, w.nsp)), w.nsp);
}

box pool_input_span(box const& out_box, dims const& in_extent, pool_params const& p) {
  char const* op = "pool_input_span";
  detail::window3 w = detail::pool_window(op, in_extent, p);
  return detail::from_box3(detail::input_span(w, detail::to_box3(op, "out_box", out_box, w.nsp)),
                           w.nsp);
}

box pool_output_footprint(box const& in_box, dims const& in_extent, pool_params const& p) {
  char const* op = "pool_output_footprint";
  detail::window3 w = detail::pool_window(op, in_extent, p);
  return detail::from_box3(
      detail::output_footprint(w, detail::to_box3(op, "in_box", in_box, w.nsp)), w.nsp);
}

} // namespace halox::ops
