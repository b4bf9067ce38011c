// The cuDNN provider (float and double, device memory). Convolutions run through the legacy
// cuDNN convolution API, whose algorithms `cudnnFind*AlgorithmEx` measures on the caller's
// buffers the first time a problem shape is seen (with the workspace each needs); the winner is
// remembered for the process (and HALOX_OPS_PLAN_CACHE). Boxes map to ordinary convolutions on
// sub-views as in the oneDNN provider. cuDNN 9's convolution engines take fully packed tensors
// only, so a box that is a strided view of a haloed buffer is copied into dense scratch (inputs
// before the call, outputs after it). cuDNN's padding is symmetric, so a box whose padding is not
// is computed through a zero-padded scratch copy; pooling always runs on such a copy, padded with
// the value the padding stands for (lowest for max, zero for average), with no cuDNN padding.
//
// The legacy convolution API is deprecated in cuDNN 9 but still shipped and still the one with
// Find*AlgorithmEx; the deprecation warnings are silenced for this file only.
//
// Why one file of about 1,000 lines: one class owns the cuDNN handle, the scratch buffers and
// the algorithm choices that every operation family shares, and it can only be checked on a GPU
// (the device tests of tests/gpu). Splitting it by family (convolution, pooling, batch norm and
// ReLU) is meant for a change that can be rerun there, not for one verified by compilation only.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include "ops/kernels/bn_affine.hpp"
#include "ops/kernels/conv_common.hpp"
#include "ops/kernels/geometry.hpp"
#include "ops/providers/choice_cache.hpp"
#include "ops/providers/compute_provider.hpp"

#include <halox/error.hpp>

#include <cuda_runtime.h>
#include <cudnn.h>

#include <limits>
#include <map>
#include <sstream>
#include <type_traits>

