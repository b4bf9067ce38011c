#include "ops/onednn/onednn_lrn.hpp"

#include <cstring>
#include <sstream>

namespace halox::ops::detail::onednn {
namespace {

template <class V> memory::desc user_md(V const& v) {
  std::vector<index_t> ext(v.shape.begin() + 2, v.shape.end());
  std::vector<index_t> str(v.strides.begin() + 2, v.strides.end());
  return strided_md(v.shape[0], v.shape[1], ext, v.strides[0], v.strides[1], str);
}

} // namespace

// The primitives of one problem in one dense layout (plain or channel-blocked). `usable` is
// false when oneDNN has only its reference implementation for the problem, which is slower than
// halox's own kernels (the caller then uses those).
struct lrn_engine::plan {
  std::string impl, layout;
  bool usable = true;
  dnnl::lrn_forward fwd;
  dnnl::lrn_backward bwd;
  memory src_m, dst_m, ws_m, ddst_m, dsrc_m;
  bool backward = false;

  plan(memory::dims const& dims, lrn_params const& p, bool for_backward, tag t, std::string name)
      : layout(std::move(name)) {
    using namespace dnnl;
    auto& c = ctx();
    memory::desc const md(dims, dt::f32, t);
    auto const alg = algorithm::lrn_across_channels;
    auto const a = static_cast<float>(p.alpha), b = static_cast<float>(p.beta),
               k = static_cast<float>(p.k);
    dnnl::lrn_forward::primitive_desc fpd(
        dnnl::lrn_forward::desc(for_backward ? prop_kind::forward_training
                                             : prop_kind::forward_inference,
                                alg, md, p.size, a, b, k),
        c.eng);
    impl = fpd.impl_info_str();
    usable = impl.find("ref") == std::string::npos;
    fwd = dnnl::lrn_forward(fpd);
    src_m = memory(md, c.eng);
    dst_m = memory(md, c.eng);
    backward = for_backward;
    if (for_backward) {
      ws_m = memory(fpd.workspace_desc(), c.eng);
      dnnl::lrn_backward::primitive_desc bpd(dnnl::lrn_backward::desc(alg, md, md, p.size, a, b, k),
                                             c.eng, fpd);
      std::string const b = bpd.impl_info_str();
      impl += ", backward " + b;
      usable = usable && b.find("ref") == std::string::npos;
      bwd = dnnl::lrn_backward(bpd);
      ddst_m = memory(md, c.eng);
      dsrc_m = memory(md, c.eng);
    }
  }
};

namespace {
// LRN runs across the channels at each spatial position, so the spatial dimensions may be merged
// wherever the layout allows: a 3-D problem then runs on oneDNN's optimised 2-D kernels (its 3-D
// LRN has only the reference implementation).
template <class T> bool mergeable(tensor_ref<T> const& t) {
  return t.rank() == 5 && t.strides[2] == t.strides[3] * t.shape[3];
}
template <class T> tensor_ref<T> merged(tensor_ref<T> const& t) {
  return tensor_ref<T>(t.data, {t.shape[0], t.shape[1], t.shape[2] * t.shape[3], t.shape[4]},
                       {t.strides[0], t.strides[1], t.strides[3], t.strides[4]});
}
} // namespace

// One problem with one layout of the caller's views.
struct lrn_engine::io {
  plan* pl = nullptr;
  memory usr_x, usr_a, usr_b; // x; y or dy; dx
  bound r_x, r_a, r_b, fwd, bwd;
};

lrn_engine::io* lrn_engine::views(bool for_backward, lrn_params const& p,
                                  const_tensor_ref<float> const& x, dims const& a_strides,
                                  dims const& b_strides) {
  auto& v = scratch_;
  v.clear();
  v.push_back(for_backward);
  v.push_back(p.size);
  for (double d : {p.alpha, p.beta, p.k}) {
    std::int64_t bits = 0;
    std::memcpy(&bits, &d, sizeof bits);
    v.push_back(bits);
  }
  v.push_back(static_cast<std::int64_t>(x.shape.size()));
  v.insert(v.end(), x.shape.begin(), x.shape.end());
  v.insert(v.end(), x.strides.begin(), x.strides.end());
  v.insert(v.end(), a_strides.begin(), a_strides.end());
  v.insert(v.end(), b_strides.begin(), b_strides.end());
  auto it = ios_.find(v);
  if (it != ios_.end()) return it->second.get();
  plan* pl = find(x, p, for_backward);
  if (pl == nullptr) return nullptr;
  auto& c = ctx();
  auto made = std::make_unique<io>();
  io& o = *made;
  o.pl = pl;
  o.usr_x = memory(user_md(x), c.eng, DNNL_MEMORY_NONE);
  o.r_x = bound::reorder(o.usr_x, pl->src_m);
  o.fwd = bound(pl->fwd, {{DNNL_ARG_SRC, pl->src_m}, {DNNL_ARG_DST, pl->dst_m}});
  const_tensor_ref<float> a(nullptr, x.shape, a_strides);
  o.usr_a = memory(user_md(a), c.eng, DNNL_MEMORY_NONE);
  if (!for_backward) {
    o.r_a = bound::reorder(pl->dst_m, o.usr_a);
  } else {
    if (pl->ws_m.get_desc().get_size() != 0) o.fwd.add(DNNL_ARG_WORKSPACE, pl->ws_m);
    o.r_a = bound::reorder(o.usr_a, pl->ddst_m);
    o.bwd = bound(pl->bwd, {{DNNL_ARG_SRC, pl->src_m},
                            {DNNL_ARG_DIFF_DST, pl->ddst_m},
                            {DNNL_ARG_DIFF_SRC, pl->dsrc_m}});
    if (pl->ws_m.get_desc().get_size() != 0) o.bwd.add(DNNL_ARG_WORKSPACE, pl->ws_m);
    const_tensor_ref<float> b(nullptr, x.shape, b_strides);
    o.usr_b = memory(user_md(b), c.eng, DNNL_MEMORY_NONE);
    o.r_b = bound::reorder(pl->dsrc_m, o.usr_b);
  }
  return ios_.emplace(v, std::move(made)).first->second.get();
}

lrn_engine::lrn_engine() = default;
lrn_engine::~lrn_engine() = default;

lrn_engine::plan* lrn_engine::find(const_tensor_ref<float> const& x, lrn_params const& p,
                                   bool for_backward) {
  int const r = x.rank();
  if (r < 3 || r > 5 || p.size % 2 == 0) return nullptr;
  std::ostringstream key;
  key.precision(17);
  key << (for_backward ? "bwd" : "fwd") << ",dims=" << dims_str(x.shape) << ",size=" << p.size
      << ",alpha=" << p.alpha << ",beta=" << p.beta << ",k=" << p.k;
  auto it = plans_.find(key.str());
  if (it == plans_.end()) {
    // Plain first; then oneDNN's channel-blocked layouts, where its optimised LRN kernels
    // (notably backward) live; else remember the refusal.
    int const nsp = r - 2;
    std::vector<std::pair<tag, char const*>> const layouts{{plain_tag(nsp), "plain"},
                                                           {nsp == 1   ? tag::nCw8c
                                                            : nsp == 2 ? tag::nChw8c
                                                                       : tag::nCdhw8c,
                                                            "blocked 8c"},
                                                           {nsp == 1   ? tag::nCw16c
                                                            : nsp == 2 ? tag::nChw16c
                                                                       : tag::nCdhw16c,
                                                            "blocked 16c"}};
    std::unique_ptr<plan> best;
    for (auto const& [t, name] : layouts) {
      try {
        auto pl = std::make_unique<plan>(memory::dims(x.shape.begin(), x.shape.end()), p,
                                         for_backward, t, name);
        bool const ok = pl->usable;
        if (!best || ok) best = std::move(pl);
        if (ok) break;
      } catch (dnnl::error const&) {
      }
    }
    if (!best) return nullptr;
    it = plans_.emplace(key.str(), std::move(best)).first;
  }
  return it->second->usable ? it->second.get() : nullptr;
}

bool lrn_engine::forward(const_tensor_ref<float> x, tensor_ref<float> y, lrn_params const& p) {
  if (x.shape == y.shape && mergeable(x) && mergeable(y)) return forward(merged(x), merged(y), p);
  char const* op = "lrn_forward (onednn)";
  check_lrn_params(p, op);
  check_ref(op, "x", x);
  check_ref(op, "y", y);
  require_same(op, "y", y, "x", x);
  if (x.size() == 0) return true;
  try {
    io* o = views(false, p, x, y.strides, {});
    if (o == nullptr) return false;
    auto& c = ctx();
    o->usr_x.set_data_handle(const_cast<float*>(x.data));
    o->usr_a.set_data_handle(y.data);
    o->r_x.execute(c.strm);
    o->fwd.execute(c.strm);
    o->r_a.execute(c.strm);
    c.strm.wait();
  } catch (dnnl::error const& e) {
    rethrow(op, e);
  }
  return true;
}

bool lrn_engine::backward(const_tensor_ref<float> x, const_tensor_ref<float> dy,
                          tensor_ref<float> dx, lrn_params const& p) {
  if (x.shape == dy.shape && x.shape == dx.shape && mergeable(x) && mergeable(dy) && mergeable(dx))
    return backward(merged(x), merged(dy), merged(dx), p);
  char const* op = "lrn_backward (onednn)";
  check_lrn_params(p, op);
  check_ref(op, "x", x);
  check_ref(op, "dy", dy);
  check_ref(op, "dx", dx);
  require_same(op, "dy", dy, "x", x);
  require_same(op, "dx", dx, "x", x);
  if (x.size() == 0) return true;
  try {
    io* o = views(true, p, x, dy.strides, dx.strides);
    if (o == nullptr) return false;
    auto& c = ctx();
    o->usr_x.set_data_handle(const_cast<float*>(x.data));
    o->usr_a.set_data_handle(const_cast<float*>(dy.data));
    o->usr_b.set_data_handle(dx.data);
    o->r_x.execute(c.strm);
    o->fwd.execute(c.strm);
    o->r_a.execute(c.strm);
    o->bwd.execute(c.strm);
    o->r_b.execute(c.strm);
    c.strm.wait();
  } catch (dnnl::error const& e) {
    rethrow(op, e);
  }
  return true;
}

std::string lrn_engine::describe() const {
  std::ostringstream os;
  for (auto const& [key, pl] : plans_)
    os << "onednn lrn " << key << ": "
       << (pl->usable ? pl->layout : "halox reference kernels, as oneDNN has only") << " ("
       << pl->impl << ")\n";
  return os.str();
}

} // namespace halox::ops::detail::onednn
