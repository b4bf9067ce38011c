// The oneDNN provider (float, host memory): convolutions through oneDNN primitives on boxes of
// the caller's buffers (see onednn_conv.hpp), pooling through oneDNN pooling primitives (see
// onednn_pool.cpp); ReLU, the batch-norm passes and LRN through halox's vectorised host loops
// (fast_pointwise.hpp, fast_lrn.hpp: they beat oneDNN's LRN primitives on every measured shape,
// see docs/providers.md); the bias gradient through the reference loop.
#include "ops/kernels/conv_common.hpp"
#include "ops/kernels/elementwise.hpp"
#include "ops/kernels/fast_lrn.hpp"
#include "ops/kernels/fast_pointwise.hpp"
#include "ops/providers/compute_provider.hpp"
#include "ops/providers/onednn/onednn_conv.hpp"
#include "ops/providers/onednn/onednn_pool.hpp"

#include <halox/ops/conv.hpp>

#include <algorithm>
#include <sstream>

namespace halox::ops::detail {
namespace {

using onednn::conv_job;
using onednn::conv_kind;
using onednn::memory;

// The real spatial dimension i (0-based) of an nsp-dimensional problem in the 3-D padded
// geometry.
inline int d3(int nsp, int i) { return s3 - nsp + i; }

// The caller's strided view of block b over the spatial extents `ext` (nsp of them).
template <class B> memory::desc block_md(B const& b, index_t c, index_t const* ext, int nsp) {
  index_t str[s3];
  for (int i = 0; i < nsp; ++i) str[i] = b.str[d3(nsp, i)];
  return onednn::strided_md(b.n, c, nsp, ext, b.sn, b.sc, str);
}

// Address of global spatial position lo (3-D) of sample 0, channel 0 in block b.
template <class B> auto at(B const& b, index_t const (&lo)[s3]) {
  return b.data + (lo[0] - b.org[0]) * b.str[0] + (lo[1] - b.org[1]) * b.str[1] +
         (lo[2] - b.org[2]) * b.str[2];
}

void fill_window(conv_job& j, window3 const& w) {
  for (int i = 0; i < j.nsp; ++i) {
    int const d = d3(j.nsp, i);
    j.stride.push_back(w.s[d]);
    j.dil.push_back(w.d[d] - 1);
  }
}

template <class W> memory::desc weights_md(tensor_ref<W> const& w) {
  return onednn::strided_md(w.rank(), w.shape.data(), w.strides.data());
}

// Empties a job for reuse: its vectors keep their capacity, so a warm call allocates nothing.
void reset(conv_job& j) {
  for (auto* v : {&j.src, &j.wei, &j.dst, &j.stride, &j.dil, &j.pl, &j.pr, &j.dst_offset})
    v->clear();
  j.bias = j.relu = false;
  j.src_ptr = j.wei_ptr = j.dst_ptr = j.bias_ptr = nullptr;
}

class onednn_kernels final : public compute_kernels<float> {
public:
  onednn_kernels() : ref_(make_reference_kernels<float>()) {}

  compute_provider kind() const noexcept override { return compute_provider::onednn; }

