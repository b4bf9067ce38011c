#include "ops/onednn/onednn_pool.hpp"

#include <cstring>
#include <sstream>
#include <unordered_map>

namespace halox::ops::detail::onednn {
namespace {

constexpr auto bad = errc::invalid_argument;

inline int d3(int nsp, int i) { return s3 - nsp + i; }

template <class B> auto at(B const& b, index_t const (&lo)[s3]) {
  return b.data + (lo[0] - b.org[0]) * b.str[0] + (lo[1] - b.org[1]) * b.str[1] +
         (lo[2] - b.org[2]) * b.str[2];
}

template <class B> memory::desc view_md(B const& b, box3 const& bx, int nsp) {
  std::vector<index_t> ext, str;
  for (int i = 0; i < nsp; ++i) {
    ext.push_back(bx.extent(d3(nsp, i)));
    str.push_back(b.str[d3(nsp, i)]);
  }
  return strided_md(b.n, b.c, ext, b.sn, b.sc, str);
}

// The pooling problem of the outputs `ob`: source region (clipped input footprint) and padding.
struct pool_geom {
  box3 src;
  memory::dims src_dims, dst_dims, stride, kernel, dil, pl, pr;
};

bool geometry(window3 const& w, box3 const& ob, int nsp, index_t n, index_t c, pool_geom& g) {
  g.src = box3{};
  g.src_dims = g.dst_dims = {n, c};
  for (int i = 0; i < nsp; ++i) {
    int const d = d3(nsp, i);
    index_t const span = (w.k[d] - 1) * w.d[d] + 1;
    index_t const g0 = ob.lo[d] * w.s[d] - w.pl[d];
    index_t const g1 = (ob.hi[d] - 1) * w.s[d] - w.pl[d] + span;
    index_t const a = std::max<index_t>(g0, 0), b = std::min(g1, w.in[d]);
    if (b <= a) return false;
    g.src.lo[d] = a;
    g.src.hi[d] = b;
    g.src_dims.push_back(b - a);
    g.dst_dims.push_back(ob.extent(d));
    g.stride.push_back(w.s[d]);
    g.kernel.push_back(w.k[d]);
    g.dil.push_back(w.d[d] - 1);
    g.pl.push_back(a - g0);
    g.pr.push_back(g1 - b);
  }
  return true;
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
  memory src_m, dst_m, ws_m, dsrc_m, ddst_m; // dense scratch
  bool backward = false;

  plan(pool_geom const& g, pool_params const& p, bool for_backward, int nsp_) : nsp(nsp_) {
    using namespace dnnl;
    auto& c = ctx();
    tag const t = plain_tag(nsp);
    memory::desc const src_md(g.src_dims, dt::f32, t), dst_md(g.dst_dims, dt::f32, t);
    algorithm const alg = algorithm_of(p);
    fwd_pd = pooling_v2_forward::primitive_desc(
        pooling_v2_forward::desc(for_backward ? prop_kind::forward_training
                                              : prop_kind::forward_inference,
                                 alg, src_md, dst_md, g.stride, g.kernel, g.dil, g.pl, g.pr),
        c.eng);
    impl = fwd_pd.impl_info_str();
    backward = for_backward;
    if (!for_backward || p.kind == pool_kind::max) {
      fwd = pooling_v2_forward(fwd_pd);
      src_m = memory(src_md, c.eng);
      dst_m = memory(dst_md, c.eng);
      if (for_backward) ws_m = memory(fwd_pd.workspace_desc(), c.eng);
    }
    if (for_backward) {
      pooling_v2_backward::primitive_desc bpd(
          pooling_v2_backward::desc(alg, src_md, dst_md, g.stride, g.kernel, g.dil, g.pl, g.pr),
          c.eng, fwd_pd);
      impl = bpd.impl_info_str();
      bwd = pooling_v2_backward(bpd);
      dsrc_m = memory(src_md, c.eng);
      ddst_m = memory(dst_md, c.eng);
    }
  }
};

pool_engine::pool_engine() = default;
pool_engine::~pool_engine() = default;

bool pool_engine::forward(const_block_ref<float> x, dims const& in_extent, block_ref<float> y,
                          box const& out_box, pool_params const& p) {
  char const* op = "pool_forward_box (onednn)";
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
  pool_geom g;
  if (!geometry(w, ob, nsp, xb.n, xb.c, g)) return false;
  try {
    std::string const key = "fwd," + std::to_string(static_cast<int>(p.kind)) +
                            std::to_string(p.count_include_pad) + ",src=" + dims_str(g.src_dims) +
                            ",dst=" + dims_str(g.dst_dims) + ",k=" + dims_str(g.kernel) +
                            ",s=" + dims_str(g.stride) + ",d=" + dims_str(g.dil) +
                            ",pl=" + dims_str(g.pl) + ",pr=" + dims_str(g.pr);
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      try {
        it = plans_.emplace(key, std::make_unique<plan>(g, p, false, nsp)).first;
      } catch (dnnl::error const&) {
        return false;
      }
    }
    plan& pl = *it->second;
    auto& c = ctx();
    memory usr_x(view_md(xb, g.src, nsp), c.eng, const_cast<float*>(at(xb, g.src.lo)));
    memory usr_y(view_md(yb, ob, nsp), c.eng, at(yb, ob.lo));
    dnnl::reorder(usr_x, pl.src_m).execute(c.strm, usr_x, pl.src_m);
    pl.fwd.execute(c.strm, {{DNNL_ARG_SRC, pl.src_m}, {DNNL_ARG_DST, pl.dst_m}});
    dnnl::reorder(pl.dst_m, usr_y).execute(c.strm, pl.dst_m, usr_y);
    c.strm.wait();
  } catch (dnnl::error const& e) {
    rethrow(op, e);
  }
  return true;
}

bool pool_engine::backward(const_block_ref<float> x, const_block_ref<float> dy,
                           dims const& in_extent, block_ref<float> dx, box const& in_box,
                           pool_params const& p) {
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
  pool_geom g;
  if (ofp.volume() == 0 || !geometry(w, ofp, nsp, dxb.n, dxb.c, g)) return false;
  for (int d = 0; d < s3;
       ++d) // inputs no window reads (stride > kernel): the reference zeroes them
    if (ib.lo[d] < g.src.lo[d] || ib.hi[d] > g.src.hi[d]) return false;
  try {
    std::string const key = "bwd," + std::to_string(static_cast<int>(p.kind)) +
                            std::to_string(p.count_include_pad) + ",src=" + dims_str(g.src_dims) +
                            ",dst=" + dims_str(g.dst_dims) + ",k=" + dims_str(g.kernel) +
                            ",s=" + dims_str(g.stride) + ",d=" + dims_str(g.dil) +
                            ",pl=" + dims_str(g.pl) + ",pr=" + dims_str(g.pr);
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      try {
        it = plans_.emplace(key, std::make_unique<plan>(g, p, true, nsp)).first;
      } catch (dnnl::error const&) {
        return false;
      }
    }
    plan& pl = *it->second;
    auto& c = ctx();
    if (is_max) { // the winners of every window touching in_box, as oneDNN's workspace
      memory usr_x(view_md(xb, g.src, nsp), c.eng, const_cast<float*>(at(xb, g.src.lo)));
      dnnl::reorder(usr_x, pl.src_m).execute(c.strm, usr_x, pl.src_m);
      pl.fwd.execute(
          c.strm,
          {{DNNL_ARG_SRC, pl.src_m}, {DNNL_ARG_DST, pl.dst_m}, {DNNL_ARG_WORKSPACE, pl.ws_m}});
    }
    memory usr_dy(view_md(dyb, ofp, nsp), c.eng, const_cast<float*>(at(dyb, ofp.lo)));
    dnnl::reorder(usr_dy, pl.ddst_m).execute(c.strm, usr_dy, pl.ddst_m);
    std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, pl.ddst_m},
                                         {DNNL_ARG_DIFF_SRC, pl.dsrc_m}};
    if (is_max) args.emplace(DNNL_ARG_WORKSPACE, pl.ws_m);
    pl.bwd.execute(c.strm, args);
    // dx on in_box: the in_box part of the region's gradient
    memory::dims dims{dxb.n, dxb.c}, offs{0, 0};
    for (int i = 0; i < nsp; ++i) {
      int const d = d3(nsp, i);
      dims.push_back(ib.extent(d));
      offs.push_back(ib.lo[d] - g.src.lo[d]);
    }
    memory sub(pl.dsrc_m.get_desc().submemory_desc(dims, offs), c.eng, pl.dsrc_m.get_data_handle());
    memory usr_dx(view_md(dxb, ib, nsp), c.eng, at(dxb, ib.lo));
    dnnl::reorder(sub, usr_dx).execute(c.strm, sub, usr_dx);
    c.strm.wait();
  } catch (dnnl::error const& e) {
    rethrow(op, e);
  }
  return true;
}

std::string pool_engine::describe() const {
  std::ostringstream os;
  for (auto const& [key, pl] : plans_)
    os << "onednn pool " << key << ": plain (" << pl->impl << ")\n";
  return os.str();
}

} // namespace halox::ops::detail::onednn
