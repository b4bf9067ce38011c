// The cudnn compute provider against the reference kernels: convolution (forward, dx, dw, db)
// and pooling computed box by box (strided views, padding unequal on the two sides) on device
// buffers, in float and double, 1-D to 3-D, compared with the reference on the host. Every rank
// runs the same serial cases. Skips with the reason when no CUDA device is visible or halox was
// built without cuDNN.
#include "gpu_support.hpp"

#include <halox/ops/conv.hpp>
#include <halox/ops/pool.hpp>
#include <halox/ops/provider.hpp>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace {

namespace ops = halox::ops;
using halox::index_t;

template <class T> struct device_vec {
  T* p = nullptr;
  std::size_t n = 0;
  explicit device_vec(std::vector<T> const& h) : n(h.size()) {
    cudaMalloc(reinterpret_cast<void**>(&p), std::max<std::size_t>(n, 1) * sizeof(T));
    cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~device_vec() { cudaFree(p); }
  device_vec(device_vec const&) = delete;
  device_vec& operator=(device_vec const&) = delete;
  std::vector<T> host() const {
    std::vector<T> h(n);
    cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
};

template <class T> std::vector<T> rnd(index_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<T>(u(g));
  return v;
}

template <class T> double rel(std::vector<T> const& a, std::vector<T> const& b) {
  double m = 1, e = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::abs(static_cast<double>(b[i])));
    double const d = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    e = std::isnan(d) ? 1e300 : std::max(e, d);
  }
  return e / m;
}

halox::box whole(std::vector<index_t> const& shape) {
  halox::box b;
  b.nd = static_cast<int>(shape.size()) - 2;
  for (int i = 0; i < b.nd; ++i) b.hi[i] = shape[2 + i];
  return b;
}

// Two boxes splitting the first spatial dimension (an interior-and-boundary split).
std::vector<halox::box> halves(std::vector<index_t> const& shape) {
  halox::box a = whole(shape), b = a;
  a.hi[0] = b.lo[0] = shape[2] / 2;
  return {a, b};
}

std::string skip_reason() {
  if (!ops::provider_built(ops::compute_provider::cudnn))
    return "halox built without cuDNN (HALOX_ENABLE_CUDNN=OFF)";
  return halox::gpu_test::any_rank(halox::gpu_test::device_problem());
}

template <class T> void conv_case(std::vector<index_t> xs, std::vector<index_t> ws,
                                  ops::conv_params const& p, double tol) {
  auto const ys = ops::conv_output_shape(xs, ws, p);
  std::vector<index_t> const in(xs.begin() + 2, xs.end());
  auto const x = rnd<T>(ops::element_count(xs), 1), w = rnd<T>(ops::element_count(ws), 2);
  auto const b = rnd<T>(ws[0], 3), dy = rnd<T>(ops::element_count(ys), 4);
  std::vector<T> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
  ops::conv_forward<T>({x.data(), xs}, {w.data(), ws}, b.data(), {y.data(), ys}, p);
  ops::conv_backward_data<T>({dy.data(), ys}, {w.data(), ws}, {dx.data(), xs}, p);
  ops::conv_backward_weights<T>({x.data(), xs}, {dy.data(), ys}, {dw.data(), ws}, p);
  ops::conv_backward_bias<T>({dy.data(), ys}, db.data());

  device_vec<T> dX(x), dW(w), dB(b), dDY(dy), dY(std::vector<T>(y.size())),
      dDX(std::vector<T>(x.size())), dDW(std::vector<T>(w.size(), T(0))),
      dDB(std::vector<T>(b.size(), T(0)));
  ops::local_kernels<T> k(ops::compute_provider::cudnn);
  ops::const_block_ref<T> const xb(ops::const_tensor_ref<T>(dX.p, xs));
  ops::const_block_ref<T> const dyb(ops::const_tensor_ref<T>(dDY.p, ys));
  for (auto const& ob : halves(ys)) {
    k.conv_forward_box(xb, in, {dW.p, ws}, dB.p, ops::block_ref<T>(ops::tensor_ref<T>(dY.p, ys)),
                       ob, p);
    k.conv_backward_weights_box(xb, in, dyb, {dDW.p, ws}, ob, p);
    k.conv_backward_bias_box(dyb, ob, dDB.p);
  }
  for (auto const& ib : halves(xs))
    k.conv_backward_data_box(dyb, in, {dW.p, ws}, ops::block_ref<T>(ops::tensor_ref<T>(dDX.p, xs)),
                             ib, p);
  EXPECT_LE(rel(dY.host(), y), tol) << "y";
  EXPECT_LE(rel(dDX.host(), dx), tol) << "dx";
  EXPECT_LE(rel(dDW.host(), dw), tol) << "dw";
  EXPECT_LE(rel(dDB.host(), db), tol) << "db";
  EXPECT_NE(k.describe().find("cudnn conv"), std::string::npos) << k.describe();
}

