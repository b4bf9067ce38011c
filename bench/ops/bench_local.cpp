// halox-bench-local: the local kernels of one compute provider on ResNet-style convolution
// shapes, forward and backward (data, weights, bias), and on AlexNet-style LRN shapes, one rank,
// OMP_NUM_THREADS threads (or --threads).
//
// For each shape it runs `warmup` untimed rounds (the first one also lets a fast provider
// choose its implementation) and `iters` timed rounds, and prints the median of each pass in
// ms, one line per shape:
//
//   shape <name> fwd <ms> bwd_data <ms> bwd_weights <ms> total <ms>
//
// `total` is forward + backward-data + backward-weights + bias, the work of one training step of
// the layer. LRN shapes (names `lrn<nsp>d_<size>_<C>_<extent>`, AlexNet's alpha 1e-4, beta
// 0.75, k 2) print the same line with `bwd_data` the backward pass and `bwd_weights` 0, and so do
// the memory-bound layers (names `<kind><nsp>d_<window>_<C>_<extent>`): batch norm in training
// mode (`bn`: statistics, normalisation; backward sums and dx), ReLU (`relu`), and max and
// average pooling (`maxpool`, `avgpool`, window `3s2` = 3 wide, stride 2, padding 1).
// bench/ops/compare_torch.py runs the same shapes in PyTorch and prints the ratios.
// Public API only (halox::ops::local_kernels).
#include <halox/ops/ops.hpp>
#include <halox/ops/provider.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

namespace ops = halox::ops;
using halox::index_t;

// The entries of `all` whose name starts with `which` (all of them for "all").
template <class L> std::vector<L> named(std::vector<L> const& all, std::string const& which) {
  std::vector<L> r;
  for (auto const& l : all)
    if (which == "all" || std::string(l.name).rfind(which, 0) == 0) r.push_back(l);
  return r;
}

struct layer {
  char const* name;
  std::vector<index_t> x, w;
  index_t stride, pad;
};

// ResNet-style layers (2-D: ResNet-18/50 stages at batch 4; 3-D: a 3-D ResNet at batch 2).
std::vector<layer> layers(std::string const& which) {
  std::vector<layer> all = {
      {"2d_stem_7x7s2_3-64_224", {4, 3, 224, 224}, {64, 3, 7, 7}, 2, 3},
      {"2d_3x3_64-64_56", {4, 64, 56, 56}, {64, 64, 3, 3}, 1, 1},
      {"2d_3x3s2_64-128_56", {4, 64, 56, 56}, {128, 64, 3, 3}, 2, 1},
      {"2d_3x3_128-128_28", {4, 128, 28, 28}, {128, 128, 3, 3}, 1, 1},
      {"2d_3x3_256-256_14", {4, 256, 14, 14}, {256, 256, 3, 3}, 1, 1},
      {"2d_3x3_512-512_7", {4, 512, 7, 7}, {512, 512, 3, 3}, 1, 1},
      {"2d_1x1_64-256_56", {4, 64, 56, 56}, {256, 64, 1, 1}, 1, 0},
      {"3d_3x3x3_32-32_32", {2, 32, 32, 32, 32}, {32, 32, 3, 3, 3}, 1, 1},
      {"3d_3x3x3_64-64_16x28x28", {2, 64, 16, 28, 28}, {64, 64, 3, 3, 3}, 1, 1},
      {"3d_3x3x3s2_64-128_16x28x28", {2, 64, 16, 28, 28}, {128, 64, 3, 3, 3}, 2, 1},
      {"3d_3x3x3_128-128_8x14x14", {2, 128, 8, 14, 14}, {128, 128, 3, 3, 3}, 1, 1},
      {"3d_1x1x1_64-256_8x28x28", {2, 64, 8, 28, 28}, {256, 64, 1, 1, 1}, 1, 0},
  };
  return named(all, which);
}

struct lrn_layer {
  char const* name;
  std::vector<index_t> x;
  int size;
};

// LRN across channels where AlexNet has it (after conv1 and conv2, batch 4), and a 3-D shape.
std::vector<lrn_layer> lrn_layers(std::string const& which) {
  std::vector<lrn_layer> all = {
      {"lrn2d_5_96_55", {4, 96, 55, 55}, 5},
      {"lrn2d_5_256_27", {4, 256, 27, 27}, 5},
      {"lrn3d_5_64_16x28x28", {2, 64, 16, 28, 28}, 5},
  };
  return named(all, which);
}

// Memory-bound layers at ResNet shapes (batch 4 in 2-D, 2 in 3-D).
struct pointwise_layer {
  char const* name;
  char const* kind; // bn, relu, maxpool, avgpool
  std::vector<index_t> x;
};