namespace halox::ops::detail {
namespace {

constexpr auto bad = errc::invalid_argument;

void check(cudnnStatus_t s, char const* call, char const* file, int line) {
  if (s != CUDNN_STATUS_SUCCESS)
    ::halox::detail::throw_error(errc::internal,
                                 std::string("cuDNN: ") + cudnnGetErrorString(s) +
                                     "; use provider reference with host buffers for this layer",
                                 call, file, line);
}
void check(cudaError_t s, char const* call, char const* file, int line) {
  if (s != cudaSuccess)
    ::halox::detail::throw_error(errc::internal, std::string("CUDA: ") + cudaGetErrorString(s),
                                 call, file, line);
}
#define HALOX_CUDNN(call) check((call), #call, __FILE__, __LINE__)

template <class T> cudnnDataType_t data_type() {
  return std::is_same_v<T, float> ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
}

// RAII descriptors.
struct tensor_desc_h {
  cudnnTensorDescriptor_t d = nullptr;
  tensor_desc_h() { HALOX_CUDNN(cudnnCreateTensorDescriptor(&d)); }
  ~tensor_desc_h() { cudnnDestroyTensorDescriptor(d); }
  tensor_desc_h(tensor_desc_h const&) = delete;
  tensor_desc_h& operator=(tensor_desc_h const&) = delete;
};
struct filter_desc_h {
  cudnnFilterDescriptor_t d = nullptr;
  filter_desc_h() { HALOX_CUDNN(cudnnCreateFilterDescriptor(&d)); }
  ~filter_desc_h() { cudnnDestroyFilterDescriptor(d); }
  filter_desc_h(filter_desc_h const&) = delete;
  filter_desc_h& operator=(filter_desc_h const&) = delete;
};
struct conv_desc_h {
  cudnnConvolutionDescriptor_t d = nullptr;
  conv_desc_h() { HALOX_CUDNN(cudnnCreateConvolutionDescriptor(&d)); }
  ~conv_desc_h() { cudnnDestroyConvolutionDescriptor(d); }
  conv_desc_h(conv_desc_h const&) = delete;
  conv_desc_h& operator=(conv_desc_h const&) = delete;
};
struct pool_desc_h {
  cudnnPoolingDescriptor_t d = nullptr;
  pool_desc_h() { HALOX_CUDNN(cudnnCreatePoolingDescriptor(&d)); }
  ~pool_desc_h() { cudnnDestroyPoolingDescriptor(d); }
  pool_desc_h(pool_desc_h const&) = delete;
  pool_desc_h& operator=(pool_desc_h const&) = delete;
};

// A grow-only device buffer.
struct device_buffer {
  void* p = nullptr;
  std::size_t bytes = 0;
  ~device_buffer() { cudaFree(p); }
  void* get(std::size_t n) {
    if (n > bytes) {
      HALOX_CUDNN(cudaFree(p));
      p = nullptr;
      bytes = 0; // stays consistent if the allocation below throws
      HALOX_CUDNN(cudaMalloc(&p, n));
      bytes = n;
    }
    return p;
  }
};

inline int d3(int nsp, int i) { return s3 - nsp + i; }

// A strided view in cuDNN's terms: at least 4 dimensions (1-D problems get a unit H).
struct view {
  std::vector<int> dims, strides;
  void* ptr = nullptr;
};

template <class B> view make_view(B const& b, int nsp, box3 const& bx, index_t c) {
  view v;
  v.dims = {static_cast<int>(b.n), static_cast<int>(c)};
  v.strides = {static_cast<int>(b.sn), static_cast<int>(b.sc)};
  if (nsp == 1) {
    v.dims.push_back(1);
    v.strides.push_back(static_cast<int>(b.str[2] * bx.extent(2)));
  }
  index_t off = 0;
  for (int i = 0; i < nsp; ++i) {
    int const d = d3(nsp, i);
    v.dims.push_back(static_cast<int>(bx.extent(d)));
    v.strides.push_back(static_cast<int>(b.str[d]));
    off += (bx.lo[d] - b.org[d]) * b.str[d];
  }
  v.ptr = const_cast<std::remove_const_t<std::remove_pointer_t<decltype(b.data)>>*>(b.data + off);
  return v;
}

// A dense scratch view of dims n x c x ext (cuDNN dims, >= 4).
view dense_view(std::vector<int> dims, void* ptr) {
  view v;
  v.dims = std::move(dims);
  v.strides.assign(v.dims.size(), 1);
  for (std::size_t d = v.dims.size() - 1; d-- > 0;) v.strides[d] = v.strides[d + 1] * v.dims[d + 1];
  v.ptr = ptr;
  return v;
}
std::size_t count(view const& v) {
  std::size_t n = 1;
  for (int d : v.dims) n *= static_cast<std::size_t>(d);
  return n;
}

// True when `v` is dense row-major (the strides of unit dimensions do not matter); then its
// strides are rewritten to the dense ones, which address the same elements.
bool packed(view& v) {
  view const d = dense_view(v.dims, v.ptr);
  for (std::size_t i = 0; i < v.dims.size(); ++i)
    if (v.dims[i] != 1 && v.strides[i] != d.strides[i]) return false;
  v.strides = d.strides;
  return true;
}

template <class T> void set(tensor_desc_h& t, view const& v) {
  HALOX_CUDNN(cudnnSetTensorNdDescriptor(t.d, data_type<T>(), static_cast<int>(v.dims.size()),
                                         v.dims.data(), v.strides.data()));
}

// Per-dimension window of a box problem in cuDNN's terms (1-D problems get a unit H).
struct win {
  std::vector<int> pad, stride, dil, kernel;
  std::vector<int> lo_pad_r; // padding after, per dimension (pad is the padding before)
  bool symmetric = true;
};

std::string key_str(std::vector<int> const& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "x" : "") + std::to_string(v[i]);
  return s;
}

template <class T> class cudnn_kernels final : public compute_kernels<T> {
public:
  cudnn_kernels() {
    int n = 0;
    cudaError_t const e = cudaGetDeviceCount(&n);
    HALOX_REQUIRE(e == cudaSuccess && n > 0, errc::invalid_argument,
                  std::string("compute provider cudnn: no CUDA device visible (") +
                      cudaGetErrorString(e) +
                      "); run on a GPU node or choose provider reference or onednn");
    HALOX_CUDNN(cudnnCreate(&h_));
  }
  ~cudnn_kernels() override { cudnnDestroy(h_); }

  compute_provider kind() const noexcept override { return compute_provider::cudnn; }

  void conv_forward(const_block_ref<T> x, dims const& in_extent, const_tensor_ref<T> w,
                    T const* bias, block_ref<T> y, box const& out_box,
                    conv_params const& p) override {
    char const* op = "conv_forward_box (cudnn)";
    auto const [nsp, xb, yb, cp, ob] = check_conv_forward(op, x, in_extent, w, y, out_box, p);
    window3 const& g = cp.w;
    index_t const cin = cp.cin, cout = cp.cout;
    require_device(op, {x.ref.data, w.data, y.ref.data});
    if (ob.volume() == 0 || xb.n == 0 || cout == 0) return;
    box3 src;
    win wd;
    view yv = make_view(yb, nsp, ob, cout);
    if (!region(g, ob, nsp, src, wd)) { // windows read padding only: y = bias
      fill_bias(yv, bias);
      return;
    }
    view xv = source(xb, nsp, src, cin, wd, scratch_x_);
    conv_run(op, 0, xv, w, yv, wd, nullptr, bias);
  }

  void conv_backward_data(const_block_ref<T> dy, dims const& in_extent, const_tensor_ref<T> w,
                          block_ref<T> dx, box const& in_box, conv_params const& p,
                          bool /*dy_kept: dy is read in place*/) override {
    char const* op = "conv_backward_data_box (cudnn)";
    auto const [nsp, dyb, dxb, cp, ib, ofp] =
        check_conv_backward_data(op, dy, in_extent, w, dx, in_box, p);
    window3 const& g = cp.w;
    index_t const cin = cp.cin, cout = cp.cout;
    require_device(op, {dy.ref.data, w.data, dx.ref.data});
    if (ib.volume() == 0 || dxb.n == 0 || cin == 0) return;
    view dxv = make_view(dxb, nsp, ib, cin);
    if (ofp.volume() == 0 || cout == 0) {
      T const zero = 0;
      tensor_desc_h t;
      set<T>(t, dxv);
      HALOX_CUDNN(cudnnSetTensor(h_, t.d, dxv.ptr, &zero));
      return;
    }
    // dy over the footprint, extended with zeros to whole windows; pads never negative.
    win wd;
    std::vector<int> ext_lo, dyd{static_cast<int>(dxb.n), static_cast<int>(cout)};
    std::vector<int> pr;
    bool extended = false;
    if (nsp == 1) {
      dyd.push_back(1);
      ext_lo.push_back(0);
      wd.pad = {0};
      pr.push_back(0);
      wd.stride = {1};
      wd.dil = {1};
    }
    for (int i = 0; i < nsp; ++i) {
      int const d = d3(nsp, i);
      backward_data_span const b = backward_data_geometry(g, ib, ofp, d);
      extended = extended || b.extended;
      dyd.push_back(static_cast<int>(b.ohi - b.olo));
      ext_lo.push_back(static_cast<int>(b.ext_lo));
      wd.pad.push_back(static_cast<int>(b.pl));
      pr.push_back(static_cast<int>(b.pr));
      wd.stride.push_back(static_cast<int>(g.s[d]));
      wd.dil.push_back(static_cast<int>(g.d[d]));
      wd.symmetric = wd.symmetric && b.pl == b.pr;
    }
    view dyv = make_view(dyb, nsp, ofp, cout);
    if (extended) dyv = embed(dyv, dyd, ext_lo, scratch_dy_);
    if (wd.symmetric) {
      conv_run(op, 1, dxv, w, dyv, wd, nullptr);
      return;
    }
    // asymmetric: dx over the padded region in scratch, then its interior into dx
    std::vector<int> pd{dxv.dims[0], dxv.dims[1]}, off{0, 0};
    for (std::size_t i = 2; i < dxv.dims.size(); ++i) {
      pd.push_back(dxv.dims[i] + wd.pad[i - 2] + pr[i - 2]);
      off.push_back(wd.pad[i - 2]);
    }
    view full = dense_view(pd, scratch_dx_.get(count(dense_view(pd, nullptr)) * sizeof(T)));
    win w0 = wd;
    std::fill(w0.pad.begin(), w0.pad.end(), 0);
    conv_run(op, 1, full, w, dyv, w0, nullptr);
    copy(sub(full, dxv.dims, off), dxv);
  }

  void conv_backward_weights(const_block_ref<T> x, dims const& in_extent, const_block_ref<T> dy,
                             tensor_ref<T> dw, box const& out_box, conv_params const& p,
                             bool /*x_kept: nothing kept*/) override {
    char const* op = "conv_backward_weights_box (cudnn)";
    check_ref(op, "dw", dw);
    HALOX_REQUIRE(dw.strides == contiguous_strides(dw.shape), bad,
                  std::string(op) + ": dw " + fmt(dw.shape) +
                      " must be dense row-major (cuDNN filters are packed); pass a contiguous "
                      "buffer");
    auto const [nsp, xb, dyb, cp, ob] =
        check_conv_backward_weights(op, x, in_extent, dy, dw, out_box, p);
    window3 const& g = cp.w;
    index_t const cin = cp.cin, cout = cp.cout;
    require_device(op, {x.ref.data, dy.ref.data, dw.data});
    box3 src;
    win wd;
    if (ob.volume() == 0 || xb.n == 0 || cout == 0 || cin == 0 || !region(g, ob, nsp, src, wd))
      return;
    view xv = source(xb, nsp, src, cin, wd, scratch_x_);
    view dyv = make_view(dyb, nsp, ob, cout);
    conv_run(op, 2, xv, const_tensor_ref<T>(dw.data, dw.shape, dw.strides), dyv, wd, dw.data);
  }

  void conv_backward_bias(const_block_ref<T> dy, box const& out_box, T* db) override {
    char const* op = "conv_backward_bias_box (cudnn)";
    int const nsp = spatial_dims(op, "dy", dy.ref.rank());
    block3<T const> dyb = to_block3(op, "dy", dy, nsp);
    box3 const ob = to_box3(op, "out_box", out_box, nsp);
    require_covers(op, "dy", dyb, ob, nsp, "out_box");
    HALOX_REQUIRE(db != nullptr || dyb.c == 0, bad, std::string(op) + ": db is null");
    require_device(op, {dy.ref.data, db});
    if (ob.volume() == 0 || dyb.n == 0 || dyb.c == 0) return;
    view dyv = make_view(dyb, nsp, ob, dyb.c);
    if (!packed(dyv)) { // cuDNN 9 reduces packed tensors only
      view const d = dense_view(dyv.dims, pack_c_.get(count(dyv) * sizeof(T)));
      copy(dyv, d);
      dyv = d;
    }
    tensor_desc_h td, bd;
    set<T>(td, dyv);
    set<T>(bd, bias_view(dyv, db));
    T const one = 1;
    HALOX_CUDNN(cudnnConvolutionBackwardBias(h_, &one, td.d, dyv.ptr, &one, bd.d, db));
  }

  void pool_forward(const_block_ref<T> x, dims const& in_extent, block_ref<T> y, box const& out_box,
                    pool_params const& p, bool /*keep: the winners are found again*/) override {
    char const* op = "pool_forward_box (cudnn)";
    int const nsp = spatial_dims(op, "x", x.ref.rank());
    block3<T const> xb = to_block3(op, "x", x, nsp);
    block3<T> yb = to_block3(op, "y", y, nsp);
    window3 const g = pool_window(op, in_extent, p);
    box3 const ob = to_box3(op, "out_box", out_box, nsp);
    require_inside(op, "out_box", ob, g, false);
    require_covers(op, "y", yb, ob, nsp, "out_box");
    require_covers(op, "x", xb, input_footprint(g, ob), nsp, "the input footprint of out_box");
    require_device(op, {x.ref.data, y.ref.data});
    if (ob.volume() == 0 || xb.n == 0 || xb.c == 0) return;
    box3 src;
    win wd;
    HALOX_REQUIRE(region(g, ob, nsp, src, wd), errc::internal,
                  std::string(op) + ": the windows of out_box read no input");
    HALOX_REQUIRE(pool_ok(wd), bad,
                  std::string(op) + ": cuDNN pooling has no dilation; use provider reference or "
                                    "onednn for dilated pooling");
    index_t const c = xb.c;
    view const xp = padded_source(p, make_view(xb, nsp, src, c), wd);
    view const yd = out_view(xp, ob, nsp, scratch_y_);
    pool_desc_h pd;
    set_pool(pd, p, wd);
    tensor_desc_h xd, ydd;
    set<T>(xd, xp);
    set<T>(ydd, yd);
    T const one = 1, zero = 0;
    HALOX_CUDNN(cudnnPoolingForward(h_, pd.d, &one, xd.d, xp.ptr, &zero, ydd.d, yd.ptr));
    copy(p.kind == pool_kind::max ? yd : divided(yd, g, ob, p), make_view(yb, nsp, ob, c));
  }

  void pool_backward(const_block_ref<T> x, const_block_ref<T> dy, dims const& in_extent,
                     block_ref<T> dx, box const& in_box, pool_params const& p,
                     bool /*x_kept*/) override {
    char const* op = "pool_backward_box (cudnn)";
    int const nsp = spatial_dims(op, "dx", dx.ref.rank());
    block3<T> dxb = to_block3(op, "dx", dx, nsp);
    block3<T const> dyb = to_block3(op, "dy", dy, nsp);
    bool const is_max = p.kind == pool_kind::max; // average pooling does not read x
    block3<T const> xb = is_max ? to_block3(op, "x", x, nsp) : block3<T const>{};
    window3 const g = pool_window(op, in_extent, p);
    box3 const ib = to_box3(op, "in_box", in_box, nsp);
    require_inside(op, "in_box", ib, g, true);
    require_covers(op, "dx", dxb, ib, nsp, "in_box");
    box3 const ofp = output_footprint(g, ib);
    require_covers(op, "dy", dyb, ofp, nsp, "the output footprint of in_box");
    if (is_max)
      require_covers(op, "x", xb, input_footprint(g, ofp), nsp,
                     "the input footprint of the output footprint of in_box");
    require_device(op, {is_max ? x.ref.data : nullptr, dy.ref.data, dx.ref.data});
    if (ib.volume() == 0 || dxb.n == 0 || dxb.c == 0) return;
    box3 src;
    win wd;
    bool ok = ofp.volume() > 0 && region(g, ofp, nsp, src, wd);
    for (int d = 0; ok && d < s3; ++d) ok = ib.lo[d] >= src.lo[d] && ib.hi[d] <= src.hi[d];
    HALOX_REQUIRE(ok, bad,
                  std::string(op) + ": every input of in_box must lie inside some window for the "
                                    "cudnn provider; use provider reference");
    HALOX_REQUIRE(pool_ok(wd), bad,
                  std::string(op) + ": cuDNN pooling has no dilation; use provider reference or "
                                    "onednn for dilated pooling");
    index_t const c = dxb.c;
    // The forward pass again on the padded source (cuDNN's backward takes y), then the
    // gradient of that source, whose part under in_box is dx.
    std::vector<int> const before = wd.pad; // padded_source zeroes it
    view const xp =
        padded_source(p, is_max ? make_view(xb, nsp, src, c) : shape_of(dxb, nsp, src), wd);
    view const yd = out_view(xp, ofp, nsp, scratch_y_);
    view dyd = dense_view(yd.dims, scratch_dy_.get(count(yd) * sizeof(T)));
    copy(make_view(dyb, nsp, ofp, c), dyd);
    if (p.kind != pool_kind::max) dyd = divided(dyd, g, ofp, p);
    view const rv = dense_view(xp.dims, scratch_dx_.get(count(xp) * sizeof(T)));
    pool_desc_h pd;
    set_pool(pd, p, wd);
    tensor_desc_h xd, ydd, dydd, rd;
    set<T>(xd, xp);
    set<T>(ydd, yd);
    set<T>(dydd, dyd);
    set<T>(rd, rv);
    T const one = 1, zero = 0;
    HALOX_CUDNN(cudnnPoolingForward(h_, pd.d, &one, xd.d, xp.ptr, &zero, ydd.d, yd.ptr));
    HALOX_CUDNN(cudnnPoolingBackward(h_, pd.d, &one, ydd.d, yd.ptr, dydd.d, dyd.ptr, xd.d, xp.ptr,
                                     &zero, rd.d, rv.ptr));
    view const dxv = make_view(dxb, nsp, ib, c);
    std::vector<int> off{0, 0};
    if (nsp == 1) off.push_back(0);
    for (int i = 0; i < nsp; ++i) {
      int const d = d3(nsp, i);
      off.push_back(static_cast<int>(ib.lo[d] - src.lo[d]) + before[off.size() - 2]);
    }
    copy(sub(rv, dxv.dims, off), dxv);
  }

  void relu_forward(const_tensor_ref<T> x, tensor_ref<T> y) override {
    char const* op = "relu_forward (cudnn)";
    HALOX_REQUIRE(x.shape == y.shape, bad,
                  std::string(op) + ": y " + fmt(y.shape) + " must have x's shape " + fmt(x.shape));
    if (x.size() == 0) return;
    require_device(op, {x.data, y.data});
    tensor_desc_h xd, yd;
    set<T>(xd, flat_view(x));
    set<T>(yd, flat_view(y));
    activation a;
    T const one = 1, zero = 0;
    HALOX_CUDNN(cudnnActivationForward(h_, a.d, &one, xd.d, x.data, &zero, yd.d, y.data));
  }

  void relu_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy, tensor_ref<T> dx) override {
    char const* op = "relu_backward (cudnn)";
    HALOX_REQUIRE(x.shape == dy.shape && x.shape == dx.shape, bad,
                  std::string(op) + ": x " + fmt(x.shape) + ", dy " + fmt(dy.shape) + " and dx " +
                      fmt(dx.shape) + " must have one shape");
    if (x.size() == 0) return;
    require_device(op, {x.data, dy.data, dx.data});
    tensor_desc_h xd, dyd, dxd;
    set<T>(xd, flat_view(x));
    set<T>(dyd, flat_view(dy));
    set<T>(dxd, flat_view(dx));
    activation a;
    T const one = 1, zero = 0;
    // ReLU's gradient depends only on the sign pattern, which x and y = relu(x) share.
    HALOX_CUDNN(cudnnActivationBackward(h_, a.d, &one, xd.d, x.data, dyd.d, dy.data, xd.d, x.data,
                                        &zero, dxd.d, dx.data));
  }

