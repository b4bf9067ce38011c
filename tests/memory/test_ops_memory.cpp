// What the distributed operators say they use (memory(), shared_scratch_bytes()) against what
// the process's resident memory grows by while they run. Its own process (the other suites
// would leave scratch and pages behind), one rank, problems of tens of MiB so that the
// libraries' own code is a small part of the growth.
#include <halox/error.hpp>
#include <halox/grid.hpp>
#include <halox/ops/distributed.hpp>

#include <gtest/gtest.h>
#include <malloc.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <new>
#include <string>
#include <vector>

namespace {

namespace ops = halox::ops;
using halox::index_t;
using halox::tensor_desc;
using halox::tensor_view;

std::size_t resident() {
  std::ifstream f("/proc/self/status");
  std::string key;
  std::size_t kb = 0;
  while (f >> key)
    if (key == "VmRSS:" && f >> kb) return kb * 1024;
  return 0;
}

constexpr std::size_t MiB = std::size_t(1) << 20;

// Pages of `n` floats, touched.
std::vector<float> touched(tensor_desc const& d) {
  return std::vector<float>(static_cast<std::size_t>(d.local_elements()), 0.5f);
}

// Large blocks from mmap, given back when freed (glibc would otherwise keep the pages of
// transient buffers, such as a matrix product's packing, in its heap): the growth is then what
// is held, as in halox-train, which sets the same.
struct big_blocks_returned {
  big_blocks_returned() { mallopt(M_MMAP_THRESHOLD, 1 << 20); }
} const returned;

bool sanitized() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return true;
#endif
#endif
  return false;
}

// A 3x3 convolution of c channels on n x c x hw x hw floats (padding 1) on one rank, with
// buffers for its forward and backward (touched: their pages are resident).
struct conv_case {
  halox::process_grid g{MPI_COMM_WORLD, {1, 1, 1, 1}};
  std::vector<index_t> ws;
  ops::dist_conv<float> op;
  std::vector<float> x, y, dy, dx, w, dw;
  conv_case(index_t n, index_t c, index_t hw)
      : ws{c, c, 3, 3}, op(tensor_desc(g, {n, c, hw, hw}, halox::dtype::float32), ws, padded()),
        x(touched(op.input_desc())), y(touched(op.output_desc())), dy(touched(op.output_desc())),
        dx(touched(op.input_desc())), w(static_cast<std::size_t>(c * c * 9), 0.01f), dw(w.size()) {}
  static ops::conv_params padded() {
    ops::conv_params p;
    p.pad_lo = p.pad_hi = {1, 1};
    return p;
  }
  // Bytes of the buffers above: what the caller holds, not the operator.
  [[nodiscard]] std::size_t bytes() const {
    return (x.size() + y.size() + dy.size() + dx.size() + w.size() + dw.size()) * sizeof(float);
  }
  void forward(std::vector<float>& out) {
    op.forward(tensor_view(op.input_desc(), x), {w.data(), ws}, nullptr,
               tensor_view(op.output_desc(), out));
  }
  void backward() {
    op.backward(tensor_view(op.input_desc(), x), tensor_view(op.output_desc(), dy), {w.data(), ws},
                tensor_view(op.input_desc(), dx), {dw.data(), ws}, nullptr);
  }
};

// Host and device bytes of the shared scratch now.
std::size_t shared_now() {
  ops::shared_scratch const s = ops::shared_scratch_bytes();
  return s.host + s.device;
}

// The growth matches the account: within a tenth of it, plus what the kernels' generated code
// and the libraries' caches take (a few MiB).
void expect_accounted(std::size_t grown, std::size_t accounted, char const* what) {
  double const slack = 0.10 * static_cast<double>(accounted) + 6.0 * MiB;
  EXPECT_NEAR(static_cast<double>(grown), static_cast<double>(accounted), slack)
      << what << ": resident memory grew by " << grown / MiB << " MiB, the operator accounts for "
      << accounted / MiB << " MiB";
}