std::vector<pointwise_layer> pointwise_layers(std::string const& which) {
  std::vector<pointwise_layer> all = {
      {"bn2d_1_64_56", "bn", {4, 64, 56, 56}},
      {"bn2d_1_256_14", "bn", {4, 256, 14, 14}},
      {"bn3d_1_64_16x28x28", "bn", {2, 64, 16, 28, 28}},
      {"relu2d_1_64_56", "relu", {4, 64, 56, 56}},
      {"relu3d_1_64_16x28x28", "relu", {2, 64, 16, 28, 28}},
      {"maxpool2d_3s2_64_112", "maxpool", {4, 64, 112, 112}},
      {"avgpool2d_3s2_64_56", "avgpool", {4, 64, 56, 56}},
      {"maxpool3d_3s2_64_16x28x28", "maxpool", {2, 64, 16, 28, 28}},
  };
  return named(all, which);
}

std::vector<float> random_vec(index_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = u(g);
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

template <class F> double ms(F&& f) {
  auto const t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Times `fwd` and `bwd` (`warmup` untimed rounds, then `iters`) and prints the shape line of a
// layer without weights: forward, backward (as bwd_data) and their sum, medians in ms.
template <class F, class B>
void report_fwd_bwd(char const* name, int warmup, int iters, F&& fwd, B&& bwd) {
  std::vector<double> tf, tb, tt;
  for (int it = 0; it < warmup + iters; ++it) {
    double const f = ms(fwd), b = ms(bwd);
    if (it < warmup) continue;
    tf.push_back(f);
    tb.push_back(b);
    tt.push_back(f + b);
  }
  std::printf("shape %s fwd %.3f bwd_data %.3f bwd_weights 0.000 total %.3f\n", name, median(tf),
              median(tb), median(tt));
  std::fflush(stdout);
}

int usage(int rc) {
  std::printf("halox-bench-local [--provider automatic|reference|onednn] [--threads N]\n"
              "                  [--shapes all|2d|3d|lrn|bn|relu|maxpool|avgpool|<name prefix>]\n"
              "                  [--iters N] [--warmup N]\n"
              "                  [--describe]\n");
  return rc;
}

} // namespace

int main(int argc, char** argv) {
  std::string provider = "onednn", which = "all";
  int iters = 3, warmup = 1, threads = 0;
  bool describe = false;
  for (int i = 1; i < argc; ++i) {
    std::string const k = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (k == "--provider")
      provider = next();
    else if (k == "--shapes")
      which = next();
    else if (k == "--iters")
      iters = std::atoi(next().c_str());
    else if (k == "--warmup")
      warmup = std::atoi(next().c_str());
    else if (k == "--threads")
      threads = std::atoi(next().c_str());
    else if (k == "--describe")
      describe = true;
    else
      return usage(k == "--help" ? 0 : 2);
  }
  try {
    ops::local_kernels<float> k(ops::provider_from_string(provider), threads);
    std::printf("# halox-bench-local: provider %s, threads %d (0: OMP_NUM_THREADS=%s), %d iters\n",
                ops::to_string(k.provider()).c_str(), threads,
                std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : "unset", iters);
    for (auto const& l : layers(which)) {
      int const nsp = static_cast<int>(l.x.size()) - 2;
      ops::conv_params const p{{l.stride}, {l.pad}, {l.pad}, {}};
      auto const ys = ops::conv_output_shape(l.x, l.w, p);
      std::vector<index_t> const in_ext(l.x.begin() + 2, l.x.end());
      auto const x = random_vec(ops::element_count(l.x), 1),
                 w = random_vec(ops::element_count(l.w), 2);
      auto const b = random_vec(l.w[0], 3), dy = random_vec(ops::element_count(ys), 4);
      std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
      ops::const_block_ref<float> const xb(ops::const_tensor_ref<float>(x.data(), l.x));
      ops::const_block_ref<float> const dyb(ops::const_tensor_ref<float>(dy.data(), ys));
      ops::const_tensor_ref<float> const wr(w.data(), l.w);
      halox::box ob, ib;
      ob.nd = ib.nd = nsp;
      for (int i = 0; i < nsp; ++i) {
        ob.hi[i] = ys[2 + i];
        ib.hi[i] = l.x[2 + i];
      }
      std::vector<double> tf, td, tw, tt;
      for (int it = 0; it < warmup + iters; ++it) {
        double const f = ms([&] {
          k.conv_forward_box(xb, in_ext, wr, b.data(),
                             ops::block_ref<float>(ops::tensor_ref<float>(y.data(), ys)), ob, p);
        });
        double const d = ms([&] {
          k.conv_backward_data_box(dyb, in_ext, wr,
                                   ops::block_ref<float>(ops::tensor_ref<float>(dx.data(), l.x)),
                                   ib, p);
        });
        double const wg = ms([&] {
          std::fill(dw.begin(), dw.end(), 0.f);
          std::fill(db.begin(), db.end(), 0.f);
          k.conv_backward_weights_box(xb, in_ext, dyb, ops::tensor_ref<float>(dw.data(), l.w), ob,
                                      p);
          k.conv_backward_bias_box(dyb, ob, db.data());
        });
        if (it < warmup) continue;
        tf.push_back(f);
        td.push_back(d);
        tw.push_back(wg);
        tt.push_back(f + d + wg);
      }
      std::printf("shape %s fwd %.3f bwd_data %.3f bwd_weights %.3f total %.3f\n", l.name,
                  median(tf), median(td), median(tw), median(tt));
      std::fflush(stdout);
    }
    for (auto const& l : lrn_layers(which)) {
      ops::lrn_params const p{l.size, 1e-4, 0.75, 2.0};
      auto const x = random_vec(ops::element_count(l.x), 1),
                 dy = random_vec(ops::element_count(l.x), 4);
      std::vector<float> y(x.size()), dx(x.size());
      report_fwd_bwd(
          l.name, warmup, iters,
          [&] {
            k.lrn_forward({x.data(), l.x}, {y.data(), l.x}, p);
          },
          [&] {
            k.lrn_backward({x.data(), l.x}, {dy.data(), l.x}, {dx.data(), l.x}, p);
          });
    }
    for (auto const& l : pointwise_layers(which)) {
      std::string const kind = l.kind;
      int const nsp = static_cast<int>(l.x.size()) - 2;
      index_t const c = l.x[1];
      auto const x = random_vec(ops::element_count(l.x), 1);
      std::vector<float> gamma(static_cast<std::size_t>(c), 1.5f), beta(gamma.size(), 0.25f);
      std::vector<float> rm(gamma.size(), 0.f), rv(gamma.size(), 1.f), dg(gamma.size()),
          dbt(gamma.size());
      ops::pool_params pp;
      pp.kind = kind == "avgpool" ? ops::pool_kind::average : ops::pool_kind::max;
      pp.kernel = {3};
      pp.stride = {2};
      pp.pad_lo = pp.pad_hi = {1};
      auto const ys =
          kind == "maxpool" || kind == "avgpool" ? ops::pool_output_shape(l.x, pp) : l.x;
      auto const dy = random_vec(ops::element_count(ys), 4);
      std::vector<float> y(dy.size()), dx(x.size());
      std::vector<index_t> const in_ext(l.x.begin() + 2, l.x.end());
      halox::box ob, ib;
      ob.nd = ib.nd = nsp;
      for (int i = 0; i < nsp; ++i) {
        ob.hi[i] = ys[2 + i];
        ib.hi[i] = l.x[2 + i];
      }
      ops::const_tensor_ref<float> const xr(x.data(), l.x), dyr(dy.data(), ys);
      ops::bn_moments m;
      report_fwd_bwd(
          l.name, warmup, iters,
          [&] {
            if (kind == "bn") {
              m = ops::bn_finalize_stats<float>(k.bn_partial_stats(xr), 1e-5, 0.1, rm.data(),
                                                rv.data());
              k.bn_apply(xr, m, gamma.data(), beta.data(), {y.data(), ys});
            } else if (kind == "relu") {
              k.relu_forward(xr, {y.data(), ys});
            } else {
              k.pool_forward_box(ops::const_block_ref<float>(xr), in_ext,
                                 ops::block_ref<float>(ops::tensor_ref<float>(y.data(), ys)), ob,
                                 pp);
            }
          },
          [&] {
            if (kind == "bn") {
              auto const sums = k.bn_backward_partial(xr, dyr, m);
              k.bn_backward_apply(xr, dyr, m, gamma.data(), sums, true, {dx.data(), l.x});
              ops::bn_param_grads<float>(sums, dg.data(), dbt.data());
            } else if (kind == "relu") {
              k.relu_backward(xr, dyr, {dx.data(), l.x});
            } else {
              k.pool_backward_box(
                  ops::const_block_ref<float>(xr), ops::const_block_ref<float>(dyr), in_ext,
                  ops::block_ref<float>(ops::tensor_ref<float>(dx.data(), l.x)), ib, pp);
            }
          });
    }
    if (describe) std::printf("%s", k.describe().c_str());
  } catch (std::exception const& e) {
    std::fprintf(stderr, "halox-bench-local: %s\n", e.what());
    return 1;
  }
  return 0;
}