  // The batch-norm passes keep halox's (count, mean, M2) statistics, merged on the host across
  // ranks; cuDNN's fused batch norm cannot take merged statistics, so each pass is built from
  // cuDNN tensor operations: per-channel reductions (cudnnReduceTensor on dense copies) and
  // per-channel affine maps (cudnnOpTensor / cudnnAddTensor with [1, C, 1, ...] operands whose
  // coefficients are computed in double on the host). Reductions accumulate in T.
  void bn_partial_stats(const_tensor_ref<T> x, bn_stats& s) override {
    char const* op = "bn_partial_stats (cudnn)";
    bn_check(op, x, {});
    index_t const c = x.shape[1];
    s.count = c > 0 ? x.size() / c : 0;
    s.mean.assign(static_cast<std::size_t>(c), 0.0);
    s.m2.assign(static_cast<std::size_t>(c), 0.0);
    if (x.size() == 0) return;
    require_device(op, {x.data});
    view const xv = flat_view(x);
    view const d = dense_view(xv.dims, scratch_x_.get(count(xv) * sizeof(T)));
    copy(xv, d);
    std::vector<double> const sum = channel_sums(d, false);
    std::vector<T> neg_mean(static_cast<std::size_t>(c));
    for (index_t i = 0; i < c; ++i) {
      s.mean[i] = sum[i] / static_cast<double>(s.count);
      neg_mean[i] = static_cast<T>(-s.mean[i]);
    }
    // Deviations from the mean, then their norms: the two-pass M2 of the reference.
    add_channels(d, upload(neg_mean, scratch_c1_));
    std::vector<double> const norm = channel_sums(d, true);
    for (index_t i = 0; i < c; ++i) s.m2[i] = norm[i] * norm[i];
    return;
  }

