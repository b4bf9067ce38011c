#include "ops/dist/dist_window.hpp"
#include "ops/providers/memory.hpp"

#include <halox/collective.hpp>
#include <halox/error.hpp>

#include <algorithm>
#include <sstream>

namespace halox::ops::detail {

namespace {

constexpr auto bad = errc::invalid_argument;

std::vector<index_t> starts_of(distribution const& d, int dim) {
  std::vector<index_t> s;
  for (int p = 0; p <= d.parts()[dim]; ++p)
    s.push_back(p < d.parts()[dim] ? d.part_start(dim, p) : d.shape()[dim]);
  return s;
}

std::vector<index_t> sizes_of(std::vector<index_t> const& starts) {
  std::vector<index_t> s;
  for (std::size_t p = 0; p + 1 < starts.size(); ++p) s.push_back(starts[p + 1] - starts[p]);
  return s;
}

void validate(std::string const& what, tensor_desc const& x) {
  int const nd = x.ndim();
  HALOX_REQUIRE(nd >= 3 && nd <= 5, bad,
                what + ": the input " + x.dist().str() + " has rank " + std::to_string(nd) +
                    "; expected NCW, NCHW or NCDHW (rank 3 to 5)");
  HALOX_REQUIRE(x.dist().parts()[1] == 1, bad,
                what + ": the input " + x.dist().str() + " splits the channels over " +
                    std::to_string(x.dist().parts()[1]) +
                    " processes; distributed operators split N and the spatial dimensions only, "
                    "build the grid with extent 1 along dimension 1");
  HALOX_REQUIRE(x.type() == dtype::float32 || x.type() == dtype::float64, bad,
                what + ": the input has dtype " + to_string(x.type()) +
                    "; the operators exist for float32 and float64");
  for (int d = 0; d < nd; ++d)
    HALOX_REQUIRE(!x.dist().options(d).periodic, bad,
                  what + ": dimension " + std::to_string(d) +
                      " of the input is periodic; the operators pad with zeros at the global "
                      "boundary. Describe a circular padding as part of the input instead");
}

// The replicated parameters as "name=value; ..." for mismatch errors that say what differs.
// `v` as a stream prints it (0.75, not 0.750000).
std::string number_text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string params_text(std::vector<win1> const& win, index_t cout, boundary_fill f,
                        dist_options const& o) {
  std::string t;
  for (std::size_t i = 0; i < win.size(); ++i) {
    auto const& w = win[i];
    std::string const d = " of spatial dim " + std::to_string(i) + "=";
    t += "kernel" + d + std::to_string(w.k) + "; stride" + d + std::to_string(w.s) + "; padding" +
         d + std::to_string(w.pl) + "," + std::to_string(w.ph) + "; dilation" + d +
         std::to_string(w.dil) + "; output extent" + d + std::to_string(w.out) + "; ";
  }
  t += "output channels=" + std::to_string(cout) +
       "; boundary=" + (f == boundary_fill::constant ? "constant" : "untouched") +
       "; overlap=" + (o.overlap ? "on" : "off") +
       "; overlap_min_interior=" + number_text(o.overlap_min_interior) +
       "; overlap_trials=" + std::to_string(o.overlap_trials) + "; backend=" + to_string(o.method) +
       "; provider=" + to_string(o.provider);
  return t;
}

std::uint64_t params_hash(std::vector<win1> const& win, index_t cout, bool xb, boundary_fill f,
                          dist_options const& o) {
  std::uint64_t h = 0x9e3779b97f4a7c15ull;
  auto mix = [&](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (auto const& w : win)
    for (index_t v : {w.in, w.out, w.k, w.s, w.pl, w.ph, w.dil}) mix(static_cast<std::uint64_t>(v));
  mix(static_cast<std::uint64_t>(cout));
  mix(xb ? 1 : 0);
  mix(static_cast<std::uint64_t>(f));
  mix(o.overlap ? 1 : 0);
  mix(static_cast<std::uint64_t>(o.overlap_min_interior * 1e6));
  mix(static_cast<std::uint64_t>(o.overlap_trials));
  mix(static_cast<std::uint64_t>(o.method));
  mix(static_cast<std::uint64_t>(o.provider));
  return h;
}

} // namespace

memory_space check_provider(std::string const& what, dist_options const& o, dtype t) {
  HALOX_REQUIRE(o.threads >= 0, bad,
                what + ": dist_options::threads = " + std::to_string(o.threads) +
                    " is negative; pass 0 (default_threads()) or a positive count");
  compute_provider p = compute_provider::reference;
  try {
    p = resolve_provider(o.provider, t);
  } catch (error const& e) { // say which layer asked
    ::halox::detail::throw_error(e.code(), what + ": " + e.message(), "check_provider", __FILE__,
                                 __LINE__);
  }
  memory_space const m = provider_memory(p);
  if (m == memory_space::host) return m;
  std::string why;
  HALOX_REQUIRE(device_usable(why), bad,
                what + ": provider " + to_string(p) + " computes on device memory, but " + why +
                    "; run on a GPU node or choose provider automatic, reference or onednn");
  bool found = o.method == backend::automatic;
  for (backend b : device_backends()) found = found || b == o.method;
  HALOX_REQUIRE(
      found, bad,
      what + ": provider " + to_string(p) +
          " computes on device memory, but dist_options::method = " + to_string(o.method) +
          " moves host memory; set method to staged_mpi (any MPI), cuda_aware_mpi "
          "(a CUDA-aware MPI), nccl or automatic");
  return m;
}

window_layer::window_layer(char const* what, tensor_desc const& x, std::vector<win1> w,
                           index_t out_channels, bool x_for_backward, boundary_fill fill,
                           dist_options const& o)
    : name(what), win(std::move(w)), opt(o) {
  // Every rank validates the same replicated description; the check makes a rank that was
  // given different parameters fail everywhere instead of hanging in the first exchange.
  check_collectively(
      x.grid().comm(), name,
      [&] {
        validate(name, x);
        double const share = opt.overlap_min_interior;
        HALOX_REQUIRE(share >= 0 && share <= 1, bad, // false for NaN too
                      name + ": dist_options::overlap_min_interior = " + number_text(share) +
                          "; use a share of the block in [0, 1] (0: always split off the "
                          "interior)");
        check_overlap_trials(name, opt);
        mem = check_provider(name, opt, x.type());
      },
      [&] { return params_hash(win, out_channels, x_for_backward, fill, opt); },
      [&] { return params_text(win, out_channels, fill, opt); });
  distribution const& xd = x.dist();
  int const nd = xd.ndim(), nsp = nd - 2;
  HALOX_REQUIRE(static_cast<int>(win.size()) == nsp, errc::internal,
                name + ": window count differs from the spatial rank");

  std::vector<dim_options> in_opt(static_cast<std::size_t>(nd)), out_opt(in_opt);
  in_opt[0].sizes = sizes_of(starts_of(xd, 0));
  out_opt[0].sizes = in_opt[0].sizes;
  halo_lo.assign(static_cast<std::size_t>(nd), 0);
  halo_hi.assign(static_cast<std::size_t>(nd), 0);
  // Per-part ranges per dimension: owned input, owned output, and the dy each part needs.
  std::vector<std::vector<range1>> need_r(static_cast<std::size_t>(nd));
  std::vector<std::vector<range1>> in_r(static_cast<std::size_t>(nd)), out_r(in_r);
  in_r[0] = out_r[0] = need_r[0] = ranges_of(starts_of(xd, 0));
  in_r[1] = {{0, xd.shape()[1]}};
  out_r[1] = need_r[1] = {{0, out_channels}};
  std::vector<index_t> out_shape{xd.shape()[0], out_channels};
  for (int i = 0; i < nsp; ++i) {
    int const d = 2 + i;
    win1 const& g = win[i];
    auto const in_starts = starts_of(xd, d);
    auto const out_starts = output_starts(g, in_starts);
    in_r[d] = ranges_of(in_starts);
    out_r[d] = ranges_of(out_starts);
    std::vector<range1> fwd, xbwd;
    for (std::size_t p = 0; p < in_r[d].size(); ++p) {
      fwd.push_back(input_footprint(g, out_r[d][p]));
      need_r[d].push_back(output_footprint(g, in_r[d][p]));
      xbwd.push_back(input_footprint(g, need_r[d].back()));
    }
    halo1 h = halo_for(in_r[d], fwd);
    if (x_for_backward) {
      halo1 const hb = halo_for(in_r[d], xbwd);
      h.lo = std::max(h.lo, hb.lo);
      h.hi = std::max(h.hi, hb.hi);
    }
    halo_lo[d] = static_cast<int>(h.lo);
    halo_hi[d] = static_cast<int>(h.hi);
    in_opt[d].halo_lo = halo_lo[d];
    in_opt[d].halo_hi = halo_hi[d];
    in_opt[d].sizes = sizes_of(in_starts);
    out_opt[d].sizes = sizes_of(out_starts);
    out_shape.push_back(g.out);
    in_ext.push_back(g.in);
  }
  in.emplace(x.grid(), xd.shape(), xd.type(), in_opt);
  out.emplace(x.grid(), out_shape, xd.type(), out_opt);
  // From the ranges of every part, so every rank finds the same and skips the gather alike.
  dy_local = true;
  for (int d = 2; d < nd; ++d)
    for (std::size_t p = 0; p < need_r[static_cast<std::size_t>(d)].size(); ++p) {
      range1 const& n = need_r[static_cast<std::size_t>(d)][p];
      range1 const& o = out_r[static_cast<std::size_t>(d)][p];
      if (!n.empty() && (n.lo < o.lo || n.hi > o.hi)) dy_local = false;
    }

  halo_options ho;
  ho.method = opt.method;
  ho.memory = mem;
  ho.boundary = fill;
  ho.fill_value = 0.0;
  ho.tune = opt.tune;
  halo = std::make_unique<halo_plan>(*in, ho);

  auto const c = xd.coords_of(x.grid().rank());
  std::vector<range1> ri, ro, fi, bi;
  for (int i = 0; i < nsp; ++i) {
    int const d = 2 + i;
    ri.push_back(in_r[d][c[d]]);
    ro.push_back(out_r[d][c[d]]);
    fi.push_back(forward_interior(win[i], ro.back(), ri.back()));
    bi.push_back(backward_interior(win[i], ri.back(), ro.back()));
  }
  in_own = make_box(ri);
  out_own = make_box(ro);
  fwd_interior = make_box(fi);
  bwd_interior = make_box(bi);
  if (in_r[0][c[0]].empty()) // no samples: nothing to compute at all
    in_own = out_own = fwd_interior = bwd_interior = make_box(std::vector<range1>(nsp));
  // An interior too small to be worth its boundary boxes' calls: the whole block is one
  // boundary box, computed after the exchange.
  auto const small = [&](box const& interior, box const& own) {
    return static_cast<double>(interior.volume()) <
           opt.overlap_min_interior * static_cast<double>(own.volume());
  };
  if (small(fwd_interior, out_own)) fwd_interior = make_box(std::vector<range1>(nsp));
  if (small(bwd_interior, in_own)) bwd_interior = make_box(std::vector<range1>(nsp));
  fwd_boundary = boundary_boxes(out_own, fwd_interior);
  bwd_boundary = boundary_boxes(in_own, bwd_interior);

  // With overlap, the interior of dx reads the caller's dy in place; only the dy under the
  // boundary boxes' windows is read from the workspace, so only that much of the rank's own
  // dy is copied there (nothing at all on one rank).
  std::vector<box> self;
  for (box const& b : bwd_boundary) {
    std::vector<range1> r{in_r[0][c[0]], {0, out_channels}};
    for (int i = 0; i < nsp; ++i) r.push_back(output_footprint(win[i], {b.lo[i], b.hi[i]}));
    self.push_back(make_box(r));
  }
  box_gather_options go;
  go.method = opt.method;
  go.memory = mem;
  go.tune = opt.tune;
  if (measures_overlap(opt, x.grid().comm())) { // the same on every rank
    fwd_tune = overlap_tuner(opt.overlap_trials);
    bwd_tune = overlap_tuner(opt.overlap_trials);
    tune_comm = dup_comm(x.grid().comm());
    gather_whole = std::make_unique<box_gather_plan>(*out, need_r, go);
  }
  if (opt.overlap) go.own_copy_boxes = std::move(self);
  gather = std::make_unique<box_gather_plan>(*out, need_r, go);
  fwd_polls = progress_pieces(opt, halo->bytes_sent() + halo->bytes_received(), halo->num_peers());
  bwd_polls =
      progress_pieces(opt, gather->bytes_sent() + gather->bytes_received(), halo->num_peers());
}

std::string window_layer::describe() const {
  std::ostringstream os;
  os << name << " on rank " << in->grid().rank() << "\n  input  " << in->dist().str()
     << "\n  output " << out->dist().str() << "\n  owned input " << box_str(in_own)
     << ", owned output " << box_str(out_own) << "\n  forward: interior " << box_str(fwd_interior)
     << " + " << fwd_boundary.size() << " boundary box(es); " << halo->describe()
     << "\n  backward: interior " << box_str(bwd_interior) << " + " << bwd_boundary.size()
     << " boundary box(es); dy " << gather->describe() << "\n";
  if (gather_whole)
    os << "  overlap measured: forward " << fwd_tune.describe() << "; backward "
       << bwd_tune.describe() << "\n";
  return os.str();
}

std::string overlap_tuner::describe() const {
  if (trials_ == 0) return "split (not measured)";
  if (chosen_ < 0)
    return "measuring (" + std::to_string(calls_) + " of " + std::to_string(2 + 2 * trials_) +
           " calls)";
  std::ostringstream os;
  os << (chosen_ == 1 ? "split" : "whole") << " (fastest calls summed over ranks: split "
     << best_[1] * 1e3 << " ms, whole " << best_[0] * 1e3 << " ms)";
  return os.str();
}

void sum_over(MPI_Comm comm, double (&v)[2]) {
  HALOX_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_SUM, comm));
}

