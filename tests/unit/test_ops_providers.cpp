// Compute providers against the reference kernels: random convolution and pooling problems in
// 2-D and 3-D, forward and every backward pass, computed box by box (as a distributed layer's
// interior and boundary) on strided views whose halo beyond the global boundary holds NaN.
#include "scoped_env.hpp"
#include "test_ops_util.hpp"

#include <halox/ops/conv.hpp>
#include <halox/ops/lrn.hpp>
#include <halox/ops/pool.hpp>
#include <halox/ops/provider.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>

namespace ops_test {
namespace {

namespace ops = halox::ops;
using ops::compute_provider;

// A tensor [N, C, ext...] stored inside a larger buffer: `margin` extra cells (NaN) on each
// side of every spatial dimension and one spare channel, so its strides are not the dense ones
// and a kernel that reads outside the tensor sees NaN.
template <class T> struct padded {
  std::vector<index_t> shape, alloc;
  index_t margin = 0;
  std::vector<T> buf;

  padded(std::vector<index_t> s, index_t m) : shape(std::move(s)), margin(m) {
    alloc = shape;
    alloc[1] += 1;
    for (std::size_t d = 2; d < alloc.size(); ++d) alloc[d] += 2 * m;
    buf.assign(static_cast<std::size_t>(ops::element_count(alloc)),
               std::numeric_limits<T>::quiet_NaN());
  }
  index_t offset_of(std::vector<index_t> i) const {
    for (std::size_t d = 2; d < i.size(); ++d) i[d] += margin;
    return flat(alloc, i);
  }
  void set(std::vector<double> const& v) {
    for_each_index(shape, [&](std::vector<index_t> const& i) {
      buf[static_cast<std::size_t>(offset_of(i))] = static_cast<T>(v[flat(shape, i)]);
    });
  }
  std::vector<double> get() const {
    std::vector<double> v(static_cast<std::size_t>(ops::element_count(shape)));
    for_each_index(shape, [&](std::vector<index_t> const& i) {
      v[flat(shape, i)] = buf[static_cast<std::size_t>(offset_of(i))];
    });
    return v;
  }
  // The whole allocation as a block placed at global origin -margin.
  ops::block_ref<T> block() {
    std::vector<index_t> sh = alloc;
    sh[1] = shape[1];
    ops::block_ref<T> b(ops::tensor_ref<T>(buf.data(), sh, ops::contiguous_strides(alloc)),
                        std::vector<index_t>(shape.size() - 2, -margin));
    b.zero_padding = zero_margin;
    return b;
  }
  // Zeros in the margins of the tensor's channels (the spare channel keeps NaN), promised to the
  // kernels through block_ref::zero_padding, as a haloed block after its exchange.
  void fill_margin_with_zeros() {
    std::vector<index_t> sh = alloc;
    sh[1] = shape[1];
    for_each_index(sh, [&](std::vector<index_t> const& i) {
      bool outside = false;
      for (std::size_t d = 2; d < i.size(); ++d)
        outside = outside || i[d] < margin || i[d] >= margin + shape[d];
      if (outside) buf[static_cast<std::size_t>(flat(alloc, i))] = T(0);
    });
    zero_margin = true;
  }
  bool zero_margin = false;
};

std::string fmt(std::vector<index_t> const& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

double rel_err(std::vector<double> const& got, std::vector<double> const& want) {
  double m = 1;
  for (double v : want) m = std::max(m, std::abs(v));
  double e = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return std::numeric_limits<double>::infinity();
    e = std::max(e, std::abs(got[i] - want[i]));
  }
  return e / m;
}

// Cut points splitting [0, e) into an interior and boundary pieces.
std::vector<std::vector<index_t>> cuts_for(std::vector<index_t> const& ext, std::mt19937_64& g) {
  std::vector<std::vector<index_t>> c;
  for (index_t e : ext) {
    std::uniform_int_distribution<index_t> u(0, e);
    c.push_back({std::min<index_t>(1, e), u(g), std::max<index_t>(e - 1, 0)});
    std::sort(c.back().begin(), c.back().end());
  }
  return c;
}

struct conv_case {
  std::vector<index_t> xs, ws;
  ops::conv_params p;
  bool bias = true;
};

bool draw_conv(std::mt19937_64& g, int nsp, conv_case& c) {
  auto u = [&](index_t lo, index_t hi) {
    return std::uniform_int_distribution<index_t>(lo, hi)(g);
  };
  index_t const n = u(1, 2), cin = u(1, 6), cout = u(1, 7);
  c.xs = {n, cin};
  c.ws = {cout, cin};
  std::vector<index_t> k, s, pl, ph, d;
  for (int i = 0; i < nsp; ++i) {
    c.xs.push_back(nsp == 3 ? u(3, 7) : u(4, 12));
    k.push_back(u(1, 3));
    s.push_back(u(1, 2));
    d.push_back(u(1, 2));
    pl.push_back(u(0, 2));
    ph.push_back(u(0, 2));
  }
  c.ws.insert(c.ws.end(), k.begin(), k.end());
  c.p = ops::conv_params{s, pl, ph, d};
  c.bias = u(0, 1) == 1;
  try {
    (void)ops::conv_output_shape(c.xs, c.ws, c.p);
  } catch (halox::error const&) {
    return false;
  }
  return true;
}

// Runs every convolution pass with `p` box by box and compares with the reference whole-tensor
// functions. Returns the largest relative error of the forward, dx and dw/db.
template <class T> double conv_vs_reference(compute_provider prov, conv_case const& c,
                                            std::uint64_t seed, bool zero_padding = false) {
  std::mt19937_64 g(seed);
  auto const ys = ops::conv_output_shape(c.xs, c.ws, c.p);
  std::vector<index_t> const in_ext(c.xs.begin() + 2, c.xs.end()),
      out_ext(ys.begin() + 2, ys.end());
  auto const xv = random_values(ops::element_count(c.xs), seed + 1);
  auto const wv = random_values(ops::element_count(c.ws), seed + 2);
  auto const bv = random_values(c.ws[0], seed + 3);
  auto const dyv = random_values(ops::element_count(ys), seed + 4);
  auto const x = as<T>(xv), w = as<T>(wv), b = as<T>(bv), dy = as<T>(dyv);
  T const* bias = c.bias ? b.data() : nullptr;
  ops::const_tensor_ref<T> const wr(w.data(), c.ws);

  // reference, whole tensors
  std::vector<T> y_ref(static_cast<std::size_t>(ops::element_count(ys)));
  std::vector<T> dx_ref(x.size()), dw_ref(w.size()), db_ref(b.size());
  ops::conv_forward<T>({x.data(), c.xs}, wr, bias, {y_ref.data(), ys}, c.p);
  ops::conv_backward_data<T>({dy.data(), ys}, wr, {dx_ref.data(), c.xs}, c.p);
  ops::conv_backward_weights<T>({x.data(), c.xs}, {dy.data(), ys}, {dw_ref.data(), c.ws}, c.p);
  ops::conv_backward_bias<T>({dy.data(), ys}, db_ref.data());

  // provider, box by box on strided views
  ops::local_kernels<T> k(prov);
  padded<T> xp(c.xs, 2), yp(ys, 1), dyp(ys, 2), dxp(c.xs, 1);
  if (zero_padding) xp.fill_margin_with_zeros();
  xp.set(xv);
  dyp.set(dyv);
  std::vector<T> dw(w.size(), T(0)), db(b.size(), T(0));
  for (auto const& ob : partition(out_ext, cuts_for(out_ext, g))) {
    k.conv_forward_box(xp.block(), in_ext, wr, bias, yp.block(), ob, c.p);
    k.conv_backward_weights_box(xp.block(), in_ext, dyp.block(), {dw.data(), c.ws}, ob, c.p);
    k.conv_backward_bias_box(dyp.block(), ob, db.data());
  }
  for (auto const& ib : partition(in_ext, cuts_for(in_ext, g)))
    k.conv_backward_data_box(dyp.block(), in_ext, wr, dxp.block(), ib, c.p);

  auto d = [](std::vector<T> const& v) { return std::vector<double>(v.begin(), v.end()); };
  return std::max({rel_err(yp.get(), d(y_ref)), rel_err(dxp.get(), d(dx_ref)),
                   rel_err(d(dw), d(dw_ref)), rel_err(d(db), d(db_ref))});
}

// `kept`: forward keeps the winners and backward is told x is unchanged since (as dist_pool
// calls them); the boxes of the two passes differ, so only some backward boxes find theirs.
template <class T> double pool_vs_reference(compute_provider prov, std::vector<index_t> const& xs,
                                            ops::pool_params const& p, std::uint64_t seed,
                                            bool kept = false) {
  std::mt19937_64 g(seed);
  auto const ys = ops::pool_output_shape(xs, p);
  std::vector<index_t> const in_ext(xs.begin() + 2, xs.end()), out_ext(ys.begin() + 2, ys.end());
  auto const xv = random_values(ops::element_count(xs), seed + 1);
  auto const dyv = random_values(ops::element_count(ys), seed + 2);
  auto const x = as<T>(xv), dy = as<T>(dyv);
  std::vector<T> y_ref(dy.size()), dx_ref(x.size());
  ops::pool_forward<T>({x.data(), xs}, {y_ref.data(), ys}, p);
  ops::pool_backward<T>({x.data(), xs}, {dy.data(), ys}, {dx_ref.data(), xs}, p);

  ops::local_kernels<T> k(prov);
  padded<T> xp(xs, 3), yp(ys, 1), dyp(ys, 2), dxp(xs, 1);
  xp.set(xv);
  dyp.set(dyv);
  for (auto const& ob : partition(out_ext, cuts_for(out_ext, g)))
    k.pool_forward_box(xp.block(), in_ext, yp.block(), ob, p, kept);
  for (auto const& ib : partition(in_ext, cuts_for(in_ext, g)))
    k.pool_backward_box(xp.block(), dyp.block(), in_ext, dxp.block(), ib, p, kept);
  auto d = [](std::vector<T> const& v) { return std::vector<double>(v.begin(), v.end()); };
  return std::max(rel_err(yp.get(), d(y_ref)), rel_err(dxp.get(), d(dx_ref)));
}

std::vector<compute_provider> host_providers() {
  std::vector<compute_provider> r;
  if (ops::provider_built(compute_provider::onednn)) r.push_back(compute_provider::onednn);
  return r;
}

// Calls f(provider, problem, trial) for `n2` drawn 2-D and `n3` drawn 3-D convolution problems
// per provider (trial: the draw's index, which seeds its data).
template <class F> void for_each_drawn_conv(std::vector<compute_provider> const& provs,
                                            std::uint64_t seed, int n2, int n3, F&& f) {
  std::mt19937_64 g(seed);
  for (auto prov : provs)
    for (int nsp : {2, 3})
      for (int trial = 0, done = 0; done < (nsp == 2 ? n2 : n3) && trial < 200; ++trial) {
        conv_case c;
        if (!draw_conv(g, nsp, c)) continue;
        ++done;
        f(prov, c, trial);
      }
}

// Tolerance of float providers against the float reference (both accumulate in float, in
// different orders): see docs/providers.md.
constexpr double float_tol = 2e-5;

} // namespace

TEST(OpsProviders, ConvMatchesReferenceOnStridedBoxes) {
  auto const provs = host_providers();
  if (provs.empty()) GTEST_SKIP() << "no fast host provider built (HALOX_ENABLE_ONEDNN=OFF)";
  double worst = 0;
  for_each_drawn_conv(provs, 11, 14, 8, [&](compute_provider prov, conv_case const& c, int trial) {
    double const e = conv_vs_reference<float>(prov, c, 100 + trial);
    worst = std::max(worst, e);
    EXPECT_LE(e, float_tol) << ops::to_string(prov) << " conv x " << fmt(c.xs) << " w " << fmt(c.ws)
                            << " trial " << trial;
  });
  RecordProperty("largest_relative_error", std::to_string(worst));
  std::printf("largest relative error against the reference: %.3g\n", worst);
}

// The same with zeros beyond the global boundary, promised through block_ref::zero_padding: the
// provider may read them as padding (two cells of the padding of up to 2 on each side), and
// every box still gets the reference result.
TEST(OpsProviders, ConvReadsZeroPaddingFromMemoryWhenPromised) {
  auto const provs = host_providers();
  if (provs.empty()) GTEST_SKIP() << "no fast host provider built (HALOX_ENABLE_ONEDNN=OFF)";
  for_each_drawn_conv(provs, 12, 10, 6, [&](compute_provider prov, conv_case const& c, int trial) {
    EXPECT_LE(conv_vs_reference<float>(prov, c, 300 + trial, true), float_tol)
        << ops::to_string(prov) << " conv x " << fmt(c.xs) << " w " << fmt(c.ws) << " trial "
        << trial;
  });
}

// A haloed block with a zero frame that the padding covers exactly is read as one dense array
// with no padding left (the oneDNN plans say so); the results are the reference ones.
TEST(OpsProviders, ZeroPaddedHaloedBlockGivesTheReferenceResult) {
  auto const provs = host_providers();
  if (provs.empty()) GTEST_SKIP() << "no fast host provider built (HALOX_ENABLE_ONEDNN=OFF)";
  std::vector<index_t> const xs{3, 4, 9, 11}, ws{5, 4, 3, 3};
  ops::conv_params const p{{1, 1}, {1, 1}, {1, 1}, {1, 1}};
  auto const ys = ops::conv_output_shape(xs, ws, p);
  auto const xv = as<float>(random_values(ops::element_count(xs), 7));
  auto const wv = as<float>(random_values(ops::element_count(ws), 8));
  auto const dyv = as<float>(random_values(ops::element_count(ys), 9));
  std::vector<float> y_ref(dyv.size()), dw_ref(wv.size());
  ops::conv_forward<float>({xv.data(), xs}, {wv.data(), ws}, nullptr, {y_ref.data(), ys}, p);
  ops::conv_backward_weights<float>({xv.data(), xs}, {dyv.data(), ys}, {dw_ref.data(), ws}, p);
  // [N, C, H + 2, W + 2] with a one-cell zero frame: exactly the padded input.
  std::vector<index_t> const big{xs[0], xs[1], xs[2] + 2, xs[3] + 2};
  std::vector<float> buf(static_cast<std::size_t>(ops::element_count(big)), 0.f);
  for_each_index(xs, [&](std::vector<index_t> const& i) {
    buf[flat(big, {i[0], i[1], i[2] + 1, i[3] + 1})] = xv[flat(xs, i)];
  });
  for (auto prov : provs) {
    ops::local_kernels<float> k(prov);
    ops::const_block_ref<float> xb(ops::const_tensor_ref<float>(buf.data(), big), {-1, -1});
    xb.zero_padding = true;
    std::vector<float> y(y_ref.size()), dw(wv.size(), 0.f);
    auto const all = make_box({0, 0}, {ys[2], ys[3]});
    k.conv_forward_box(xb, {xs[2], xs[3]}, {wv.data(), ws}, nullptr, {{y.data(), ys}}, all, p);
    k.conv_backward_weights_box(xb, {xs[2], xs[3]}, {{dyv.data(), ys}}, {dw.data(), ws}, all, p);
    auto d = [](std::vector<float> const& v) { return std::vector<double>(v.begin(), v.end()); };
    EXPECT_LE(rel_err(d(y), d(y_ref)), float_tol) << ops::to_string(prov);
    EXPECT_LE(rel_err(d(dw), d(dw_ref)), float_tol) << ops::to_string(prov);
    // Both passes ran on the whole dense buffer with no padding left to oneDNN.
    std::string const plans = k.describe();
    for (char const* pass : {"fwd,", "bwd_weights,"})
      EXPECT_NE(plans.find(std::string(pass) + "src=3x4x11x13,wei=5x4x3x3,dst=3x5x9x11,s=1x1,d=0x0,"
                                               "pl=0x0,pr=0x0"),
                std::string::npos)
          << pass << " in\n"
          << plans;
    EXPECT_NE(plans.find("xs=572x143x13x1"), std::string::npos) << plans;
  }
}

// A provider's weight gradient adds into dw, whatever its layout: here dw is [Cout, Cin, kh, kw]
// stored with the kernel dimensions outermost and a gap after each output channel's row, holding
// earlier values. Every element gets the reference gradient added, and the gaps stay untouched.
TEST(OpsProviders, WeightGradientAddsIntoAStridedDw) {
  auto const provs = host_providers();
  if (provs.empty()) GTEST_SKIP() << "no fast host provider built (HALOX_ENABLE_ONEDNN=OFF)";
  std::vector<index_t> const xs{2, 3, 9, 8}, ws{4, 3, 3, 2};
  ops::conv_params const p{{1, 1}, {1, 0}, {1, 1}, {1, 1}};
  auto const ys = ops::conv_output_shape(xs, ws, p);
  std::vector<index_t> const in_ext(xs.begin() + 2, xs.end()), out_ext(ys.begin() + 2, ys.end());
  auto const xv = random_values(ops::element_count(xs), 21);
  auto const dyv = random_values(ops::element_count(ys), 22);
  auto const x = as<float>(xv), dy = as<float>(dyv);
  std::vector<float> ref(static_cast<std::size_t>(ops::element_count(ws)));
  ops::conv_backward_weights<float>({x.data(), xs}, {dy.data(), ys}, {ref.data(), ws}, p);

  // Layout [kh][kw][Cout][Cin + 1]: the last column of each row is a gap.
  index_t const row = ws[1] + 1;
  std::vector<index_t> const strides{row, 1, ws[3] * ws[0] * row, ws[0] * row};
  float const gap = -7.5F, earlier = 0.25F;
  for (auto prov : provs) {
    std::vector<float> buf(static_cast<std::size_t>(ws[2] * ws[3] * ws[0] * row), gap);
    for (index_t o = 0; o < ws[0]; ++o)
      for (index_t i = 0; i < ws[1]; ++i)
        for (index_t a = 0; a < ws[2]; ++a)
          for (index_t b = 0; b < ws[3]; ++b)
            buf[static_cast<std::size_t>(o * strides[0] + i * strides[1] + a * strides[2] +
                                         b * strides[3])] = earlier;
    ops::local_kernels<float> k(prov);
    padded<float> xp(xs, 1), dyp(ys, 2);
    xp.set(xv);
    dyp.set(dyv);
    ops::tensor_ref<float> const dw(buf.data(), ws, strides);
    halox::box out;
    out.nd = 2;
    for (int d = 0; d < 2; ++d) out.hi[d] = out_ext[static_cast<std::size_t>(d)];
    k.conv_backward_weights_box(xp.block(), in_ext, dyp.block(), dw, out, p);
    std::vector<double> got, want;
    std::size_t k_ref = 0;
    for (index_t o = 0; o < ws[0]; ++o)
      for (index_t i = 0; i < ws[1]; ++i)
        for (index_t a = 0; a < ws[2]; ++a)
          for (index_t b = 0; b < ws[3]; ++b) {
            got.push_back(buf[static_cast<std::size_t>(o * strides[0] + i * strides[1] +
                                                       a * strides[2] + b * strides[3])] -
                          earlier);
            want.push_back(ref[k_ref++]);
          }
    EXPECT_LE(rel_err(got, want), float_tol) << ops::to_string(prov);
    for (index_t g = 0; g < static_cast<index_t>(buf.size()); g += row)
      EXPECT_EQ(buf[static_cast<std::size_t>(g + ws[1])], gap)
          << ops::to_string(prov) << " gap " << g;
  }
}

TEST(OpsProviders, PoolMatchesReferenceOnStridedBoxes) {
  auto const provs = host_providers();
  if (provs.empty()) GTEST_SKIP() << "no fast host provider built (HALOX_ENABLE_ONEDNN=OFF)";
  std::mt19937_64 g(5);
  auto u = [&](index_t lo, index_t hi) {
    return std::uniform_int_distribution<index_t>(lo, hi)(g);
  };
  for (auto prov : provs)
    for (int nsp : {2, 3})
      for (int trial = 0; trial < 12; ++trial) {
        std::vector<index_t> xs{u(1, 2), u(1, 4)};
        ops::pool_params p;
        p.kind = trial % 3 == 0 ? ops::pool_kind::average : ops::pool_kind::max;
        p.count_include_pad = trial % 2 == 0;
        for (int i = 0; i < nsp; ++i) {
          xs.push_back(u(4, nsp == 3 ? 7 : 11));
          index_t const k = u(1, 3);
          p.kernel.push_back(k);
          p.stride.push_back(u(1, 2));
          p.pad_lo.push_back(u(0, k / 2));
          p.pad_hi.push_back(u(0, k / 2));
          p.dilation.push_back(p.kind == ops::pool_kind::max ? u(1, 2) : 1);
        }
        for (bool kept : {false, true}) {
          double e = 0;
          try {
            e = pool_vs_reference<float>(prov, xs, p, 300 + trial, kept);
          } catch (halox::error const& err) { // windows made only of padding: skip the draw
            continue;
          }
          EXPECT_LE(e, float_tol) << ops::to_string(prov) << " pool x " << fmt(xs) << " trial "
                                  << trial << (kept ? " (winners kept)" : "");
        }
      }
}

// A provider keeps its primitives and the views' reorders per problem and layout, and points
// them at each call's buffers: two buffers of one layout, used in turns, give each its own result.
TEST(OpsProviders, CachedProblemsFollowNewBuffers) {
  auto const provs = host_providers();
  if (provs.empty()) GTEST_SKIP() << "no fast host provider built (HALOX_ENABLE_ONEDNN=OFF)";
  std::vector<index_t> const xs{2, 3, 9, 8}, ws{4, 3, 3, 3}, in_ext{9, 8};
  ops::conv_params const cp{{1}, {1}, {1}, {1}};
  ops::pool_params pp;
  pp.kernel = {3};
  pp.stride = {2};
  pp.pad_lo = pp.pad_hi = {1};
  auto const ys = ops::conv_output_shape(xs, ws, cp), zs = ops::pool_output_shape(xs, pp);
  auto const wv = as<float>(random_values(ops::element_count(ws), 7));
  ops::const_tensor_ref<float> const wr(wv.data(), ws);
  for (auto prov : provs) {
    ops::local_kernels<float> k(prov);
    padded<float> x1(xs, 1), x2(xs, 1), y1(ys, 1), y2(ys, 1), z1(zs, 1), z2(zs, 1);
    std::vector<double> const v1 = random_values(ops::element_count(xs), 8),
                              v2 = random_values(ops::element_count(xs), 9);
    x1.set(v1);
    x2.set(v2);
    for (int round = 0; round < 2; ++round)
      for (auto* pr : {&x1, &x2}) {
        bool const first = pr == &x1;
        k.conv_forward_box(pr->block(), in_ext, wr, nullptr, (first ? y1 : y2).block(),
                           make_box({0, 0}, {ys[2], ys[3]}), cp);
        k.pool_forward_box(pr->block(), in_ext, (first ? z1 : z2).block(),
                           make_box({0, 0}, {zs[2], zs[3]}), pp);
      }
    // LRN on dense views of two inputs, in turns (16 channels: oneDNN's optimised kernels).
    std::vector<index_t> const ls{2, 16, 5, 4};
    auto const l1 = as<float>(random_values(ops::element_count(ls), 10)),
               l2 = as<float>(random_values(ops::element_count(ls), 11));
    std::vector<float> o1(l1.size()), o2(l2.size());
    ops::lrn_params const lp{5, 1e-2, 0.75, 1.0};
    for (int round = 0; round < 2; ++round) {
      k.lrn_forward({l1.data(), ls}, {o1.data(), ls}, lp);
      k.lrn_forward({l2.data(), ls}, {o2.data(), ls}, lp);
    }
    for (int i = 0; i < 2; ++i) {
      std::vector<float> const& l = i == 0 ? l1 : l2;
      std::vector<float> l_ref(l.size());
      ops::lrn_forward<float>({l.data(), ls}, {l_ref.data(), ls}, lp);
      auto const& got = i == 0 ? o1 : o2;
      EXPECT_LE(rel_err(std::vector<double>(got.begin(), got.end()),
                        std::vector<double>(l_ref.begin(), l_ref.end())),
                float_tol)
          << "lrn, buffer " << i;
    }
    for (int i = 0; i < 2; ++i) {
      auto const x = as<float>(i == 0 ? v1 : v2);
      std::vector<float> y_ref(static_cast<std::size_t>(ops::element_count(ys))),
          z_ref(static_cast<std::size_t>(ops::element_count(zs)));
      ops::conv_forward<float>({x.data(), xs}, wr, nullptr, {y_ref.data(), ys}, cp);
      ops::pool_forward<float>({x.data(), xs}, {z_ref.data(), zs}, pp);
      auto d = [](std::vector<float> const& v) { return std::vector<double>(v.begin(), v.end()); };
      EXPECT_LE(rel_err((i == 0 ? y1 : y2).get(), d(y_ref)), float_tol) << "conv, buffer " << i;
      EXPECT_LE(rel_err((i == 0 ? z1 : z2).get(), d(z_ref)), float_tol) << "pool, buffer " << i;
    }
  }
}

// Max pooling's kept winners belong to the last forward call only: a backward pass over the
// whole tensor after forward calls on two buffers, on the first buffer (whose winners the second
// call replaced) and on the second (whose winners it kept), and after x changed and was pooled
// again, always matches the reference.
TEST(OpsProviders, KeptPoolWinnersFollowTheLastForward) {
  auto const provs = host_providers();
  if (provs.empty()) GTEST_SKIP() << "no fast host provider built (HALOX_ENABLE_ONEDNN=OFF)";
  std::vector<index_t> const xs{2, 16, 9, 8}, in_ext{9, 8};
  ops::pool_params pp;
  pp.kernel = {3};
  pp.stride = {2};
  pp.pad_lo = pp.pad_hi = {1};
  auto const zs = ops::pool_output_shape(xs, pp);
  auto const all_out = make_box({0, 0}, {zs[2], zs[3]});
  auto const all_in = make_box({0, 0}, {xs[2], xs[3]});
  auto const dyv = random_values(ops::element_count(zs), 20);
  auto d = [](std::vector<float> const& v) { return std::vector<double>(v.begin(), v.end()); };
  auto dx_ref = [&](std::vector<double> const& xv) {
    auto const x = as<float>(xv), dy = as<float>(dyv);
    std::vector<float> r(x.size());
    ops::pool_backward<float>({x.data(), xs}, {dy.data(), zs}, {r.data(), xs}, pp);
    return d(r);
  };
  for (auto prov : provs) {
    ops::local_kernels<float> k(prov);
    padded<float> x1(xs, 1), x2(xs, 1), z(zs, 1), dy(zs, 1), dx(xs, 1);
    auto const v1 = random_values(ops::element_count(xs), 21),
               v2 = random_values(ops::element_count(xs), 22),
               v3 = random_values(ops::element_count(xs), 23);
    x1.set(v1);
    x2.set(v2);
    dy.set(dyv);
    k.pool_forward_box(x1.block(), in_ext, z.block(), all_out, pp, true);
    k.pool_forward_box(x2.block(), in_ext, z.block(), all_out, pp, true);
    k.pool_backward_box(x1.block(), dy.block(), in_ext, dx.block(), all_in, pp, true);
    EXPECT_LE(rel_err(dx.get(), dx_ref(v1)), float_tol) << "first buffer";
    k.pool_backward_box(x2.block(), dy.block(), in_ext, dx.block(), all_in, pp, true);
    EXPECT_LE(rel_err(dx.get(), dx_ref(v2)), float_tol) << "second buffer";
    k.pool_forward_box(x1.block(), in_ext, z.block(), all_out, pp, true);
    x1.set(v3); // new data in the same buffer, pooled again (its winners differ)
    k.pool_forward_box(x1.block(), in_ext, z.block(), all_out, pp, true);
    k.pool_backward_box(x1.block(), dy.block(), in_ext, dx.block(), all_in, pp, true);
    EXPECT_LE(rel_err(dx.get(), dx_ref(v3)), float_tol) << "refilled buffer";
    std::vector<float> z_ref(static_cast<std::size_t>(ops::element_count(zs)));
    auto const x3 = as<float>(v3);
    ops::pool_forward<float>({x3.data(), xs}, {z_ref.data(), zs}, pp);
    EXPECT_LE(rel_err(z.get(), d(z_ref)), float_tol) << "forward, refilled buffer";
  }
}

// A conv layer's backward passes may read the x its forward reordered (x_kept) and the dy its
// weight-gradient pass reordered (dy_kept). Those copies belong to the last such call only:
// after forward calls on two buffers, on a refilled buffer, after a forward that read padding
// only, after new dy, and after a weight-gradient call with nothing to add, the gradients always
// match the reference on what x and dy hold at the time. Each oneDNN layout is fixed in turn
// (HALOX_ONEDNN_LAYOUT), so the copies are read whatever measuring would choose.
TEST(OpsProviders, KeptConvInputsFollowTheLastCalls) {
  auto const provs = host_providers();
  if (provs.empty()) GTEST_SKIP() << "no fast host provider built (HALOX_ENABLE_ONEDNN=OFF)";
  std::vector<index_t> const xs{2, 16, 9, 8}, ws{24, 16, 3, 3}, in_ext{9, 8};
  ops::conv_params const cp{{1, 1}, {1, 1}, {1, 1}, {1, 1}};
  ops::conv_params const wide{{1, 1}, {3, 3}, {3, 3}, {1, 1}}; // output row 0: padding only
  auto const ys = ops::conv_output_shape(xs, ws, cp),
             ys_wide = ops::conv_output_shape(xs, ws, wide);
  auto const all_out = make_box({0, 0}, {ys[2], ys[3]});
  auto const all_in = make_box({0, 0}, {xs[2], xs[3]});
  auto const wv = as<float>(random_values(ops::element_count(ws), 30));
  ops::const_tensor_ref<float> const wr(wv.data(), ws);
  auto d = [](std::vector<float> const& v) { return std::vector<double>(v.begin(), v.end()); };
  auto dw_ref = [&](std::vector<double> const& xv, std::vector<double> const& dyv) {
    auto const x = as<float>(xv), dy = as<float>(dyv);
    std::vector<float> r(wv.size());
    ops::conv_backward_weights<float>({x.data(), xs}, {dy.data(), ys}, {r.data(), ws}, cp);
    return d(r);
  };
  auto dx_ref = [&](std::vector<double> const& dyv) {
    auto const dy = as<float>(dyv);
    std::vector<float> r(static_cast<std::size_t>(ops::element_count(xs)));
    ops::conv_backward_data<float>({dy.data(), ys}, wr, {r.data(), xs}, cp);
    return d(r);
  };
  std::vector<std::vector<double>> v;
  for (int i = 0; i < 4; ++i) v.push_back(random_values(ops::element_count(xs), 31 + i));
  std::vector<std::vector<double>> g;
  for (int i = 0; i < 3; ++i) g.push_back(random_values(ops::element_count(ys), 41 + i));
  for (auto prov : provs)
    for (char const* layout : {"blocked", "plain", "channels_last", "measure"}) {
      halox_test::scoped_env const fixed("HALOX_ONEDNN_LAYOUT", layout);
      std::string const what_prov = ops::to_string(prov) + " " + layout;
      ops::local_kernels<float> k(prov);
      padded<float> x1(xs, 1), x2(xs, 1), y(ys, 1), y_wide(ys_wide, 0), dy(ys, 1), dx(xs, 1);
      x1.set(v[0]);
      x2.set(v[1]);
      x1.fill_margin_with_zeros();
      x2.fill_margin_with_zeros();
      dy.set(g[0]);
      std::vector<float> dw(wv.size());
      ops::tensor_ref<float> const dwr(dw.data(), ws);
      auto forward = [&](padded<float>& x) {
        k.conv_forward_box(x.block(), in_ext, wr, nullptr, y.block(), all_out, cp);
      };
      auto backward = [&](padded<float>& x, std::vector<double> const& xv,
                          std::vector<double> const& dyv, char const* what) {
        std::fill(dw.begin(), dw.end(), 0.f);
        k.conv_backward_weights_box(x.block(), in_ext, dy.block(), dwr, all_out, cp, true);
        EXPECT_LE(rel_err(d(dw), dw_ref(xv, dyv)), float_tol) << what_prov << ": " << what;
        k.conv_backward_data_box(dy.block(), in_ext, wr, dx.block(), all_in, cp, true);
        EXPECT_LE(rel_err(dx.get(), dx_ref(dyv)), float_tol) << what_prov << ": " << what;
      };
      forward(x1);
      forward(x2);
      backward(x1, v[0], g[0], "the buffer before the last forward");
      forward(x2);
      backward(x2, v[1], g[0], "the last forward's buffer");
      x2.set(v[2]);
      forward(x2);
      backward(x2, v[2], g[0], "a refilled buffer");
      x2.set(v[3]);
      k.conv_forward_box(x2.block(), in_ext, wr, nullptr, y_wide.block(),
                         make_box({0, 0}, {1, ys_wide[3]}), wide);
      backward(x2, v[3], g[0], "after a forward that read padding only");
      dy.set(g[1]);
      backward(x2, v[3], g[1], "new dy");
      dy.set(g[2]);
      k.conv_backward_weights_box(x2.block(), in_ext, dy.block(), dwr, make_box({0, 0}, {0, 0}), cp,
                                  true); // nothing to add
      k.conv_backward_data_box(dy.block(), in_ext, wr, dx.block(), all_in, cp, true);
      EXPECT_LE(rel_err(dx.get(), dx_ref(g[2])), float_tol)
          << what_prov << ": after a weight-gradient call with nothing to add";
      if (prov == compute_provider::onednn && std::string(layout) != "measure") {
        std::string const d = k.describe();
        EXPECT_NE(d.find("backward calls read the input an earlier call had reordered"),
                  std::string::npos)
            << what_prov << "\n"
            << d;
      }
    }
}

TEST(OpsProviders, ResnetShapesMatchReference) {
  auto const provs = host_providers();
  if (provs.empty()) GTEST_SKIP() << "no fast host provider built (HALOX_ENABLE_ONEDNN=OFF)";
  for (auto prov : provs) {
    conv_case c2{{2, 16, 14, 14}, {32, 16, 3, 3}, {{1}, {1}, {1}, {}}, true};
    EXPECT_LE(conv_vs_reference<float>(prov, c2, 1), float_tol);
    conv_case s2{{2, 8, 15, 15}, {16, 8, 3, 3}, {{2}, {1}, {1}, {}}, false};
    EXPECT_LE(conv_vs_reference<float>(prov, s2, 2), float_tol);
    conv_case c3{{1, 8, 6, 7, 8}, {8, 8, 3, 3, 3}, {{1}, {1}, {1}, {}}, true};
    EXPECT_LE(conv_vs_reference<float>(prov, c3, 3), float_tol);
  }
}

TEST(OpsProviders, AutomaticResolvesByTypeAndOnednnRefusesDouble) {
  EXPECT_EQ(ops::resolve_provider(compute_provider::automatic, halox::dtype::float64),
            compute_provider::reference);
  EXPECT_EQ(ops::local_kernels<double>().provider(), compute_provider::reference);
  if (ops::provider_built(compute_provider::onednn)) {
    EXPECT_EQ(ops::local_kernels<float>().provider(), compute_provider::onednn);
    expect_error([] { ops::local_kernels<double> k(compute_provider::onednn); },
                 {"onednn", "float32 only", "float64", "reference"});
  } else {
    expect_error([] { ops::local_kernels<float> k(compute_provider::onednn); },
                 {"onednn", "not built", "HALOX_ENABLE_ONEDNN"});
  }
  if (!ops::provider_built(compute_provider::cudnn))
    expect_error([] { ops::local_kernels<float> k(compute_provider::cudnn); },
                 {"cudnn", "not built", "HALOX_ENABLE_CUDNN"});
  expect_error([] { (void)ops::provider_from_string("mkl"); }, {"mkl", "onednn"});
  EXPECT_EQ(ops::provider_from_string("onednn"), compute_provider::onednn);
}

// Where each provider computes: only cudnn on device memory.
TEST(OpsProviders, ProviderMemory) {
  EXPECT_EQ(ops::provider_memory(compute_provider::cudnn), halox::memory_space::device);
  for (auto p :
       {compute_provider::automatic, compute_provider::reference, compute_provider::onednn})
    EXPECT_EQ(ops::provider_memory(p), halox::memory_space::host) << ops::to_string(p);
}

TEST(OpsProviders, ExplicitThreadCountsGiveTheSameResults) {
  expect_error([] { ops::local_kernels<float> k(compute_provider::reference, -1); },
               {"threads = -1", "positive"});
  std::vector<compute_provider> provs{compute_provider::reference};
  for (auto p : host_providers()) provs.push_back(p);
  conv_case c{{2, 8, 20, 20}, {8, 8, 3, 3}, {{1}, {1}, {1}, {}}, false};
  auto const x = as<float>(random_values(6400, 9)), w = as<float>(random_values(576, 10));
  for (auto prov : provs) {
    std::vector<std::vector<float>> ys;
    for (int t : {1, 2}) {
      ops::local_kernels<float> k(prov, t);
      EXPECT_EQ(k.threads(), t);
      ys.emplace_back(x.size());
      k.conv_forward_box(ops::const_tensor_ref<float>(x.data(), c.xs), {20, 20},
                         ops::const_tensor_ref<float>(w.data(), c.ws), nullptr,
                         ops::block_ref<float>(ops::tensor_ref<float>(ys.back().data(), c.xs)),
                         make_box({0, 0}, {20, 20}), c.p);
    }
    std::vector<double> const a(ys[0].begin(), ys[0].end()), b(ys[1].begin(), ys[1].end());
    EXPECT_LE(rel_err(a, b), float_tol) << ops::to_string(prov);
  }
}

TEST(OpsProviders, DescribeReportsChoiceAndCosts) {
  if (!ops::provider_built(compute_provider::onednn)) GTEST_SKIP() << "oneDNN not built";
  ops::local_kernels<float> k(compute_provider::onednn);
  conv_case c{{1, 4, 8, 8}, {4, 4, 3, 3}, {{1}, {1}, {1}, {}}, false};
  std::vector<float> x(256, 1.f), w(144, 0.5f), y(256);
  ops::const_tensor_ref<float> const xr(x.data(), c.xs), wr(w.data(), c.ws);
  k.conv_forward_box(ops::const_block_ref<float>(xr), {8, 8}, wr, nullptr,
                     ops::block_ref<float>(ops::tensor_ref<float>(y.data(), c.xs)),
                     make_box({0, 0}, {8, 8}), c.p);
  EXPECT_FLOAT_EQ(y[9], 18.f); // an interior output: 4 channels x 9 taps x 0.5
  EXPECT_FLOAT_EQ(y[0], 8.f);  // a corner: 4 x 4 taps x 0.5
  std::string const d = k.describe();
  EXPECT_NE(d.find("onednn conv fwd"), std::string::npos) << d;
  EXPECT_NE(d.find("*"), std::string::npos) << d; // the chosen layout is marked
  EXPECT_NE(d.find("blocked="), std::string::npos) << d;
  EXPECT_NE(d.find("plain="), std::string::npos) << d;

  ops::pool_params pp;
  pp.kernel = {2};
  std::vector<float> z(64);
  k.pool_forward_box(ops::const_block_ref<float>(ops::const_tensor_ref<float>(y.data(), c.xs)),
                     {8, 8}, ops::block_ref<float>(ops::tensor_ref<float>(z.data(), {1, 4, 4, 4})),
                     make_box({0, 0}, {4, 4}), pp);
  EXPECT_FLOAT_EQ(z[5], 18.f);
  EXPECT_NE(k.describe().find("onednn pool fwd"), std::string::npos) << k.describe();
}

} // namespace ops_test