TEST(OpsMemory, ConvolutionAccountsForWhatItHolds) {
  if (sanitized()) GTEST_SKIP() << "a sanitizer's shadow memory is resident too";
  if (!ops::provider_built(ops::compute_provider::onednn))
    GTEST_SKIP() << "the reference kernels keep nothing between calls";
  std::size_t const r0 = resident();
  conv_case cc(8, 32, 128);
  ops::dist_conv<float>& op = cc.op;
  std::size_t const s0 = shared_now();
  for (int i = 0; i < 2; ++i) {
    cc.forward(cc.y);
    cc.backward();
  }
  std::size_t const grown = resident() - r0 - cc.bytes();
  ops::memory_use const m = op.memory();
  expect_accounted(grown, m.total() + shared_now() - s0, "dist_conv forward and backward");
  // The kept copy of x is x itself in another layout: about its size.
  std::size_t const xb = cc.x.size() * sizeof(float);
  EXPECT_EQ(m.kept_reorders, m.keepable_reorders);
  if (m.kept_reorders) {
    EXPECT_GE(m.kept_reorders, xb * 9 / 10);
    // Dropping it gives its pages back.
    std::size_t const before = resident();
    op.keep_reorders(false);
    EXPECT_EQ(op.memory().kept_reorders, 0u);
    EXPECT_NEAR(static_cast<double>(before - resident()), static_cast<double>(m.kept_reorders),
                0.1 * static_cast<double>(m.kept_reorders) + MiB);
  }
}

TEST(OpsMemory, MaxPoolingKeepsCompactWinners) {
  if (sanitized()) GTEST_SKIP() << "a sanitizer's shadow memory is resident too";
  halox::process_grid g(MPI_COMM_WORLD, {1, 1, 1, 1});
  tensor_desc const xd(g, {8, 32, 128, 128}, halox::dtype::float32);
  ops::pool_params p;
  p.kind = ops::pool_kind::max;
  p.kernel = p.stride = {2, 2};
  std::size_t const r0 = resident();
  ops::dist_pool<float> op(xd, p);
  std::vector<float> x = touched(op.input_desc()), y = touched(op.output_desc()),
                     dy = touched(op.output_desc()), dx = touched(op.input_desc());
  std::size_t const mine = (x.size() + y.size() + dy.size() + dx.size()) * sizeof(float);
  std::size_t const s0 = shared_now();
  for (int i = 0; i < 2; ++i) {
    op.forward(tensor_view(op.input_desc(), x), tensor_view(op.output_desc(), y));
    op.backward(tensor_view(op.input_desc(), x), tensor_view(op.output_desc(), dy),
                tensor_view(op.input_desc(), dx));
  }
  std::size_t const grown = resident() - r0 - mine;
  ops::memory_use const m = op.memory();
  expect_accounted(grown, m.total() + shared_now() - s0, "dist_pool forward and backward");
  // Winners, not copies of x: at most an int per output.
  EXPECT_LE(m.held_host, y.size() * sizeof(int) + MiB);
}

TEST(OpsMemory, BatchNormHoldsPerChannelValuesOnly) {
  halox::process_grid g(MPI_COMM_WORLD, {1, 1, 1, 1});
  tensor_desc const xd(g, {8, 32, 64, 64}, halox::dtype::float32);
  ops::dist_batch_norm<float> op(xd);
  std::vector<float> x = touched(xd), y = touched(xd), dy = touched(xd), dx = touched(xd);
  std::vector<float> gamma(32, 1.f), beta(32, 0.f), rm(32, 0.f), rv(32, 1.f), dg(32), db(32);
  op.forward(tensor_view(xd, x), tensor_view(xd, y), gamma.data(), beta.data(), rm.data(),
             rv.data());
  op.backward(tensor_view(xd, x), tensor_view(xd, dy), gamma.data(), tensor_view(xd, dx), dg.data(),
              db.data());
  EXPECT_LE(op.memory().total(), 64u * 1024u); // a few arrays of C values
}

} // namespace

