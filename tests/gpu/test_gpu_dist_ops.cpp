// The distributed operators on device buffers (provider cudnn, device halo exchanges) against
// the same operators on host buffers with the reference provider: convolution and pooling
// (forward and backward, 2-D and 3-D, overlap on and off), batch norm with global statistics
// (forward with running statistics, backward with parameter gradients) and ReLU, at every rank
// count the test runs (the spatial dimension H is split over the ranks; two ranks may share one
// GPU, as the exchanges go through MPI). Skips with the reason when no CUDA device is visible
// or halox was built without cuDNN.
#include "gpu_support.hpp"

#include <halox/error.hpp>
#include <halox/ops/distributed.hpp>
#include <halox/ops/ops.hpp>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

namespace ops = halox::ops;
using halox::backend;
using halox::index_t;
using halox::process_grid;
using halox::tensor_desc;
using halox::tensor_view;
using shape_t = std::vector<index_t>;

int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

std::string skip_reason() {
  if (!ops::provider_built(ops::compute_provider::cudnn))
    return "halox built without cuDNN (HALOX_ENABLE_CUDNN=OFF)";
  return halox::gpu_test::any_rank(halox::gpu_test::device_problem());
}

#define HALOX_SKIP_WITHOUT_GPU()                                                                   \
  do {                                                                                             \
    std::string const why = skip_reason();                                                         \
    if (!why.empty()) GTEST_SKIP() << why;                                                         \
    halox::gpu_test::select_device();                                                              \
  } while (0)

// A device copy of a host array (the same bytes), and back.
template <class T> struct device_vec {
  T* p = nullptr;
  std::size_t n = 0;
  explicit device_vec(std::vector<T> const& h) : n(h.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), std::max<std::size_t>(n, 1) * sizeof(T)),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~device_vec() { cudaFree(p); }
  device_vec(device_vec const&) = delete;
  device_vec& operator=(device_vec const&) = delete;
  std::vector<T> host() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  std::size_t bytes() const { return n * sizeof(T); }
};

template <class T> std::vector<T> random_vec(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(u(g));
  return v;
}

// Calls f(offset in the local buffer) for every owned cell of `d` on this rank.
template <class F> void for_each_owned(tensor_desc const& d, F&& f) {
  halox::box const own = d.owned_box();
  if (own.empty()) return;
  auto const off = d.owned_offset();
  int const nd = d.ndim();
  std::vector<index_t> i(own.lo, own.lo + nd);
  while (true) {
    index_t l = 0;
    for (int k = 0; k < nd; ++k) l += (i[k] - own.lo[k] + off[k]) * d.strides()[k];
    f(static_cast<std::size_t>(l));
    int k = nd - 1;
    for (; k >= 0; --k) {
      if (++i[k] < own.hi[k]) break;
      i[k] = own.lo[k];
    }
    if (k < 0) return;
  }
}

// A local buffer of d with random owned cells (the same on every call with the same seed) and
// NaN halos, so a halo the exchange misses or a padding cell a kernel reads shows.
template <class T> std::vector<T> local_buffer(tensor_desc const& d, std::uint64_t seed) {
  std::vector<T> v(static_cast<std::size_t>(d.local_elements()),
                   std::numeric_limits<T>::quiet_NaN());
  std::vector<T> const r =
      random_vec<T>(v.size(), seed + 7919u * static_cast<unsigned>(d.grid().rank()));
  for_each_owned(d, [&](std::size_t l) { v[l] = r[l]; });
  return v;
}

// Owned cells of two buffers of d: |got - want| <= tol * max(1, max|want|).
template <class T> void expect_owned_close(tensor_desc const& d, std::vector<T> const& got,
                                           std::vector<T> const& want, double tol,
                                           std::string const& what) {
  double scale = 1, err = 0;
  for_each_owned(
      d, [&](std::size_t c) { scale = std::max(scale, std::abs(static_cast<double>(want[c]))); });
  for_each_owned(d, [&](std::size_t c) {
    double const e = std::abs(static_cast<double>(got[c]) - static_cast<double>(want[c]));
    err = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(err, e);
  });
  EXPECT_LE(err, tol * scale) << what << " (rank " << d.grid().rank() << ")";
}