  void bn_backward_partial(const_tensor_ref<T> x, const_tensor_ref<T> dy, bn_moments const& m,
                           bn_grad_sums& s) override {
    char const* op = "bn_backward_partial (cudnn)";
    bn_check(op, x, {&dy});
    require_moments(op, m, x.shape[1]);
    index_t const c = x.shape[1];
    s.count = c > 0 ? x.size() / c : 0;
    s.sum_dy.assign(static_cast<std::size_t>(c), 0.0);
    s.sum_dy_xhat.assign(static_cast<std::size_t>(c), 0.0);
    if (x.size() == 0) return;
    require_device(op, {x.data, dy.data});
    view const xv = flat_view(x), dyv = flat_view(dy);
    view const dx = dense_view(xv.dims, scratch_x_.get(count(xv) * sizeof(T)));
    view const dd = dense_view(xv.dims, scratch_dy_.get(count(xv) * sizeof(T)));
    copy(dyv, dd);
    s.sum_dy = channel_sums(dd, false);
    std::vector<T> neg_mean(static_cast<std::size_t>(c));
    for (index_t i = 0; i < c; ++i) neg_mean[i] = static_cast<T>(-m.mean[i]);
    copy(xv, dx);
    add_channels(dx, upload(neg_mean, scratch_c1_));
    view const prod = dense_view(xv.dims, scratch_dx_.get(count(xv) * sizeof(T)));
    op_tensor(CUDNN_OP_TENSOR_MUL, dx, dd, prod); // (x - mean) * dy
    std::vector<double> const sdx = channel_sums(prod, false);
    for (index_t i = 0; i < c; ++i) s.sum_dy_xhat[i] = sdx[i] * m.invstd[i];
    return;
  }