bool measures_overlap(dist_options const& o, MPI_Comm comm) {
  int size = 1;
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  return o.overlap && o.overlap_trials > 0 && size > 1;
}

void check_overlap_trials(std::string const& what, dist_options const& o) {
  HALOX_REQUIRE(o.overlap_trials >= 0 && o.overlap_trials <= 1000, bad,
                what + ": dist_options::overlap_trials = " + std::to_string(o.overlap_trials) +
                    "; use 0 (no measuring) to 1000 timed calls per mode");
}

void check_partition(tensor_view const& v, tensor_desc const& expected, char const* what_) {
  // Checked on every execution: the name becomes a string only for an error message.
  auto what = [what_] { return std::string(what_); };
  HALOX_REQUIRE(v.desc != nullptr, bad,
                what() + " has no descriptor; build it as tensor_view(desc, data, bytes)");
  distribution const &a = v.desc->dist(), &b = expected.dist();
  bool same = a.shape() == b.shape() && a.type() == b.type() && a.parts() == b.parts();
  for (int d = 0; same && d < a.ndim(); ++d)
    for (int p = 0; same && p < a.parts()[d]; ++p) same = a.part_start(d, p) == b.part_start(d, p);
  HALOX_REQUIRE(same, bad,
                what() + " is described as " + a.str() + " but the operator works on " + b.str() +
                    " (same shape, dtype and blocks needed; halos and strides may differ): "
                    "allocate it from the operator's descriptor");
  std::size_t const need = v.desc->local_bytes();
  HALOX_REQUIRE(v.bytes >= need, bad,
                what() + " holds " + std::to_string(v.bytes) + " bytes but its descriptor needs " +
                    std::to_string(need) + " on this rank");
  HALOX_REQUIRE(need == 0 || v.data != nullptr, bad, what() + " is a null pointer");
}

