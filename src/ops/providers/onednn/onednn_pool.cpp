#include "ops/providers/onednn/onednn_pool.hpp"

#include <cstring>
#include <sstream>

namespace halox::ops::detail::onednn {
namespace {

constexpr auto bad = errc::invalid_argument;

inline int d3(int nsp, int i) { return s3 - nsp + i; }

template <class B> auto at(B const& b, index_t const (&lo)[s3]) {
  return b.data + (lo[0] - b.org[0]) * b.str[0] + (lo[1] - b.org[1]) * b.str[1] +
         (lo[2] - b.org[2]) * b.str[2];
}

template <class B> memory::desc view_md(B const& b, box3 const& bx, int nsp) {
  index_t ext[s3], str[s3];
  for (int i = 0; i < nsp; ++i) {
    ext[i] = bx.extent(d3(nsp, i));
    str[i] = b.str[d3(nsp, i)];
  }
  return strided_md(b.n, b.c, nsp, ext, b.sn, b.sc, str);
}

// The pooling problem of the outputs `ob`: source region (clipped input footprint) and padding.
struct pool_geom {
  box3 src;
  memory::dims src_dims, dst_dims, stride, kernel, dil, pl, pr;
};

bool geometry(window3 const& w, box3 const& ob, int nsp, index_t n, index_t c, pool_geom& g) {
  g.src = box3{};
  g.src_dims = g.dst_dims = {n, c}; // reused: assignment and clear keep the capacity
  for (auto* v : {&g.stride, &g.kernel, &g.dil, &g.pl, &g.pr}) v->clear();
  for (int i = 0; i < nsp; ++i) {
    int const d = d3(nsp, i);
    source_span const sp = source_geometry(w, ob, d);
    if (sp.hi <= sp.lo) return false;
    g.src.lo[d] = sp.lo;
    g.src.hi[d] = sp.hi;
    g.src_dims.push_back(sp.hi - sp.lo);
    g.dst_dims.push_back(ob.extent(d));
    g.stride.push_back(w.s[d]);
    g.kernel.push_back(w.k[d]);
    g.dil.push_back(w.d[d] - 1);
    g.pl.push_back(sp.pl);
    g.pr.push_back(sp.pr);
  }
  return true;
}

// The problem: direction, algorithm and geometry.
void put_problem(fingerprint& v, bool backward, pool_params const& p, pool_geom const& g) {
  v.clear();
  v.push_back(backward);
  v.push_back(static_cast<std::int64_t>(p.kind));
  v.push_back(p.count_include_pad);
  for (auto const* d : {&g.src_dims, &g.dst_dims, &g.kernel, &g.stride, &g.dil, &g.pl, &g.pr})
    put_dims(v, *d);
}

std::string key_of(bool backward, pool_params const& p, pool_geom const& g) {
  return std::string(backward ? "bwd," : "fwd,") + std::to_string(static_cast<int>(p.kind)) +
         std::to_string(p.count_include_pad) + ",src=" + dims_str(g.src_dims) +
         ",dst=" + dims_str(g.dst_dims) + ",k=" + dims_str(g.kernel) + ",s=" + dims_str(g.stride) +
         ",d=" + dims_str(g.dil) + ",pl=" + dims_str(g.pl) + ",pr=" + dims_str(g.pr);
}

// The plan of problem `g` in `plans`, built on first use; null when oneDNN cannot express it.
template <class Plans>
auto* find_plan(Plans& plans, bool backward, pool_params const& p, pool_geom const& g, int nsp) {
  using plan = typename Plans::mapped_type::element_type;
  std::string const key = key_of(backward, p, g);
  auto it = plans.find(key);
  if (it == plans.end()) {
    try {
      it = plans.emplace(key, std::make_unique<plan>(g, p, backward, nsp)).first;
    } catch (dnnl::error const&) {
      return static_cast<plan*>(nullptr);
    }
  }
  return it->second.get();
}

dnnl::algorithm algorithm_of(pool_params const& p) {
  if (p.kind == pool_kind::max) return dnnl::algorithm::pooling_max;
  return p.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                             : dnnl::algorithm::pooling_avg_exclude_padding;
}

} // namespace

// The primitives of one problem shape, in the plain dense layout.
struct pool_engine::plan {
  std::string impl;
  int nsp = 0;
  dnnl::pooling_v2_forward::primitive_desc fwd_pd;
  dnnl::pooling_v2_forward fwd;
  dnnl::pooling_v2_backward bwd;
  // Dense copies of x, y, dx and dy, bound to the thread's shared scratch at each call
  // (`io::bind`); ws_m, the winners, is the plan's own: forward keeps them for backward.
  memory src_m, dst_m, ws_m, dsrc_m, ddst_m;
  bool backward = false;
  memory::desc fwd_pad_md, bwd_pad_md;  // the primitives' scratchpads
  std::size_t fwd_pad = 0, bwd_pad = 0; // and their bytes