  void bn_apply(const_tensor_ref<T> x, bn_moments const& m, T const* gamma, T const* beta,
                tensor_ref<T> y) override {
    char const* op = "bn_apply (cudnn)";
    bn_check(op, x, {});
    bn_check(op, y, {});
    HALOX_REQUIRE(x.shape == y.shape, bad,
                  std::string(op) + ": y " + fmt(y.shape) + " must have x's shape " + fmt(x.shape));
    require_moments(op, m, x.shape[1]);
    if (x.size() == 0) return;
    require_device(op, {x.data, y.data, gamma, beta});
    index_t const c = x.shape[1];
    bn_forward_affine const f =
        bn_forward_coefficients(m, as_double(download(gamma, c)), as_double(download(beta, c)));
    std::vector<T> const scale = as_t(f.scale), shift = as_t(f.shift);
    // Through a dense copy, so that y may be x itself.
    view const xv = flat_view(x);
    view const d = dense_view(xv.dims, scratch_x_.get(count(xv) * sizeof(T)));
    op_tensor(CUDNN_OP_TENSOR_MUL, xv, channel_view(xv, upload(scale, scratch_c1_)), d);
    add_channels(d, upload(shift, scratch_c2_));
    copy(d, flat_view(y));
  }

  void bn_backward_apply(const_tensor_ref<T> x, const_tensor_ref<T> dy, bn_moments const& m,
                         T const* gamma, bn_grad_sums const& total, bool training,
                         tensor_ref<T> dx) override {
    char const* op = "bn_backward_apply (cudnn)";
    bn_check(op, x, {&dy});
    bn_check(op, dx, {});
    HALOX_REQUIRE(x.shape == dx.shape, bad,
                  std::string(op) + ": dx " + fmt(dx.shape) + " must have x's shape " +
                      fmt(x.shape));
    index_t const c = x.shape[1];
    require_moments(op, m, c);
    if (training) require_grad_sums(op, total, c);
    if (x.size() == 0) return;
    require_device(op, {x.data, dy.data, dx.data, gamma});
    bn_backward_affine const k =
        bn_backward_coefficients(m, as_double(download(gamma, c)), total, training);
    std::vector<T> const a = as_t(k.a), b = as_t(k.b), e = as_t(k.e);
    view const xv = flat_view(x), dyv = flat_view(dy);
    view const d1 = dense_view(xv.dims, scratch_x_.get(count(xv) * sizeof(T)));
    view const d2 = dense_view(xv.dims, scratch_dy_.get(count(xv) * sizeof(T)));
    op_tensor(CUDNN_OP_TENSOR_MUL, dyv, channel_view(dyv, upload(a, scratch_c1_)), d1);
    if (training) {
      op_tensor(CUDNN_OP_TENSOR_MUL, xv, channel_view(xv, upload(b, scratch_c2_)), d2);
      add_full(d1, d2);
      add_channels(d1, upload(e, scratch_c3_));
    }
    // Written last, so that dx may be dy itself.
    copy(d1, flat_view(dx));
  }