namespace {
// A framework's allocator: counts what it hands out and takes back.
struct counting_pool {
  std::size_t live = 0, calls = 0;
  halox::allocator hooks() {
    halox::allocator a;
    a.allocate = [this](std::size_t n, halox::memory_kind k) {
      EXPECT_EQ(k, halox::memory_kind::host);
      live += n;
      ++calls;
      return ::operator new(n, std::align_val_t(64));
    };
    a.deallocate = [this](void* p, std::size_t n, halox::memory_kind) {
      live -= n;
      ::operator delete(p, std::align_val_t(64));
    };
    return a;
  }
};

TEST(OpsMemory, SharedScratchComesFromTheCallersAllocator) {
  counting_pool pool;
  ops::set_scratch_allocator(pool.hooks());
  {
    conv_case cc(2, 16, 32);
    cc.forward(cc.y);
    cc.backward();
    ops::shared_scratch const s = ops::shared_scratch_bytes();
    // Every byte of host scratch is the pool's (none where the provider needs none).
    EXPECT_EQ(pool.live, s.host);
    if (ops::provider_built(ops::compute_provider::onednn)) EXPECT_GT(pool.calls, 0u);
  }
  // Another allocator (here halox's own again) gets everything back to the pool first.
  ops::set_scratch_allocator({});
  EXPECT_EQ(pool.live, 0u);
  EXPECT_EQ(ops::shared_scratch_bytes().host, 0u);
  halox::allocator half;
  half.allocate = [](std::size_t, halox::memory_kind) { return nullptr; };
  EXPECT_THROW(ops::set_scratch_allocator(half), halox::error);
}
} // namespace

namespace {
TEST(OpsMemory, ScratchLentByTheCallerServesTheCallsItWasRecordedFor) {
  conv_case cc(2, 16, 32);
  for (std::size_t i = 0; i < cc.x.size(); ++i) cc.x[i] = static_cast<float>(i % 7) - 3.f;
  std::vector<float> y2(cc.y.size());
  cc.forward(cc.y); // chooses its layout
  ops::scratch_mark();
  cc.forward(cc.y);
  ops::scratch_need const need = ops::scratch_asked();
  ops::release_shared_scratch();
  std::vector<float> region(need.bytes / sizeof(float) + 16);
  auto* base =
      reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(region.data()) + 63) / 64 * 64);
  ops::lend_scratch(base, need);
  cc.forward(y2);
  ops::lend_scratch(nullptr, need);
  // Every buffer the call needed came from the region: the operators grew none of their own.
  EXPECT_EQ(ops::shared_scratch_bytes().host, 0u);
  EXPECT_EQ(cc.y, y2);
}
} // namespace

namespace {
TEST(OpsMemory, PointwiseAndChannelOperatorsHoldLittle) {
  halox::process_grid g(MPI_COMM_WORLD, {1, 1, 1, 1});
  tensor_desc const xd(g, {8, 32, 64, 64}, halox::dtype::float32);
  std::vector<float> x = touched(xd), y = touched(xd), dy = touched(xd), dx = touched(xd);
  ops::dist_relu<float> relu(xd);
  relu.forward(tensor_view(xd, x), tensor_view(xd, y));
  relu.backward(tensor_view(xd, x), tensor_view(xd, dy), tensor_view(xd, dx));
  EXPECT_EQ(relu.memory().total(), 0u); // nothing kept: ReLU's backward reads x or y
  ops::dist_lrn<float> lrn(xd, {5, 1e-4, 0.75, 1.0});
  tensor_view const lx(lrn.input_desc(), x), ly(lrn.output_desc(), y);
  lrn.forward(lx, ly);
  lrn.backward(lx, tensor_view(lrn.output_desc(), dy), tensor_view(lrn.input_desc(), dx));
  // Channels not split: no halo plans, no terms kept for another rank.
  EXPECT_LE(lrn.memory().total(), 64u * 1024u);
}
} // namespace