  [[nodiscard]] std::size_t held_bytes() const { return ws_m ? ws_m.get_desc().get_size() : 0; }

  plan(pool_geom const& g, pool_params const& p, bool for_backward, int nsp_) : nsp(nsp_) {
    using namespace dnnl;
    auto& c = ctx();
    tag const t = plain_tag(nsp);
    memory::desc const src_md(g.src_dims, dt::f32, t), dst_md(g.dst_dims, dt::f32, t);
    algorithm const alg = algorithm_of(p);
    primitive_attr attr; // scratchpads from the shared arena (see onednn_conv.cpp)
    attr.set_scratchpad_mode(scratchpad_mode::user);
    fwd_pd = pooling_v2_forward::primitive_desc(
        pooling_v2_forward::desc(for_backward ? prop_kind::forward_training
                                              : prop_kind::forward_inference,
                                 alg, src_md, dst_md, g.stride, g.kernel, g.dil, g.pl, g.pr),
        attr, c.eng);
    fwd_pad_md = fwd_pd.scratchpad_desc();
    fwd_pad = fwd_pad_md.get_size();
    impl = fwd_pd.impl_info_str();
    backward = for_backward;
    if (!for_backward || p.kind == pool_kind::max) {
      fwd = pooling_v2_forward(fwd_pd);
      src_m = memory(src_md, c.eng, DNNL_MEMORY_NONE);
      dst_m = memory(dst_md, c.eng, DNNL_MEMORY_NONE);
      if (for_backward) ws_m = memory(fwd_pd.workspace_desc(), c.eng);
    }
    if (for_backward) {
      pooling_v2_backward::primitive_desc bpd(
          pooling_v2_backward::desc(alg, src_md, dst_md, g.stride, g.kernel, g.dil, g.pl, g.pr),
          attr, c.eng, fwd_pd);
      bwd_pad_md = bpd.scratchpad_desc();
      bwd_pad = bwd_pad_md.get_size();
      impl = bpd.impl_info_str();
      bwd = pooling_v2_backward(bpd);
      dsrc_m = memory(src_md, c.eng, DNNL_MEMORY_NONE);
      ddst_m = memory(dst_md, c.eng, DNNL_MEMORY_NONE);
    }
  }
};

// One problem with one layout of the caller's views: the views as memories (their data pointers
// set per call) and the reorders between them and the plan's dense buffers.
//
// A caller's view that already is the plan's dense layout (no halo, as a pooling input without
// halos or a gradient) is bound to the primitive directly: no copy, no scratch. The others go
// through the thread's shared scratch, bound at each call (`bind`).
struct pool_engine::io {
  plan* pl = nullptr;
  memory usr_x, usr_y, usr_dy, usr_dx, sub;
  bound r_x, r_y, r_dy, r_dx, fwd, bwd;
  bool keeps = false; // a forward that keeps the winners (training mode, workspace bound)