template <class T> void expect_close(std::vector<T> const& got, std::vector<T> const& want,
                                     double tol, std::string const& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1, err = 0;
  for (T w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  for (std::size_t c = 0; c < got.size(); ++c) {
    double const e = std::abs(static_cast<double>(got[c]) - static_cast<double>(want[c]));
    err = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(err, e);
  }
  EXPECT_LE(err, tol * scale) << what;
}

template <class T> double tolerance() { return std::is_same_v<T, float> ? 1e-4 : 1e-10; }

// Host options (reference kernels) and device options (cuDNN, staged MPI exchanges).
ops::dist_options host_opt(bool overlap) {
  ops::dist_options o;
  o.provider = ops::compute_provider::reference;
  o.overlap = overlap;
  o.overlap_min_interior = 0; // split off every interior of these small blocks
  return o;
}
ops::dist_options device_opt(bool overlap) {
  ops::dist_options o;
  o.provider = ops::compute_provider::cudnn;
  o.method = backend::staged_mpi;
  o.overlap = overlap;
  o.overlap_min_interior = 0;
  return o;
}

// The grid splitting H (dimension 2) over every rank.
std::vector<int> split_h(std::size_t rank) {
  std::vector<int> parts(rank, 1);
  parts[2] = world_size();
  return parts;
}

template <class T>
void conv_case(shape_t const& xs, shape_t const& ws, ops::conv_params const& p, bool overlap) {
  std::string const what =
      "conv " + std::to_string(xs.size() - 2) + "-D" + (overlap ? " overlap" : "");
  process_grid grid(MPI_COMM_WORLD, split_h(xs.size()));
  tensor_desc const x(grid, xs, halox::dtype_of<T>());
  ops::dist_conv<T> ref(x, ws, p, host_opt(overlap));
  ops::dist_conv<T> gpu(x, ws, p, device_opt(overlap));
  ASSERT_EQ(ref.input_desc().dist().str(), gpu.input_desc().dist().str());
  tensor_desc const &in = ref.input_desc(), &out = ref.output_desc();

  std::vector<T> xh = local_buffer<T>(in, 11), yh(static_cast<std::size_t>(out.local_elements()));
  std::vector<T> const w = random_vec<T>(static_cast<std::size_t>(ops::element_count(ws)), 12);
  std::vector<T> const b = random_vec<T>(static_cast<std::size_t>(ws[0]), 13);
  device_vec<T> xd(xh), yd(yh), wd(w), bd(b);
  ref.forward(tensor_view(in, xh), {w.data(), ws}, b.data(), tensor_view(out, yh));
  std::vector<T> const dyh = local_buffer<T>(out, 14);
  std::vector<T> dxh(static_cast<std::size_t>(in.local_elements()), T(0));
  std::vector<T> dwh(w.size()), dbh(b.size());
  ref.backward(tensor_view(in, xh), tensor_view(out, const_cast<std::vector<T>&>(dyh)),
               {w.data(), ws}, tensor_view(in, dxh), {dwh.data(), ws}, dbh.data());
  device_vec<T> dyd(dyh), dxd(dxh), dwd(dwh), dbd(dbh);
  // Twice: with overlap on more than one rank the second call computes the whole block (the
  // first of the measured overlap's two modes, with its own dy gather).
  for (int call = 0; call < 2; ++call) {
    std::string const at = what + " (call " + std::to_string(call) + ")";
    gpu.forward(tensor_view(gpu.input_desc(), xd.p, xd.bytes()), {wd.p, ws}, bd.p,
                tensor_view(gpu.output_desc(), yd.p, yd.bytes()));
    expect_owned_close(out, yd.host(), yh, tolerance<T>(), at + " forward y");
    gpu.backward(tensor_view(gpu.input_desc(), xd.p, xd.bytes()),
                 tensor_view(gpu.output_desc(), dyd.p, dyd.bytes()), {wd.p, ws},
                 tensor_view(gpu.input_desc(), dxd.p, dxd.bytes()), {dwd.p, ws}, dbd.p);
    expect_owned_close(in, dxd.host(), dxh, tolerance<T>(), at + " backward dx");
    expect_close(dwd.host(), dwh, tolerance<T>(), at + " backward dw");
    expect_close(dbd.host(), dbh, tolerance<T>(), at + " backward db");
  }
}

template <class T> void pool_case(shape_t const& xs, ops::pool_params const& p, bool overlap) {
  std::string const what = std::string(p.kind == ops::pool_kind::max ? "max" : "avg") + " pool " +
                           std::to_string(xs.size() - 2) + "-D" + (overlap ? " overlap" : "");
  process_grid grid(MPI_COMM_WORLD, split_h(xs.size()));
  tensor_desc const x(grid, xs, halox::dtype_of<T>());
  ops::dist_pool<T> ref(x, p, host_opt(overlap));
  ops::dist_pool<T> gpu(x, p, device_opt(overlap));
  tensor_desc const &in = ref.input_desc(), &out = ref.output_desc();
  std::vector<T> xh = local_buffer<T>(in, 21), yh(static_cast<std::size_t>(out.local_elements()));
  device_vec<T> xd(xh), yd(yh);
  ref.forward(tensor_view(in, xh), tensor_view(out, yh));
  std::vector<T> dyh = local_buffer<T>(out, 22);
  std::vector<T> dxh(static_cast<std::size_t>(in.local_elements()), T(0));
  ref.backward(tensor_view(in, xh), tensor_view(out, dyh), tensor_view(in, dxh));
  device_vec<T> dyd(dyh), dxd(dxh);
  for (int call = 0; call < 2; ++call) { // the second: the whole block, as in conv_case
    std::string const at = what + " (call " + std::to_string(call) + ")";
    gpu.forward(tensor_view(gpu.input_desc(), xd.p, xd.bytes()),
                tensor_view(gpu.output_desc(), yd.p, yd.bytes()));
    expect_owned_close(out, yd.host(), yh, tolerance<T>(), at + " forward");
    gpu.backward(tensor_view(gpu.input_desc(), xd.p, xd.bytes()),
                 tensor_view(gpu.output_desc(), dyd.p, dyd.bytes()),
                 tensor_view(gpu.input_desc(), dxd.p, dxd.bytes()));
    expect_owned_close(in, dxd.host(), dxh, tolerance<T>(), at + " backward");
  }
}

template <class T> void batch_norm_case(shape_t const& xs) {
  process_grid grid(MPI_COMM_WORLD, split_h(xs.size()));
  tensor_desc const x(grid, xs, halox::dtype_of<T>());
  ops::dist_batch_norm<T> ref(x, ops::bn_stats_mode::global, {}, host_opt(true));
  ops::dist_batch_norm<T> gpu(x, ops::bn_stats_mode::global, {}, device_opt(true));
  auto const c = static_cast<std::size_t>(xs[1]);
  std::vector<T> xh = local_buffer<T>(x, 31), yh(xh.size());
  std::vector<T> const gamma = random_vec<T>(c, 32), beta = random_vec<T>(c, 33);
  std::vector<T> rm = random_vec<T>(c, 34), rv(c, T(1));
  device_vec<T> xd(xh), yd(yh), gd(gamma), bd(beta), rmd(rm), rvd(rv);
  ref.forward(tensor_view(x, xh), tensor_view(x, yh), gamma.data(), beta.data(), rm.data(),
              rv.data());
  gpu.forward(tensor_view(x, xd.p, xd.bytes()), tensor_view(x, yd.p, yd.bytes()), gd.p, bd.p, rmd.p,
              rvd.p);
  expect_owned_close(x, yd.host(), yh, tolerance<T>(), "batch norm forward");
  expect_close(rmd.host(), rm, tolerance<T>(), "batch norm running mean");
  expect_close(rvd.host(), rv, tolerance<T>(), "batch norm running variance");

  std::vector<T> dyh = local_buffer<T>(x, 35), dxh(xh.size(), T(0)), dg(c), db(c);
  device_vec<T> dyd(dyh), dxd(dxh), dgd(dg), dbd(db);
  ref.backward(tensor_view(x, xh), tensor_view(x, dyh), gamma.data(), tensor_view(x, dxh),
               dg.data(), db.data());
  gpu.backward(tensor_view(x, xd.p, xd.bytes()), tensor_view(x, dyd.p, dyd.bytes()), gd.p,
               tensor_view(x, dxd.p, dxd.bytes()), dgd.p, dbd.p);
  expect_owned_close(x, dxd.host(), dxh, tolerance<T>(), "batch norm backward dx");
  expect_close(dgd.host(), dg, tolerance<T>(), "batch norm dgamma");
  expect_close(dbd.host(), db, tolerance<T>(), "batch norm dbeta");
}

template <class T> void relu_case(shape_t const& xs) {
  process_grid grid(MPI_COMM_WORLD, split_h(xs.size()));
  tensor_desc const x(grid, xs, halox::dtype_of<T>());
  ops::dist_relu<T> ref(x, host_opt(true)), gpu(x, device_opt(true));
  std::vector<T> xh = local_buffer<T>(x, 41), yh(xh.size()), dyh = local_buffer<T>(x, 42);
  std::vector<T> dxh(xh.size());
  device_vec<T> xd(xh), yd(yh), dyd(dyh), dxd(dxh);
  ref.forward(tensor_view(x, xh), tensor_view(x, yh));
  ref.backward(tensor_view(x, xh), tensor_view(x, dyh), tensor_view(x, dxh));
  gpu.forward(tensor_view(x, xd.p, xd.bytes()), tensor_view(x, yd.p, yd.bytes()));
  gpu.backward(tensor_view(x, xd.p, xd.bytes()), tensor_view(x, dyd.p, dyd.bytes()),
               tensor_view(x, dxd.p, dxd.bytes()));
  expect_owned_close(x, yd.host(), yh, 0.0, "relu forward");
  expect_owned_close(x, dxd.host(), dxh, 0.0, "relu backward");
}

ops::conv_params same3(int nsp) {
  ops::conv_params p;
  p.stride.assign(static_cast<std::size_t>(nsp), 1);
  p.pad_lo.assign(static_cast<std::size_t>(nsp), 1);
  p.pad_hi.assign(static_cast<std::size_t>(nsp), 1);
  p.dilation.assign(static_cast<std::size_t>(nsp), 1);
  return p;
}

TEST(GpuDistOps, ConvMatchesHostReference) {
  HALOX_SKIP_WITHOUT_GPU();
  int const h = 6 * world_size();
  for (bool overlap : {true, false}) {
    conv_case<float>({2, 3, h, 9}, {4, 3, 3, 3}, same3(2), overlap);
    conv_case<double>({2, 3, h, 9}, {4, 3, 3, 3}, same3(2), overlap);
    conv_case<float>({1, 2, h, 5, 4}, {3, 2, 3, 3, 3}, same3(3), overlap);
  }
  ops::conv_params s2 = same3(2); // stride 2, asymmetric padding: the scratch-padded path
  s2.stride = {2, 2};
  s2.pad_hi = {0, 0};
  conv_case<float>({2, 3, h, 10}, {4, 3, 3, 3}, s2, true);
}

TEST(GpuDistOps, PoolMatchesHostReference) {
  HALOX_SKIP_WITHOUT_GPU();
  int const h = 8 * world_size();
  ops::pool_params mx;
  mx.kind = ops::pool_kind::max;
  mx.kernel = {3, 3};
  mx.stride = {2, 2};
  mx.pad_lo = mx.pad_hi = {1, 1};
  mx.dilation = {1, 1};
  ops::pool_params av = mx;
  av.kind = ops::pool_kind::average;
  for (bool overlap : {true, false}) {
    pool_case<float>({2, 3, h, 8}, mx, overlap);
    pool_case<double>({2, 3, h, 8}, av, overlap);
  }
}

TEST(GpuDistOps, BatchNormMatchesHostReference) {
  HALOX_SKIP_WITHOUT_GPU();
  batch_norm_case<float>({2, 5, 4 * world_size(), 7});
  batch_norm_case<double>({3, 4, 2 * world_size(), 3, 5});
}

TEST(GpuDistOps, ReluMatchesHostReference) {
  HALOX_SKIP_WITHOUT_GPU();
  relu_case<float>({2, 3, 4 * world_size(), 5});
}

// A device provider with a host backend is refused on every rank, naming the device backends.
TEST(GpuDistOps, DeviceProviderNeedsADeviceBackend) {
  HALOX_SKIP_WITHOUT_GPU();
  process_grid grid(MPI_COMM_WORLD, split_h(4));
  tensor_desc const x(grid, {1, 2, 4 * world_size(), 4}, halox::dtype::float32);
  ops::dist_options o = device_opt(true);
  o.method = backend::mpi_pack;
  bool threw = false;
  try {
    ops::pool_params p;
    p.kernel = p.stride = {2, 2};
    p.pad_lo = p.pad_hi = {0, 0};
    p.dilation = {1, 1};
    ops::dist_pool<float> l(x, p, o);
  } catch (halox::error const& e) {
    threw = true;
    EXPECT_NE(e.message().find("staged_mpi"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(threw);
}

} // namespace