namespace {
// The dimension split_box cuts (b.nd when none can be cut).
int cut_dim(box const& b) {
  int d = 0;
  while (d < b.nd && b.extent(d) <= 1) ++d;
  return d;
}
} // namespace

int slab_count(box const& b, int n) {
  int const d = cut_dim(b);
  if (n <= 1 || d == b.nd || b.empty()) return 1;
  return static_cast<int>(std::min<index_t>(n, b.extent(d)));
}

box slab(box const& b, int n, int i) {
  int const parts = slab_count(b, n);
  if (parts == 1) return b;
  int const d = cut_dim(b);
  index_t const e = b.extent(d);
  box p = b;
  p.lo[d] = b.lo[d] + e * i / parts;
  p.hi[d] = b.lo[d] + e * (i + 1) / parts;
  return p;
}

memory_use held(workspace_size const& w) noexcept {
  memory_use m;
  m.held_host = w.host + w.pinned_host;
  m.held_device = w.device;
  return m;
}

memory_use window_layer::plan_memory() const { return held(halo->workspace_bytes()); }

void window_layer::exchange_halo(tensor_view const& x, char const* what) const {
  check_layout(x, *in, what);
  halo->start(x);
  halo->wait();
}

std::vector<box> split_box(box const& b, int n) {
  std::vector<box> r;
  for (int i = 0, parts = slab_count(b, n); i < parts; ++i) r.push_back(slab(b, n, i));
  return r;
}

void poke_progress(MPI_Comm comm) {
  int flag = 0;
  HALOX_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, MPI_STATUS_IGNORE));
}

std::string shape_str(dims const& shape) {
  std::string s = "[";
  for (std::size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

communicator dup_comm(MPI_Comm c) {
  MPI_Comm d = MPI_COMM_NULL;
  HALOX_MPI_CHECK(MPI_Comm_dup(c, &d));
  return communicator(d);
}

void check_layout(tensor_view const& v, tensor_desc const& expected, char const* what) {
  // The conditions of validate_view, tested first without building its message: this runs on
  // every execution.
  std::size_t const need = expected.local_bytes();
  bool const ok = v.desc != nullptr &&
                  (v.desc == &expected || (v.desc->dist() == expected.dist() &&
                                           v.desc->strides() == expected.strides())) &&
                  v.bytes >= need && (need == 0 || v.data != nullptr);
  if (!ok) validate_view(v, expected, what);
}

} // namespace halox::ops::detail