template <class T> void pool_case(std::vector<index_t> xs, ops::pool_params const& p, double tol) {
  auto const ys = ops::pool_output_shape(xs, p);
  std::vector<index_t> const in(xs.begin() + 2, xs.end());
  auto const x = rnd<T>(ops::element_count(xs), 5), dy = rnd<T>(ops::element_count(ys), 6);
  std::vector<T> y(dy.size()), dx(x.size());
  ops::pool_forward<T>({x.data(), xs}, {y.data(), ys}, p);
  ops::pool_backward<T>({x.data(), xs}, {dy.data(), ys}, {dx.data(), xs}, p);
  device_vec<T> dX(x), dDY(dy), dY(std::vector<T>(y.size())), dDX(std::vector<T>(x.size()));
  ops::local_kernels<T> k(ops::compute_provider::cudnn);
  // Half boxes: strided views whose padding differs on the two sides, as at a block edge.
  for (auto const& ob : halves(ys))
    k.pool_forward_box(ops::const_tensor_ref<T>(dX.p, xs), in,
                       ops::block_ref<T>(ops::tensor_ref<T>(dY.p, ys)), ob, p);
  for (auto const& ib : halves(xs))
    k.pool_backward_box(ops::const_tensor_ref<T>(dX.p, xs), ops::const_tensor_ref<T>(dDY.p, ys), in,
                        ops::block_ref<T>(ops::tensor_ref<T>(dDX.p, xs)), ib, p);
  EXPECT_LE(rel(dY.host(), y), tol) << "pool y";
  EXPECT_LE(rel(dDX.host(), dx), tol) << "pool dx";
}

} // namespace

TEST(GpuProviders, CudnnConvMatchesReference) {
  auto const why = skip_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  halox::gpu_test::select_device();
  ops::conv_params const same{{1}, {1}, {1}, {}}, s2{{2}, {1}, {1}, {}}, asym{{1}, {0}, {2}, {2}};
  conv_case<float>({2, 8, 12, 12}, {16, 8, 3, 3}, same, 1e-4);
  conv_case<float>({2, 8, 13, 11}, {8, 8, 3, 3}, s2, 1e-4);
  conv_case<float>({1, 4, 6, 7, 8}, {4, 4, 3, 3, 3}, same, 1e-4);
  conv_case<double>({2, 3, 10, 9}, {5, 3, 3, 2}, asym, 1e-10);
  conv_case<double>({1, 2, 5, 6, 7}, {3, 2, 2, 3, 3}, same, 1e-10);
}

TEST(GpuProviders, CudnnPoolMatchesReference) {
  auto const why = skip_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  halox::gpu_test::select_device();
  ops::pool_params mx;
  mx.kernel = {3};
  mx.stride = {2};
  mx.pad_lo = mx.pad_hi = {1};
  ops::pool_params avg = mx;
  avg.kind = ops::pool_kind::average;
  pool_case<float>({2, 4, 12, 12}, mx, 1e-6);
  pool_case<double>({1, 3, 6, 8, 8}, avg, 1e-12);
  ops::pool_params excl = avg; // divisor: the real inputs of each window
  excl.count_include_pad = false;
  pool_case<float>({2, 3, 9, 10}, excl, 1e-5);
  ops::pool_params one_d; // 1-D, padding before only
  one_d.kernel = {2};
  one_d.stride = {1};
  one_d.pad_lo = {1};
  one_d.pad_hi = {0};
  pool_case<double>({2, 3, 7}, one_d, 1e-12);
}