  void conv_forward(const_block_ref<float> x, dims const& in_extent, const_tensor_ref<float> w,
                    float const* bias, block_ref<float> y, box const& out_box,
                    conv_params const& p) override {
    forward(x, in_extent, w, bias, y, out_box, p, false);
  }
  void conv_forward_relu(const_block_ref<float> x, dims const& in_extent, const_tensor_ref<float> w,
                         float const* bias, block_ref<float> y, box const& out_box,
                         conv_params const& p) override {
    forward(x, in_extent, w, bias, y, out_box, p, true);
  }
  void forward(const_block_ref<float> const& x, dims const& in_extent,
               const_tensor_ref<float> const& w, float const* bias, block_ref<float> const& y,
               box const& out_box, conv_params const& p, bool relu) {
    char const* op = "conv_forward_box (onednn)";
    auto const [nsp, xb, yb, cp, ob] = check_conv_forward(op, x, in_extent, w, y, out_box, p);
    conv_job& j = job_;
    reset(j);
    index_t src_lo[s3];
    bool const nothing = ob.volume() == 0 || xb.n == 0 || cp.cout == 0;
    if (nothing || cp.cin == 0 || !source_region(cp.w, ob, xb, nsp, j, src_lo)) { // or padding
      conv_.forget(conv_kind::forward); // this x is not the one oneDNN last reordered
      if (nothing) return;
      if (relu)
        ref_->conv_forward_relu(x, in_extent, w, bias, y, out_box, p);
      else
        ref_->conv_forward(x, in_extent, w, bias, y, out_box, p);
      return;
    }
    j.kind = conv_kind::forward;
    j.bias = bias != nullptr;
    j.relu = relu;
    finish_job(j, cp, xb, src_lo, w);
    index_t oext[s3];
    for (int i = 0; i < nsp; ++i) oext[i] = ob.extent(d3(nsp, i));
    j.usr_dst = block_md(yb, cp.cout, oext, nsp);
    j.dst_ptr = at(yb, ob.lo);
    j.wei_ptr = const_cast<float*>(w.data);
    j.bias_ptr = const_cast<float*>(bias);
    conv_.run(op, j);
  }

  void conv_backward_data(const_block_ref<float> dy, dims const& in_extent,
                          const_tensor_ref<float> w, block_ref<float> dx, box const& in_box,
                          conv_params const& p, bool dy_kept) override {
    char const* op = "conv_backward_data_box (onednn)";
    auto const [nsp, dyb, dxb, cp, ib, ofp] =
        check_conv_backward_data(op, dy, in_extent, w, dx, in_box, p);
    if (ib.volume() == 0 || dxb.n == 0 || cp.cin == 0) return;
    if (ofp.volume() == 0 || cp.cout == 0) { // no output reads these inputs: dx = 0
      ref_->conv_backward_data(dy, in_extent, w, dx, in_box, p, false);
      return;
    }
    // Local problem: src = in_box, dst = the output footprint, extended with zero dy where the
    // geometry needs whole windows (then padding is never negative).
    conv_job& j = job_;
    reset(j);
    j.kind = conv_kind::backward_data;
    j.nsp = nsp;
    fill_window(j, cp.w);
    j.src.assign({dxb.n, cp.cin});
    j.dst.assign({dxb.n, cp.cout});
    j.wei.assign(w.shape.begin(), w.shape.end());
    memory::dims& offset = j.dst_offset;
    offset.assign({0, 0});
    bool extended = false;
    index_t iext[s3], fext[s3];
    for (int i = 0; i < nsp; ++i) {
      int const d = d3(nsp, i);
      index_t const len = ib.extent(d);
      backward_data_span const g = backward_data_geometry(cp.w, ib, ofp, d);
      extended = extended || g.extended;
      j.src.push_back(len);
      j.dst.push_back(g.ohi - g.olo);
      j.pl.push_back(g.pl);
      j.pr.push_back(g.pr);
      offset.push_back(g.ext_lo);
      iext[i] = len;
      fext[i] = ofp.extent(d);
    }
    if (!extended) offset.clear();
    j.usr_src = block_md(dxb, cp.cin, iext, nsp);
    j.usr_dst = block_md(dyb, cp.cout, fext, nsp);
    j.usr_wei = weights_md(w);
    j.src_ptr = at(dxb, ib.lo);
    j.dst_ptr = const_cast<float*>(at(dyb, ofp.lo));
    j.wei_ptr = const_cast<float*>(w.data);
    conv_.run(op, j, nullptr, dy_kept);
  }