  memory_use memory() const override {
    memory_use m;
    for (device_buffer const* b :
         {&ws_, &scratch_x_, &scratch_dy_, &scratch_dx_, &scratch_y_, &scratch_dw_, &pack_a_,
          &pack_c_, &scratch_f_, &scratch_div_, &scratch_c0_, &scratch_c1_, &scratch_c2_,
          &scratch_c3_, &scratch_red_})
      m.call_device += b->bytes;
    return m;
  }
  std::string describe() const override {
    std::ostringstream os;
    for (auto const& [key, c] : chosen_)
      os << "cudnn conv " << key << ": algo " << c.choice << ";" << format_costs(c) << "\n";
    return os.str();
  }

private:
  struct activation {
    cudnnActivationDescriptor_t d = nullptr;
    activation() {
      HALOX_CUDNN(cudnnCreateActivationDescriptor(&d));
      HALOX_CUDNN(cudnnSetActivationDescriptor(d, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
    }
    ~activation() { cudnnDestroyActivationDescriptor(d); }
    activation(activation const&) = delete;
    activation& operator=(activation const&) = delete;
  };

  struct op_tensor_desc {
    cudnnOpTensorDescriptor_t d = nullptr;
    explicit op_tensor_desc(cudnnOpTensorOp_t op) {
      HALOX_CUDNN(cudnnCreateOpTensorDescriptor(&d));
      HALOX_CUDNN(cudnnSetOpTensorDescriptor(d, op, data_type<T>(), CUDNN_PROPAGATE_NAN));
    }
    ~op_tensor_desc() { cudnnDestroyOpTensorDescriptor(d); }
    op_tensor_desc(op_tensor_desc const&) = delete;
    op_tensor_desc& operator=(op_tensor_desc const&) = delete;
  };
  struct reduce_desc {
    cudnnReduceTensorDescriptor_t d = nullptr;
    explicit reduce_desc(cudnnReduceTensorOp_t op) {
      HALOX_CUDNN(cudnnCreateReduceTensorDescriptor(&d));
      HALOX_CUDNN(cudnnSetReduceTensorDescriptor(d, op, data_type<T>(), CUDNN_PROPAGATE_NAN,
                                                 CUDNN_REDUCE_TENSOR_NO_INDICES,
                                                 CUDNN_32BIT_INDICES));
    }
    ~reduce_desc() { cudnnDestroyReduceTensorDescriptor(d); }
    reduce_desc(reduce_desc const&) = delete;
    reduce_desc& operator=(reduce_desc const&) = delete;
  };

  static void bn_check(char const* op, const_tensor_ref<T> const& x,
                       std::initializer_list<const_tensor_ref<T> const*> same) {
    HALOX_REQUIRE(x.rank() >= 2 && x.rank() <= 8 && x.shape.size() == x.strides.size(), bad,
                  std::string(op) + ": shape " + fmt(x.shape) +
                      " must be [N, C, ...] of rank 2 to 8 with one stride per dimension");
    for (auto const* o : same)
      HALOX_REQUIRE(o->shape == x.shape && o->strides.size() == o->shape.size(), bad,
                    std::string(op) + ": dy " + fmt(o->shape) + " must have x's shape " +
                        fmt(x.shape));
  }

  // A [1, C, 1, ...] operand of x's cuDNN rank at p.
  static view channel_view(view const& like, void* p) {
    std::vector<int> d(like.dims.size(), 1);
    d[1] = like.dims[1];
    return dense_view(d, p);
  }
  // Copies the per-channel host values into `buf`; returns the device copy.
  void* upload(std::vector<T> const& v, device_buffer& buf) {
    void* p = buf.get(v.size() * sizeof(T));
    HALOX_CUDNN(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return p;
  }
  static std::vector<double> as_double(std::vector<T> const& v) {
    return std::vector<double>(v.begin(), v.end());
  }
  static std::vector<T> as_t(std::vector<double> const& v) {
    std::vector<T> r(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) r[i] = static_cast<T>(v[i]);
    return r;
  }
  static std::vector<T> download(T const* p, index_t c) {
    if (p == nullptr) return {};
    std::vector<T> v(static_cast<std::size_t>(c));
    HALOX_CUDNN(cudaMemcpy(v.data(), p, v.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  // Per-channel sums (or Euclidean norms) of the dense tensor d, in double on the host.
  std::vector<double> channel_sums(view const& d, bool norm2) {
    reduce_desc r(norm2 ? CUDNN_REDUCE_TENSOR_NORM2 : CUDNN_REDUCE_TENSOR_ADD);
    view const out =
        channel_view(d, scratch_c0_.get(static_cast<std::size_t>(d.dims[1]) * sizeof(T)));
    tensor_desc_h ad, cd;
    set<T>(ad, d);
    set<T>(cd, out);
    std::size_t bytes = 0;
    HALOX_CUDNN(cudnnGetReductionWorkspaceSize(h_, r.d, ad.d, cd.d, &bytes));
    void* w = scratch_red_.get(bytes);
    T const one = 1, zero = 0;
    HALOX_CUDNN(
        cudnnReduceTensor(h_, r.d, nullptr, 0, w, bytes, &one, ad.d, d.ptr, &zero, cd.d, out.ptr));
    std::vector<T> const h = download(static_cast<T const*>(out.ptr), d.dims[1]);
    return std::vector<double>(h.begin(), h.end());
  }
  // c = a (op) k, k of a's dims or a [1, C, 1, ...] operand (channel_view).
  void op_tensor(cudnnOpTensorOp_t opk, view const& a, view const& kv, view const& c) {
    op_tensor_desc o(opk);
    tensor_desc_h ad, kd, cd;
    set<T>(ad, a);
    set<T>(kd, kv);
    set<T>(cd, c);
    T const one = 1, zero = 0;
    HALOX_CUDNN(cudnnOpTensor(h_, o.d, &one, ad.d, a.ptr, &one, kd.d, kv.ptr, &zero, cd.d, c.ptr));
  }
  // d += the per-channel values at k (device, one per channel of d).
  void add_channels(view const& d, void* k) {
    view const kv = channel_view(d, k);
    tensor_desc_h kd, dd;
    set<T>(kd, kv);
    set<T>(dd, d);
    T const one = 1;
    HALOX_CUDNN(cudnnAddTensor(h_, &one, kd.d, kv.ptr, &one, dd.d, d.ptr));
  }
  // d += e (same dims).
  void add_full(view const& d, view const& e) {
    tensor_desc_h ed, dd;
    set<T>(ed, e);
    set<T>(dd, d);
    T const one = 1;
    HALOX_CUDNN(cudnnAddTensor(h_, &one, ed.d, e.ptr, &one, dd.d, d.ptr));
  }

  static void require_device(char const* op, std::initializer_list<void const*> ptrs) {
    for (void const* p : ptrs) {
      if (p == nullptr) continue;
      cudaPointerAttributes a{};
      cudaError_t const e = cudaPointerGetAttributes(&a, p);
      HALOX_REQUIRE(
          e == cudaSuccess && (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged),
          bad,
          std::string(op) + ": a buffer is not device memory; the cudnn provider works on device "
                            "buffers (use provider reference or onednn for host buffers)");
    }
  }

  // Clipped source region of the outputs `ob`, and the window with the padding left inside it.
  static bool region(window3 const& g, box3 const& ob, int nsp, box3& src, win& wd) {
    src = box3{};
    wd = win{};
    if (nsp == 1) {
      wd.pad = {0};
      wd.stride = {1};
      wd.dil = {1};
      wd.kernel = {1};
      wd.lo_pad_r = {0};
    }
    for (int i = 0; i < nsp; ++i) {
      int const d = d3(nsp, i);
      source_span const sp = source_geometry(g, ob, d);
      if (sp.hi <= sp.lo) return false;
      src.lo[d] = sp.lo;
      src.hi[d] = sp.hi;
      wd.pad.push_back(static_cast<int>(sp.pl));
      wd.lo_pad_r.push_back(static_cast<int>(sp.pr));
      wd.stride.push_back(static_cast<int>(g.s[d]));
      wd.dil.push_back(static_cast<int>(g.d[d]));
      wd.kernel.push_back(static_cast<int>(g.k[d]));
      wd.symmetric = wd.symmetric && sp.pl == sp.pr;
    }
    return true;
  }

  static bool pool_ok(win const& wd) {
    for (int d : wd.dil)
      if (d != 1) return false;
    return true;
  }

  // Pooling runs on a padded copy of its source with no cuDNN padding (`padded_source`), so an
  // average is a plain window sum over the kernel size; `divided` turns it into halox's divisor.
  void set_pool(pool_desc_h& pd, pool_params const& p, win const& wd) const {
    cudnnPoolingMode_t const mode = p.kind == pool_kind::max
                                        ? CUDNN_POOLING_MAX_DETERMINISTIC
                                        : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    HALOX_CUDNN(cudnnSetPoolingNdDescriptor(pd.d, mode, CUDNN_PROPAGATE_NAN,
                                            static_cast<int>(wd.kernel.size()), wd.kernel.data(),
                                            wd.pad.data(), wd.stride.data()));
  }

  // The source view: the caller's region directly when the padding is symmetric, else a copy
  // into zero-padded scratch (then the convolution runs without padding).
  template <class B>
  view source(B const& b, int nsp, box3 const& src, index_t c, win& wd, device_buffer& buf) {
    view v = make_view(b, nsp, src, c);
    return wd.symmetric ? v : padded(v, wd, T(0), buf);
  }

  // `v` (a clipped source region) copied into dense scratch with the window's padding around
  // it, filled with `fill`, only the fill where v has no data; `wd.pad` is zero afterwards.
  view padded(view const& v, win& wd, T fill, device_buffer& buf) {
    std::vector<int> pd{v.dims[0], v.dims[1]}, off{0, 0};
    for (std::size_t i = 2; i < v.dims.size(); ++i) {
      pd.push_back(v.dims[i] + wd.pad[i - 2] + wd.lo_pad_r[i - 2]);
      off.push_back(wd.pad[i - 2]);
    }
    std::fill(wd.pad.begin(), wd.pad.end(), 0);
    return embed(v, pd, off, buf, fill);
  }

  // The source of a pooling box padded with what the padding stands for: -inf for max (never
  // a window's maximum; every window has a real tap), zero for average. cuDNN's own padding is
  // symmetric, which the padding of a box at a block edge seldom is; `wd.pad` is zero afterwards.
  view padded_source(pool_params const& p, view const& v, win& wd) {
    return padded(v, wd, p.kind == pool_kind::max ? -std::numeric_limits<T>::infinity() : T(0),
                  scratch_x_);
  }

  // The dims of the source region `src` of block b, with no data: average pooling's backward,
  // which cuDNN gives an x argument that it does not read.
  static view shape_of(block3<T> const& b, int nsp, box3 const& src) {
    std::vector<int> dims{static_cast<int>(b.n), static_cast<int>(b.c)};
    if (nsp == 1) dims.push_back(1);
    for (int i = 0; i < nsp; ++i) dims.push_back(static_cast<int>(src.extent(d3(nsp, i))));
    return dense_view(dims, nullptr);
  }

  // A dense [N, C, out...] view in `buf` for the pooling outputs `ob` of the padded source xp.
  static view out_view(view const& xp, box3 const& ob, int nsp, device_buffer& buf) {
    std::vector<int> dims{xp.dims[0], xp.dims[1]};
    if (nsp == 1) dims.push_back(1);
    for (int i = 0; i < nsp; ++i) dims.push_back(static_cast<int>(ob.extent(d3(nsp, i))));
    view v = dense_view(dims, nullptr);
    v.ptr = buf.get(count(v) * sizeof(T));
    return v;
  }

  // a (window sums over the kernel size, or their gradients, dense over the outputs `ob`)
  // times kernel size / halox's divisor per output position, in scratch: the average with
  // p.count_include_pad's divisor. `a` itself where every factor is 1.
  view divided(view const& a, window3 const& g, box3 const& ob, pool_params const& p) {
    std::vector<int> dims(a.dims.size(), 1);
    for (std::size_t i = 2; i < a.dims.size(); ++i) dims[i] = a.dims[i];
    view f = dense_view(dims, nullptr);
    std::vector<T> h;
    h.reserve(count(f));
    bool ones = true;
    index_t o[s3];
    for (o[0] = ob.lo[0]; o[0] < ob.hi[0]; ++o[0])
      for (o[1] = ob.lo[1]; o[1] < ob.hi[1]; ++o[1])
        for (o[2] = ob.lo[2]; o[2] < ob.hi[2]; ++o[2]) {
          index_t const div = avg_divisor(g, o, p.count_include_pad);
          ones = ones && div == g.kvol();
          h.push_back(static_cast<T>(static_cast<double>(g.kvol()) / static_cast<double>(div)));
        }
    if (ones) return a;
    f.ptr = upload(h, scratch_f_);
    view r = dense_view(a.dims, scratch_div_.get(count(a) * sizeof(T)));
    op_tensor(CUDNN_OP_TENSOR_MUL, a, f, r);
    return r;
  }

  // `v` copied into a dense buffer of `dims` at offset `off`, the rest `fill` (only the fill
  // where v has no data).
  view embed(view const& v, std::vector<int> const& dims, std::vector<int> off, device_buffer& buf,
             T fill = T(0)) {
    while (off.size() < dims.size()) off.insert(off.begin(), 0);
    view full = dense_view(dims, nullptr);
    full.ptr = buf.get(count(full) * sizeof(T));
    if (fill == T(0)) {
      HALOX_CUDNN(cudaMemsetAsync(full.ptr, 0, count(full) * sizeof(T)));
    } else {
      tensor_desc_h fd;
      set<T>(fd, full);
      HALOX_CUDNN(cudnnSetTensor(h_, fd.d, full.ptr, &fill));
    }
    if (v.ptr != nullptr) copy(v, sub(full, v.dims, off));
    return full;
  }

  static view sub(view const& full, std::vector<int> const& dims, std::vector<int> off) {
    while (off.size() < dims.size()) off.insert(off.begin(), 0);
    view s = full;
    s.dims = dims;
    std::size_t o = 0;
    for (std::size_t d = 0; d < dims.size(); ++d)
      o += static_cast<std::size_t>(off[d]) * static_cast<std::size_t>(full.strides[d]);
    s.ptr = static_cast<T*>(full.ptr) + o;
    return s;
  }

  void copy(view const& from, view const& to) {
    tensor_desc_h a, b;
    set<T>(a, from);
    set<T>(b, to);
    T const one = 1, zero = 0;
    HALOX_CUDNN(cudnnTransformTensor(h_, &one, a.d, from.ptr, &zero, b.d, to.ptr));
  }

  static view bias_view(view const& y, T const* bias) {
    std::vector<int> d(y.dims.size(), 1);
    d[1] = y.dims[1];
    return dense_view(d, const_cast<T*>(bias));
  }
  void add_bias(view const& y, T const* bias) {
    tensor_desc_h bd, yd;
    set<T>(bd, bias_view(y, bias));
    set<T>(yd, y);
    T const one = 1;
    HALOX_CUDNN(cudnnAddTensor(h_, &one, bd.d, bias, &one, yd.d, y.ptr));
  }
  void fill_bias(view const& y, T const* bias) {
    tensor_desc_h yd;
    set<T>(yd, y);
    T const zero = 0;
    HALOX_CUDNN(cudnnSetTensor(h_, yd.d, y.ptr, &zero));
    if (bias != nullptr) add_bias(y, bias);
  }

  static view flat_view(tensor_ref<T const> const& t) {
    view v;
    for (index_t i = 0; i < t.rank(); ++i) {
      v.dims.push_back(static_cast<int>(t.shape[i]));
      v.strides.push_back(static_cast<int>(t.strides[i]));
    }
    while (v.dims.size() < 4) {
      v.dims.push_back(1);
      v.strides.push_back(1);
    }
    v.ptr = const_cast<T*>(t.data);
    return v;
  }

  // Runs one convolution (kind 0 forward: a = x, c = y; 1 backward-data: a = dx, c = dy;
  // 2 backward-filter: a = x, c = dy, accumulating into dw), choosing the algorithm with
  // cudnnFind*AlgorithmEx the first time the shape is seen.
  // `bias` (forward only) is added to y. cuDNN 9's engines refuse strided tensors: a strided
  // input is packed into scratch before the call, a strided output computed in scratch and
  // copied out after it.
  void conv_run(char const* op, int kind, view const& a_user, const_tensor_ref<T> const& w,
                view const& c_user, win const& wd, T* dw, T const* bias = nullptr) {
    bool const a_out = kind == 1, c_out = kind == 0;
    view a = a_user, c = c_user;
    if (!packed(a)) {
      a = dense_view(a_user.dims, pack_a_.get(count(a_user) * sizeof(T)));
      if (!a_out) copy(a_user, a);
    }
    if (!packed(c)) {
      c = dense_view(c_user.dims, pack_c_.get(count(c_user) * sizeof(T)));
      if (!c_out) copy(c_user, c);
    }
    tensor_desc_h ad, cd;
    set<T>(ad, a);
    set<T>(cd, c);
    filter_desc_h fd;
    std::vector<int> fdims{static_cast<int>(w.shape[0]), static_cast<int>(w.shape[1])};
    if (a.dims.size() > w.shape.size()) fdims.push_back(1);
    for (std::size_t i = 2; i < w.shape.size(); ++i) fdims.push_back(static_cast<int>(w.shape[i]));
    HALOX_CUDNN(cudnnSetFilterNdDescriptor(fd.d, data_type<T>(), CUDNN_TENSOR_NCHW,
                                           static_cast<int>(fdims.size()), fdims.data()));
    conv_desc_h cv;
    HALOX_CUDNN(cudnnSetConvolutionNdDescriptor(cv.d, static_cast<int>(wd.pad.size()),
                                                wd.pad.data(), wd.stride.data(), wd.dil.data(),
                                                CUDNN_CROSS_CORRELATION, data_type<T>()));
    std::string const key = std::to_string(kind) + ",a=" + key_str(a.dims) + ":" +
                            key_str(a.strides) + ",c=" + key_str(c.dims) + ":" +
                            key_str(c.strides) + ",w=" + key_str(fdims) + ",p=" + key_str(wd.pad) +
                            ",s=" + key_str(wd.stride) + ",d=" + key_str(wd.dil) +
                            ",t=" + std::to_string(sizeof(T));
    measured_choice mc;
    int algo = 0;
    std::size_t ws_bytes = 0;
    auto known = chosen_.find(key);
    if (known != chosen_.end() || find_choice("cudnn", key, mc)) {
      if (known != chosen_.end()) mc = known->second;
      algo = std::stoi(mc.choice);
      ws_bytes = workspace_size(kind, ad, fd, cv, cd, algo);
    } else {
      find(kind, ad, a, fd, w, cv, cd, c, mc, algo, ws_bytes);
      store_choice("cudnn", key, mc);
    }
    chosen_[key] = mc;
    void* ws = ws_.get(ws_bytes);
    T const one = 1, zero = 0;
    if (kind == 0)
      HALOX_CUDNN(cudnnConvolutionForward(h_, &one, ad.d, a.ptr, fd.d, w.data, cv.d,
                                          static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws,
                                          ws_bytes, &zero, cd.d, c.ptr));
    else if (kind == 1)
      HALOX_CUDNN(cudnnConvolutionBackwardData(h_, &one, fd.d, w.data, cd.d, c.ptr, cv.d,
                                               static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws,
                                               ws_bytes, &zero, ad.d, a.ptr));
    else
      HALOX_CUDNN(cudnnConvolutionBackwardFilter(h_, &one, ad.d, a.ptr, cd.d, c.ptr, cv.d,
                                                 static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                                 ws, ws_bytes, &one, fd.d, dw));
    if (kind == 0 && bias != nullptr) add_bias(c, bias);
    if (a_out && a.ptr != a_user.ptr) copy(a, a_user);
    if (c_out && c.ptr != c_user.ptr) copy(c, c_user);
    (void)op;
  }

  std::size_t workspace_size(int kind, tensor_desc_h& ad, filter_desc_h& fd, conv_desc_h& cv,
                             tensor_desc_h& cd, int algo) {
    std::size_t n = 0;
    if (kind == 0)
      HALOX_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(
          h_, ad.d, fd.d, cv.d, cd.d, static_cast<cudnnConvolutionFwdAlgo_t>(algo), &n));
    else if (kind == 1)
      HALOX_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(
          h_, fd.d, cd.d, cv.d, ad.d, static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &n));
    else
      HALOX_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(
          h_, ad.d, cd.d, cv.d, fd.d, static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &n));
    return n;
  }

  // Measures every algorithm on the caller's buffers (a scratch filter for backward-filter,
  // whose result must accumulate into dw), with up to a quarter of the free device memory as
  // workspace.
  void find(int kind, tensor_desc_h& ad, view const& a, filter_desc_h& fd,
            const_tensor_ref<T> const& w, conv_desc_h& cv, tensor_desc_h& cd, view const& c,
            measured_choice& mc, int& algo, std::size_t& ws_bytes) {
    std::size_t free_b = 0, total_b = 0;
    HALOX_CUDNN(cudaMemGetInfo(&free_b, &total_b));
    std::size_t const cap = std::min<std::size_t>(free_b / 4, std::size_t(1) << 30);
    void* ws = ws_.get(cap);
    int n = 0;
    auto record = [&](auto const* perf, int count_) {
      bool first = true;
      for (int i = 0; i < count_; ++i) {
        bool const ok = perf[i].status == CUDNN_STATUS_SUCCESS;
        mc.costs.emplace_back(std::to_string(static_cast<int>(perf[i].algo)),
                              ok ? perf[i].time * 1e-3 : -1.0);
        if (ok && first) { // results come sorted by time
          first = false;
          algo = static_cast<int>(perf[i].algo);
          ws_bytes = perf[i].memory;
          mc.choice = std::to_string(algo);
        }
      }
      HALOX_REQUIRE(!first, errc::internal, "cuDNN found no working algorithm for this shape");
    };
    if (kind == 0) {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      HALOX_CUDNN(cudnnFindConvolutionForwardAlgorithmEx(h_, ad.d, a.ptr, fd.d, w.data, cv.d, cd.d,
                                                         c.ptr, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                         &n, perf, ws, cap));
      record(perf, n);
    } else if (kind == 1) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      HALOX_CUDNN(cudnnFindConvolutionBackwardDataAlgorithmEx(
          h_, fd.d, w.data, cd.d, c.ptr, cv.d, ad.d, a.ptr, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
          &n, perf, ws, cap));
      record(perf, n);
    } else {
      void* dw = scratch_dw_.get(static_cast<std::size_t>(w.size()) * sizeof(T));
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      HALOX_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithmEx(
          h_, ad.d, a.ptr, cd.d, c.ptr, cv.d, fd.d, dw, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n,
          perf, ws, cap));
      record(perf, n);
    }
  }

  cudnnHandle_t h_ = nullptr;
  device_buffer ws_, scratch_x_, scratch_dy_, scratch_dx_, scratch_y_, scratch_dw_;
  device_buffer pack_a_, pack_c_;         // packed copies of strided convolution operands
  device_buffer scratch_f_, scratch_div_; // average pooling: the factors, the divided values
  // Batch norm: per-channel operands and results, and the reduction workspace.
  device_buffer scratch_c0_, scratch_c1_, scratch_c2_, scratch_c3_, scratch_red_;
  std::map<std::string, measured_choice> chosen_;
};

} // namespace

template <class T> std::unique_ptr<compute_kernels<T>> make_cudnn_kernels() {
  return std::make_unique<cudnn_kernels<T>>();
}
template std::unique_ptr<compute_kernels<float>> make_cudnn_kernels();
template std::unique_ptr<compute_kernels<double>> make_cudnn_kernels();

} // namespace halox::ops::detail