  memory fwd_pad_m, bwd_pad_m; // the primitives' scratchpads
  void add_pads() {
    auto& c = ctx();
    if (pl->fwd_pad && fwd && !fwd_pad_m) {
      fwd_pad_m = memory(pl->fwd_pad_md, c.eng, DNNL_MEMORY_NONE);
      fwd.add(DNNL_ARG_SCRATCHPAD, fwd_pad_m);
    }
    if (pl->bwd_pad && bwd && !bwd_pad_m) {
      bwd_pad_m = memory(pl->bwd_pad_md, c.eng, DNNL_MEMORY_NONE);
      bwd.add(DNNL_ARG_SCRATCHPAD, bwd_pad_m);
    }
  }
  // Binds the dense copies this io reorders through to shared scratch. The recomputed y of a
  // backward takes the role dy takes after it: nothing reads y once the forward has run.
  void bind(bool forward, bool backward) const {
    scratch_arena& a = arena();
    if (forward && fwd_pad_m) fwd_pad_m.set_data_handle(a.get(role::pad, pl->fwd_pad));
    if (backward && bwd_pad_m) bwd_pad_m.set_data_handle(a.get(role::pad, pl->bwd_pad));
    if (forward && r_x)
      pl->src_m.set_data_handle(a.get(role::src, pl->src_m.get_desc().get_size()));
    if (forward && (r_y || backward))
      pl->dst_m.set_data_handle(a.get(role::dst, pl->dst_m.get_desc().get_size()));
    if (backward && r_dy)
      pl->ddst_m.set_data_handle(a.get(role::dst, pl->ddst_m.get_desc().get_size()));
    if (backward && r_dx) {
      pl->dsrc_m.set_data_handle(a.get(role::dsrc, pl->dsrc_m.get_desc().get_size()));
      sub.set_data_handle(pl->dsrc_m.get_data_handle());
    }
  }
};

namespace {
// `usr` as the primitive's argument where its view is the dense layout `dense`, else `dense`
// (filled or emptied by a reorder `r`, made here).
memory direct_or(memory const& usr, memory const& dense, bound& r, bool into_dense) {
  if (usr.get_desc() == dense.get_desc()) return usr;
  r = into_dense ? bound::reorder(usr, dense) : bound::reorder(dense, usr);
  return dense;
}
} // namespace

// The geometry of the current call, kept between calls so that its vectors are not allocated
// again.
struct pool_engine::geom : pool_geom {};

pool_engine::pool_engine() : geom_(std::make_unique<geom>()) {}
pool_engine::~pool_engine() = default;

bool pool_engine::forward(const_block_ref<float> x, dims const& in_extent, block_ref<float> y,
                          box const& out_box, pool_params const& p, bool keep) {
  char const* op = "pool_forward_box (onednn)";
  kept_ = {}; // any forward call ends what an earlier one kept
  int const nsp = spatial_dims(op, "x", x.ref.rank());
  block3<float const> xb = to_block3(op, "x", x, nsp);
  block3<float> yb = to_block3(op, "y", y, nsp);
  HALOX_REQUIRE(xb.n == yb.n && xb.c == yb.c, bad,
                std::string(op) + ": y " + fmt(y.ref.shape) + " and x " + fmt(x.ref.shape) +
                    " must have the same N and C");
  HALOX_REQUIRE(static_cast<int>(in_extent.size()) == nsp, bad,
                std::string(op) + ": in_extent " + fmt(in_extent) +
                    " needs one entry per spatial dimension");
  window3 const w = pool_window(op, in_extent, p);
  box3 const ob = to_box3(op, "out_box", out_box, nsp);
  require_inside(op, "out_box", ob, w, false);
  require_covers(op, "y", yb, ob, nsp, "out_box");
  require_covers(op, "x", xb, input_footprint(w, ob), nsp, "the input footprint of out_box");
  if (ob.volume() == 0 || xb.n == 0 || xb.c == 0) return true;
  pool_geom& g = *geom_;
  if (!geometry(w, ob, nsp, xb.n, xb.c, g)) return false;
  try {
    auto& c = ctx();
    memory::desc const xmd = view_md(xb, g.src, nsp), ymd = view_md(yb, ob, nsp);
    // Kept winners: the training-mode forward of the backward plan, whose workspace they fill.
    bool const training = keep && p.kind == pool_kind::max;
    put_problem(scratch_, false, p, g);
    scratch_.push_back(training);
    put_md(scratch_, xmd);
    put_md(scratch_, ymd);
    auto it = ios_.find(scratch_);
    if (it == ios_.end()) {
      plan* found = find_plan(plans_, training, p, g, nsp);
      auto v = std::make_unique<io>();
      if (found == nullptr && training) { // no backward primitive: keep nothing
        found = find_plan(plans_, false, p, g, nsp);
        v->keeps = false;
      } else {
        v->keeps = training;
      }
      if (found == nullptr) return false;
      v->pl = found;
      v->usr_x = memory(xmd, c.eng, DNNL_MEMORY_NONE);
      v->usr_y = memory(ymd, c.eng, DNNL_MEMORY_NONE);
      memory const src = direct_or(v->usr_x, v->pl->src_m, v->r_x, true);
      memory const dst = direct_or(v->usr_y, v->pl->dst_m, v->r_y, false);
      v->fwd = bound(v->pl->fwd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
      v->add_pads();
      if (v->keeps) v->fwd.add(DNNL_ARG_WORKSPACE, v->pl->ws_m);
      it = ios_.emplace(scratch_, std::move(v)).first;
    }
    io& v = *it->second;
    float const* const x0 = at(xb, g.src.lo);
    v.usr_x.set_data_handle(const_cast<float*>(x0));
    v.usr_y.set_data_handle(at(yb, ob.lo));
    v.bind(true, false);
    if (v.r_x) v.r_x.execute(c.strm);
    v.fwd.execute(c.strm);
    if (v.r_y) v.r_y.execute(c.strm);
    c.strm.wait();
    if (v.keeps) kept_ = {v.pl, x0, xmd};
  } catch (dnnl::error const& e) {
    rethrow(op, e);
  }
  return true;
}

bool pool_engine::backward(const_block_ref<float> x, const_block_ref<float> dy,
                           dims const& in_extent, block_ref<float> dx, box const& in_box,
                           pool_params const& p, bool x_kept) {
  char const* op = "pool_backward_box (onednn)";
  int const nsp = spatial_dims(op, "dx", dx.ref.rank());
  block3<float> dxb = to_block3(op, "dx", dx, nsp);
  block3<float const> dyb = to_block3(op, "dy", dy, nsp);
  HALOX_REQUIRE(dxb.n == dyb.n && dxb.c == dyb.c, bad,
                std::string(op) + ": dy " + fmt(dy.ref.shape) + " and dx " + fmt(dx.ref.shape) +
                    " must have the same N and C");
  HALOX_REQUIRE(static_cast<int>(in_extent.size()) == nsp, bad,
                std::string(op) + ": in_extent " + fmt(in_extent) +
                    " needs one entry per spatial dimension");
  window3 const w = pool_window(op, in_extent, p);
  box3 const ib = to_box3(op, "in_box", in_box, nsp);
  require_inside(op, "in_box", ib, w, true);
  require_covers(op, "dx", dxb, ib, nsp, "in_box");
  box3 const ofp = output_footprint(w, ib);
  require_covers(op, "dy", dyb, ofp, nsp, "the output footprint of in_box");
  bool const is_max = p.kind == pool_kind::max;
  block3<float const> xb;
  if (is_max) {
    xb = to_block3(op, "x", x, nsp);
    HALOX_REQUIRE(xb.n == dxb.n && xb.c == dxb.c, bad,
                  std::string(op) + ": x " + fmt(x.ref.shape) + " and dx " + fmt(dx.ref.shape) +
                      " must have the same N and C");
    require_covers(op, "x", xb, input_footprint(w, ofp), nsp,
                   "the input footprint of the output footprint of in_box (max pooling)");
  }
  if (ib.volume() == 0 || dxb.n == 0 || dxb.c == 0) return true;
  pool_geom& g = *geom_;
  if (ofp.volume() == 0 || !geometry(w, ofp, nsp, dxb.n, dxb.c, g)) return false;
  // Inputs no window reads at the edges of in_box (the windows stop short of a last row, as
  // 2x2 windows of stride 2 over 5 rows) get a zero gradient; oneDNN computes the part of in_box
  // the windows read (`rb`), where gaps between windows (stride > kernel) come out zero too.
  box3 rb = ib;
  for (int d = 0; d < s3; ++d) {
    rb.lo[d] = std::max(ib.lo[d], g.src.lo[d]);
    rb.hi[d] = std::min(ib.hi[d], g.src.hi[d]);
  }
  if (rb.volume() != ib.volume()) {
    for (index_t n = 0; n < dxb.n; ++n)
      for (index_t ch = 0; ch < dxb.c; ++ch)
        for (index_t i0 = ib.lo[0]; i0 < ib.hi[0]; ++i0)
          for (index_t i1 = ib.lo[1]; i1 < ib.hi[1]; ++i1)
            for (index_t i2 = ib.lo[2]; i2 < ib.hi[2]; ++i2)
              dxb.data[dxb.offset(n, ch, i0, i1, i2)] = 0.0f;
    if (rb.volume() == 0) return true;
  }
  try {
    auto& c = ctx();
    memory::desc const dymd = view_md(dyb, ofp, nsp), dxmd = view_md(dxb, rb, nsp);
    memory::desc const xmd = is_max ? view_md(xb, g.src, nsp) : memory::desc();
    put_problem(scratch_, true, p, g);
    put_md(scratch_, dymd);
    put_md(scratch_, dxmd);
    if (is_max) put_md(scratch_, xmd);
    for (int i = 0; i < nsp; ++i) scratch_.push_back(rb.lo[d3(nsp, i)] - g.src.lo[d3(nsp, i)]);
    auto it = ios_.find(scratch_);
    if (it == ios_.end()) {
      plan* const found = find_plan(plans_, true, p, g, nsp);
      if (found == nullptr) return false;
      auto v = std::make_unique<io>();
      plan& pl = *found;
      v->pl = &pl;
      if (is_max) { // the winners of every window touching in_box, as oneDNN's workspace
        v->usr_x = memory(xmd, c.eng, DNNL_MEMORY_NONE);
        memory const src = direct_or(v->usr_x, pl.src_m, v->r_x, true);
        v->fwd = bound(
            pl.fwd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, pl.dst_m}, {DNNL_ARG_WORKSPACE, pl.ws_m}});
      }
      v->usr_dy = memory(dymd, c.eng, DNNL_MEMORY_NONE);
      memory const ddst = direct_or(v->usr_dy, pl.ddst_m, v->r_dy, true);
      // dx straight into the caller's view where it is the whole dense region.
      v->usr_dx = memory(dxmd, c.eng, DNNL_MEMORY_NONE);
      bool const dx_direct = rb.volume() == g.src.volume() && dxmd == pl.dsrc_m.get_desc();
      v->bwd = bound(pl.bwd, {{DNNL_ARG_DIFF_DST, ddst},
                              {DNNL_ARG_DIFF_SRC, dx_direct ? v->usr_dx : pl.dsrc_m}});
      if (is_max) v->bwd.add(DNNL_ARG_WORKSPACE, pl.ws_m);
      // dx on rb: the rb part of the region's gradient
      memory::dims dims{dxb.n, dxb.c}, offs{0, 0};
      for (int i = 0; i < nsp; ++i) {
        int const d = d3(nsp, i);
        dims.push_back(rb.extent(d));
        offs.push_back(rb.lo[d] - g.src.lo[d]);
      }
      v->add_pads();
      if (!dx_direct) {
        v->sub = memory(pl.dsrc_m.get_desc().submemory_desc(dims, offs), c.eng, DNNL_MEMORY_NONE);
        v->r_dx = bound::reorder(v->sub, v->usr_dx);
      }
      it = ios_.emplace(scratch_, std::move(v)).first;
    }
    io const& v = *it->second;
    if (is_max) {
      float const* const x0 = at(xb, g.src.lo);
      // The winners the last forward call found on these outputs of this x, or find them now.
      if (!(x_kept && kept_.pl == v.pl && kept_.x == x0 && kept_.xmd == xmd)) {
        kept_ = {}; // the plan's workspace is about to hold other winners
        v.bind(true, true);
        v.usr_x.set_data_handle(const_cast<float*>(x0));
        if (v.r_x) v.r_x.execute(c.strm);
        v.fwd.execute(c.strm);
      }
    }
    v.bind(false, true);
    v.usr_dy.set_data_handle(const_cast<float*>(at(dyb, ofp.lo)));
    if (v.r_dy) v.r_dy.execute(c.strm);
    v.usr_dx.set_data_handle(at(dxb, rb.lo));
    v.bwd.execute(c.strm);
    if (v.r_dx) v.r_dx.execute(c.strm);
    c.strm.wait();
  } catch (dnnl::error const& e) {
    rethrow(op, e);
  }
  return true;
}

std::size_t pool_engine::held_bytes() const {
  std::size_t n = 0;
  for (auto const& [key, pl] : plans_) n += pl->held_bytes();
  return n;
}

std::string pool_engine::describe() const {
  std::ostringstream os;
  for (auto const& [key, pl] : plans_)
    os << "onednn pool " << key << ": plain (" << pl->impl << ")\n";
  return os.str();
}

} // namespace halox::ops::detail::onednn
