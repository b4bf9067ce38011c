// The vectorised host kernels (src/ops/fast_pointwise.hpp, src/ops/fast_lrn.hpp) against the
// reference loops, on views with halos, odd strides and every rank from [N, C] to
// [N, C, D, H, W], and the run walk they are built on against a cell-by-cell oracle.
#include "ops/kernels/elementwise.hpp"
#include "ops/kernels/fast_lrn.hpp"
#include "ops/kernels/fast_pointwise.hpp"

#include "test_ops_util.hpp"

#include <halox/ops/ops.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

namespace {

using halox::index_t;
namespace ops = halox::ops;
namespace det = halox::ops::detail;

// A random view of `shape` inside a larger buffer: each dimension padded by 0-2 cells on each
// side (a haloed buffer), sometimes with the whole allocation's dimensions permuted.
template <class T> struct padded {
  std::vector<T> buf;
  ops::tensor_ref<T> ref;
  padded(std::vector<index_t> const& shape, std::mt19937_64& gen, bool dense) {
    std::size_t const r = shape.size();
    std::vector<index_t> alloc(r), lo(r);
    std::uniform_int_distribution<int> pad(0, 2);
    for (std::size_t d = 0; d < r; ++d) {
      lo[d] = dense ? 0 : pad(gen);
      alloc[d] = shape[d] + lo[d] + (dense ? 0 : pad(gen));
    }
    std::vector<index_t> strides(r);
    index_t s = 1;
    for (std::size_t d = r; d-- > 0;) {
      strides[d] = s;
      s *= alloc[d];
    }
    buf.assign(static_cast<std::size_t>(s), T(-777));
    index_t off = 0;
    for (std::size_t d = 0; d < r; ++d) off += lo[d] * strides[d];
    ref = ops::tensor_ref<T>(buf.data() + off, shape, strides);
  }
  // A copy views its own buffer at the same place.
  padded(padded const& o) : buf(o.buf), ref(o.ref) {
    ref.data = buf.data() + (o.ref.data - o.buf.data());
  }
  padded& operator=(padded const&) = delete;
  void fill(std::uint64_t seed) {
    auto const v = ops_test::random_values(buf.size(), seed, -2.0, 3.0);
    for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<T>(v[i]);
  }
};

std::vector<std::vector<index_t>> shapes() {
  return {{3, 4},          {2, 3, 17},   {1, 2, 5, 7}, {4, 3, 8, 8},
          {2, 2, 3, 4, 5}, {3, 1, 1, 9}, {2, 3, 0, 4}};
}

TEST(OpsFastPointwise, RunsVisitEveryElementOnceInRowMajorOrder) {
  std::mt19937_64 gen(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::uniform_int_distribution<int> rank(1, 6), ext(1, 4);
    std::vector<index_t> shape(static_cast<std::size_t>(rank(gen)));
    for (auto& e : shape) e = ext(gen);
    padded<int> a(shape, gen, trial % 3 == 0), b(shape, gen, trial % 5 == 0),
        c(shape, gen, trial % 7 == 0);
    std::vector<index_t> seen_a, seen_b, seen_c;
    det::for_each_run(shape, a.ref.strides, b.ref.strides, c.ref.strides,
                      [&](index_t oa, index_t ob, index_t oc, index_t n) {
                        for (index_t i = 0; i < n; ++i) {
                          seen_a.push_back(oa + i);
                          seen_b.push_back(ob + i);
                          seen_c.push_back(oc + i);
                        }
                      });
    std::vector<index_t> want_a, want_b, want_c;
    ops_test::for_each_index(shape, [&](std::vector<index_t> const& idx) {
      index_t pa = 0, pb = 0, pc = 0;
      for (std::size_t d = 0; d < idx.size(); ++d) {
        pa += idx[d] * a.ref.strides[d];
        pb += idx[d] * b.ref.strides[d];
        pc += idx[d] * c.ref.strides[d];
      }
      want_a.push_back(pa);
      want_b.push_back(pb);
      want_c.push_back(pc);
    });
    ASSERT_EQ(seen_a, want_a) << "trial " << trial;
    ASSERT_EQ(seen_b, want_b) << "trial " << trial;
    ASSERT_EQ(seen_c, want_c) << "trial " << trial;
  }
}

TEST(OpsFastPointwise, DenseTensorIsOneRun) {
  std::vector<index_t> const shape{4, 3, 5, 6};
  auto const st = ops::contiguous_strides(shape);
  int runs = 0;
  det::for_each_run(shape, st, st, st, [&](index_t, index_t, index_t, index_t n) {
    ++runs;
    EXPECT_EQ(n, 360);
  });
  EXPECT_EQ(runs, 1);
}

template <class T> void expect_bitwise(padded<T> const& a, padded<T> const& b, char const* what) {
  ASSERT_EQ(a.buf.size(), b.buf.size());
  for (std::size_t i = 0; i < a.buf.size(); ++i)
    ASSERT_EQ(a.buf[i], b.buf[i]) << what << " differs at buffer element " << i;
}

template <class T> void check_against_reference() {
  std::mt19937_64 gen(5);
  std::uint64_t seed = 100;
  for (auto const& shape : shapes()) {
    for (int layout = 0; layout < 3; ++layout) {
      bool const dense = layout == 0;
      padded<T> x(shape, gen, dense), dy(shape, gen, dense);
      x.fill(seed++);
      dy.fill(seed++);
      // ReLU, out of place and in place: bitwise equal, halos untouched.
      padded<T> y1(shape, gen, layout == 1), y2 = y1;
      ops::relu_forward<T>(x.ref, y1.ref);
      det::fast_relu_forward<T>(x.ref, y2.ref);
      expect_bitwise(y1, y2, "relu_forward");
      padded<T> in1 = x, in2 = x;
      ops::relu_forward<T>(in1.ref, in1.ref);
      det::fast_relu_forward<T>(in2.ref, in2.ref);
      expect_bitwise(in1, in2, "relu_forward in place");
      padded<T> dx1(shape, gen, layout == 2), dx2 = dx1;
      ops::relu_backward<T>(x.ref, dy.ref, dx1.ref);
      det::fast_relu_backward<T>(x.ref, dy.ref, dx2.ref);
      expect_bitwise(dx1, dx2, "relu_backward");

      // Batch norm: statistics to rounding, the passes bitwise.
      ops::bn_stats const rs = ops::bn_partial_stats<T>(x.ref);
      // The kernels write into reused structures: stale contents of another size must go.
      ops::bn_stats fs{7, std::vector<double>(11, 3.0), {1.0}};
      det::fast_bn_partial_stats<T>(x.ref, fs);
      ASSERT_EQ(fs.mean.size(), rs.mean.size());
      ASSERT_EQ(fs.m2.size(), rs.m2.size());
      ASSERT_EQ(rs.count, fs.count);
      for (std::size_t c = 0; c < rs.mean.size(); ++c) {
        EXPECT_NEAR(fs.mean[c], rs.mean[c], 1e-13 * (1 + std::abs(rs.mean[c])));
        EXPECT_NEAR(fs.m2[c], rs.m2[c], 1e-12 * (1 + rs.m2[c]));
      }
      if (rs.count < 2) continue;
      ops::bn_moments const m = ops::bn_finalize_stats<T>(rs, 1e-5, 0.1, nullptr, nullptr);
      std::vector<T> gamma, beta;
      for (index_t c = 0; c < shape[1]; ++c) {
        gamma.push_back(static_cast<T>(0.5 + 0.25 * static_cast<double>(c)));
        beta.push_back(static_cast<T>(0.3 - 0.2 * static_cast<double>(c)));
      }
      padded<T> b1(shape, gen, layout == 1), b2 = b1, b3 = b1;
      ops::bn_apply<T>(x.ref, m, gamma.data(), beta.data(), b1.ref);
      det::fast_bn_apply<T>(x.ref, m, gamma.data(), beta.data(), b2.ref, false);
      expect_bitwise(b1, b2, "bn_apply");
      ops::relu_forward<T>(b1.ref, b1.ref);
      det::fast_bn_apply<T>(x.ref, m, gamma.data(), beta.data(), b3.ref, true);
      expect_bitwise(b1, b3, "bn_apply + relu");

      ops::bn_grad_sums const rg = ops::bn_backward_partial<T>(x.ref, dy.ref, m);
      ops::bn_grad_sums fg{5, std::vector<double>(13, 2.0), {}};
      det::fast_bn_backward_partial<T>(x.ref, dy.ref, m, fg);
      ASSERT_EQ(fg.sum_dy.size(), rg.sum_dy.size());
      ASSERT_EQ(fg.sum_dy_xhat.size(), rg.sum_dy_xhat.size());
      ASSERT_EQ(rg.count, fg.count);
      for (std::size_t c = 0; c < rg.sum_dy.size(); ++c) {
        EXPECT_NEAR(fg.sum_dy[c], rg.sum_dy[c], 1e-12 * (1 + std::abs(rg.sum_dy[c])));
        EXPECT_NEAR(fg.sum_dy_xhat[c], rg.sum_dy_xhat[c],
                    1e-12 * (1 + std::abs(rg.sum_dy_xhat[c])));
      }
      for (bool training : {true, false}) {
        padded<T> g1(shape, gen, layout == 2), g2 = g1;
        ops::bn_backward_apply<T>(x.ref, dy.ref, m, gamma.data(), rg, training, g1.ref);
        det::fast_bn_backward_apply<T>(x.ref, dy.ref, m, gamma.data(), rg, training, g2.ref);
        expect_bitwise(g1, g2, training ? "bn_backward_apply" : "bn_backward_apply (inference)");
      }
    }
  }
}

TEST(OpsFastPointwise, FloatMatchesTheReferenceKernels) { check_against_reference<float>(); }
TEST(OpsFastPointwise, DoubleMatchesTheReferenceKernels) { check_against_reference<double>(); }

// LRN: every window size around the chunk edges, the beta values with their own code path and
// a general one, runs longer than a chunk and channel counts that shrink it. Both buffers of
// each output start as the same copy, so the comparison of whole buffers also checks that the
// halos stay untouched.
template <class T> void check_lrn_against_reference(double tol) {
  std::mt19937_64 gen(9);
  std::uint64_t seed = 300;
  auto all = shapes();
  for (std::vector<index_t> s :
       {std::vector<index_t>{2, 3, 300}, {1, 100, 9, 9}, {3, 16, 14, 14}, {1, 7, 2, 3, 40}})
    all.push_back(s);
  std::vector<ops::lrn_params> const params{{5, 2.0, 0.75, 2.0}, {1, 0.5, 0.5, 1.0},
                                            {2, 1.5, 1.0, 1.0},  {3, 3.0, 0.6, 1.5},
                                            {4, 1.0, 0.75, 1.0}, {7, 2.0, -0.25, 2.0}};
  int layout = 0;
  for (auto const& shape : all)
    for (auto const& p : params) {
      layout = (layout + 1) % 3;
      bool const dense = layout == 0;
      padded<T> x(shape, gen, dense), dy(shape, gen, dense);
      x.fill(seed++);
      dy.fill(seed++);
      padded<T> y1(shape, gen, layout == 1), y2 = y1;
      ops::lrn_forward<T>(x.ref, y1.ref, p);
      det::fast_lrn_forward<T>(x.ref, y2.ref, p);
      padded<T> dx1(shape, gen, layout == 2), dx2 = dx1;
      ops::lrn_backward<T>(x.ref, dy.ref, dx1.ref, p);
      det::fast_lrn_backward<T>(x.ref, dy.ref, dx2.ref, p);
      for (std::size_t i = 0; i < y1.buf.size(); ++i)
        ASSERT_NEAR(y2.buf[i], y1.buf[i], tol * std::max<T>(1, std::abs(y1.buf[i])))
            << "y at buffer element " << i << ", size " << p.size << ", beta " << p.beta;
      for (std::size_t i = 0; i < dx1.buf.size(); ++i)
        ASSERT_NEAR(dx2.buf[i], dx1.buf[i], tol * std::max<T>(1, std::abs(dx1.buf[i])))
            << "dx at buffer element " << i << ", size " << p.size << ", beta " << p.beta;
    }
}

TEST(OpsFastLrn, FloatMatchesTheReferenceKernels) { check_lrn_against_reference<float>(2e-6); }
TEST(OpsFastLrn, DoubleMatchesTheReferenceKernels) { check_lrn_against_reference<double>(1e-13); }

TEST(OpsFastLrn, BadArgumentsAreClearErrors) {
  std::vector<float> x(24), y(24);
  std::vector<index_t> const shape{2, 3, 4};
  try {
    det::fast_lrn_forward<float>({x.data(), shape}, {y.data(), {2, 4, 3}}, {});
    ADD_FAILURE() << "no error for mismatched shapes";
  } catch (halox::error const& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 4, 3]"), std::string::npos) << e.what();
  }
  try {
    det::fast_lrn_backward<float>({x.data(), shape}, {y.data(), shape}, {y.data(), shape},
                                  {0, 1e-4, 0.75, 2.0});
    ADD_FAILURE() << "no error for size 0";
  } catch (halox::error const& e) {
    EXPECT_NE(std::string(e.what()).find("size = 0"), std::string::npos) << e.what();
  }
  std::string const isa = det::fast_lrn_isa();
  EXPECT_TRUE(isa == "avx512f" || isa == "avx2" || isa == "baseline") << isa;
}