  void conv_backward_weights(const_block_ref<float> x, dims const& in_extent,
                             const_block_ref<float> dy, tensor_ref<float> dw, box const& out_box,
                             conv_params const& p, bool x_kept) override {
    char const* op = "conv_backward_weights_box (onednn)";
    auto const [nsp, xb, dyb, cp, ob] =
        check_conv_backward_weights(op, x, in_extent, dy, dw, out_box, p);
    conv_job& j = job_;
    reset(j);
    index_t src_lo[s3];
    if (ob.volume() == 0 || xb.n == 0 || cp.cout == 0 || cp.cin == 0 ||
        !source_region(cp.w, ob, xb, nsp, j, src_lo)) {
      conv_.forget(conv_kind::backward_weights); // this dy is not the one last reordered
      return;                                    // nothing to add
    }
    j.kind = conv_kind::backward_weights;
    finish_job(j, cp, xb, src_lo, dw);
    index_t oext[s3];
    for (int i = 0; i < nsp; ++i) oext[i] = ob.extent(d3(nsp, i));
    j.usr_dst = block_md(dyb, cp.cout, oext, nsp);
    j.dst_ptr = const_cast<float*>(at(dyb, ob.lo));
    dw_.resize(static_cast<std::size_t>(element_count(dw.shape)));
    conv_.run(op, j, dw_.data(), x_kept);
    add_into(dw);
  }

  void conv_backward_bias(const_block_ref<float> dy, box const& out_box, float* db) override {
    ref_->conv_backward_bias(dy, out_box, db);
  }
  void pool_forward(const_block_ref<float> x, dims const& in_extent, block_ref<float> y,
                    box const& out_box, pool_params const& p, bool keep) override {
    if (!pool_.forward(x, in_extent, y, out_box, p, keep))
      ref_->pool_forward(x, in_extent, y, out_box, p, false);
  }
  void pool_backward(const_block_ref<float> x, const_block_ref<float> dy, dims const& in_extent,
                     block_ref<float> dx, box const& in_box, pool_params const& p,
                     bool x_kept) override {
    if (!pool_.backward(x, dy, in_extent, dx, in_box, p, x_kept))
      ref_->pool_backward(x, dy, in_extent, dx, in_box, p, false);
  }
  // The element-wise and batch-norm passes are memory-bound: halox's vectorised host loops
  // run them on the caller's strided views directly (oneDNN's eltwise and batch-norm primitives
  // would need dense layouts, i.e. copies around every haloed buffer).
  void relu_forward(const_tensor_ref<float> x, tensor_ref<float> y) override {
    fast_relu_forward<float>(x, y);
  }
  void relu_backward(const_tensor_ref<float> x, const_tensor_ref<float> dy,
                     tensor_ref<float> dx) override {
    fast_relu_backward<float>(x, dy, dx);
  }
  void bn_partial_stats(const_tensor_ref<float> x, bn_stats& out) override {
    fast_bn_partial_stats<float>(x, out);
  }
  void bn_backward_partial(const_tensor_ref<float> x, const_tensor_ref<float> dy,
                           bn_moments const& m, bn_grad_sums& out) override {
    fast_bn_backward_partial<float>(x, dy, m, out);
  }
  void bn_apply(const_tensor_ref<float> x, bn_moments const& m, float const* gamma,
                float const* beta, tensor_ref<float> y) override {
    fast_bn_apply<float>(x, m, gamma, beta, y, false);
  }
  void bn_apply_relu(const_tensor_ref<float> x, bn_moments const& m, float const* gamma,
                     float const* beta, tensor_ref<float> y) override {
    fast_bn_apply<float>(x, m, gamma, beta, y, true);
  }
  void bn_backward_apply(const_tensor_ref<float> x, const_tensor_ref<float> dy, bn_moments const& m,
                         float const* gamma, bn_grad_sums const& total, bool training,
                         tensor_ref<float> dx) override {
    fast_bn_backward_apply<float>(x, dy, m, gamma, total, training, dx);
  }
  void lrn_forward(const_tensor_ref<float> x, tensor_ref<float> y, lrn_params const& p) override {
    fast_lrn_forward<float>(x, y, p);
    lrn_used_ = true;
  }
  void lrn_backward(const_tensor_ref<float> x, const_tensor_ref<float> dy, tensor_ref<float> dx,
                    lrn_params const& p) override {
    fast_lrn_backward<float>(x, dy, dx, p);
    lrn_used_ = true;
  }
  memory_use memory() const override {
    memory_use m;
    m.kept_reorders = conv_.held_bytes();
    m.keepable_reorders = conv_.keepable_bytes();
    m.held_host = m.kept_reorders + pool_.held_bytes();
    return m;
  }
  void keep_reorders(bool keep) override { conv_.keep_inputs(keep); }
  std::string describe() const override {
    return conv_.describe() + pool_.describe() +
           (lrn_used_ ? std::string("lrn: halox vectorised kernels (") + fast_lrn_isa() + ")\n"
                      : std::string());
  }

private:
  // The input region the outputs `ob` read, clipped to the input, and the zero padding left on
  // each side (the global padding inside these windows). False when some dimension reads
  // padding only. When x promises zeros beyond the global boundary (a haloed block after its
  // exchange), the region reaches into them instead of padding: a rank's clipped source is a
  // few rows short of its haloed block, so the view would be strided and every call would
  // reorder it; the whole haloed block is one dense array that oneDNN reads as it is.
  static bool source_region(window3 const& w, box3 const& ob, block3<float const> const& x, int nsp,
                            conv_job& j, index_t (&src_lo)[s3]) {
    j.nsp = nsp;
    for (int d = 0; d < s3; ++d) src_lo[d] = 0;
    for (int i = 0; i < nsp; ++i) {
      int const d = d3(nsp, i);
      source_span g = source_geometry(w, ob, d);
      if (g.hi <= g.lo) return false;
      if (x.zero_padding) { // padding only exists beyond the boundary: these rows are zeros
        index_t const below = std::min(g.pl, std::max<index_t>(g.lo - x.org[d], 0));
        index_t const above = std::min(g.pr, std::max<index_t>(x.org[d] + x.ext[d] - g.hi, 0));
        g.lo -= below;
        g.pl -= below;
        g.hi += above;
        g.pr -= above;
      }
      src_lo[d] = g.lo;
      j.src.push_back(g.hi - g.lo);
      j.dst.push_back(ob.extent(d));
      j.pl.push_back(g.pl);
      j.pr.push_back(g.pr);
    }
    return true;
  }