TEST(OpsFastPointwise, NanAndSignedZeroFollowTheReference) {
  std::vector<float> x{-0.0f, 0.0f, std::nanf(""), -1.0f, 2.0f, -std::nanf("")};
  std::vector<float> dy{1, 2, 3, 4, 5, 6}, y1(6), y2(6), d1(6), d2(6);
  std::vector<index_t> const s{1, 1, 6};
  ops::relu_forward<float>(ops::const_tensor_ref<float>(x.data(), s), {y1.data(), s});
  det::fast_relu_forward<float>(ops::const_tensor_ref<float>(x.data(), s), {y2.data(), s});
  ops::relu_backward<float>({x.data(), s}, {dy.data(), s}, {d1.data(), s});
  det::fast_relu_backward<float>({x.data(), s}, {dy.data(), s}, {d2.data(), s});
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(std::isnan(y1[i]), std::isnan(y2[i])) << i;
    if (!std::isnan(y1[i])) EXPECT_EQ(std::signbit(y1[i]), std::signbit(y2[i])) << i;
    EXPECT_EQ(d1[i], d2[i]) << i;
  }
}

TEST(OpsFastPointwise, ErrorsNameTheMismatch) {
  std::vector<float> a(12), b(12);
  try {
    det::fast_relu_forward<float>(ops::const_tensor_ref<float>(a.data(), {3, 4}),
                                  ops::tensor_ref<float>(b.data(), {4, 3}));
    FAIL() << "no error";
  } catch (halox::error const& e) {
    EXPECT_NE(std::string(e.what()).find("relu_forward: y has shape [4, 3] but x has shape [3, 4]"),
              std::string::npos)
        << e.what();
  }
}

} // namespace