  // Completes a forward / backward-weights job whose source is x at src_lo.
  template <class W> static void finish_job(conv_job& j, conv_problem const& cp,
                                            block3<float const> const& xb,
                                            index_t const (&src_lo)[s3], tensor_ref<W> const& w) {
    int const nsp = j.nsp;
    index_t sext[s3];
    std::copy(j.src.begin(), j.src.end(), sext);
    j.src.insert(j.src.begin(), {xb.n, cp.cin});
    j.dst.insert(j.dst.begin(), {xb.n, cp.cout});
    j.wei.assign(w.shape.begin(), w.shape.end());
    fill_window(j, cp.w);
    j.usr_src = block_md(xb, cp.cin, sext, nsp);
    j.usr_wei = weights_md(w);
    j.src_ptr = const_cast<float*>(at(xb, src_lo));
  }

  // dw += the dense [O, I, k...] gradient in dw_ (dw may be strided): one vectorisable loop per
  // run contiguous in both, which is the whole tensor when dw is dense.
  void add_into(tensor_ref<float> const& dw) {
    dense_.resize(dw.shape.size()); // the row-major strides of dw_; sized once
    index_t s = 1;
    for (std::size_t d = dw.shape.size(); d-- > 0; s *= dw.shape[d]) dense_[d] = s;
    for_each_run(dw.shape, dw.strides, dense_, dense_,
                 [&](index_t o, index_t k, index_t, index_t n) {
                   float* const out = dw.data + o;
                   float const* const in = dw_.data() + k;
                   for (index_t j = 0; j < n; ++j) out[j] += in[j];
                 });
  }

  std::unique_ptr<compute_kernels<float>> ref_;
  onednn::conv_engine conv_;
  onednn::pool_engine pool_;
  bool lrn_used_ = false;
  std::vector<float> dw_;
  dims dense_;
  conv_job job_; // reused by every call, so a known problem allocates nothing
};

} // namespace

std::unique_ptr<compute_kernels<float>> make_onednn_kernels() {
  return std::make_unique<onednn_kernels>();
}

} // namespace halox::ops::detail
