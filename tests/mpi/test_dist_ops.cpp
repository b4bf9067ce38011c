// Distributed operators = serial operators, at every rank count the suite runs (1-8).
//
// Every rank builds the whole input from the same seed, runs the serial operator on the whole
// tensor, runs the distributed operator on its part, and compares its owned outputs and
// gradients with the serial result restricted to its block. Forward and backward-data must be
// bitwise equal (the serial sub-box kernels compute each position from the same terms in the
// same order as the whole-tensor ones); weight and bias gradients and global batch-norm
// statistics differ only by summation order (see docs/dist_ops.md for the tolerances).
//
// Every rank reaches the same collectives whatever its checks find: only EXPECT_* around
// collectives, and configurations drawn from a seed shared by all ranks.
#include <halox/error.hpp>
#include <halox/ops/distributed.hpp>
#include <halox/ops/ops.hpp>

#include "support/dist_ops_helpers.hpp"
#include "support/mpi_helpers.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace ops = halox::ops;
using halox::box;
using halox::dim_options;
using halox::index_t;
using halox::process_grid;
using halox::tensor_desc;
using halox::tensor_view;
using halox::test::expect_close;
using halox::test::expect_owned;
using halox::test::for_each_owned;
using halox::test::idx_str;
using halox::test::random_tensor;
using halox::test::scatter;
using halox::test::shape_t;

int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

struct rng {
  std::mt19937_64 g;
  explicit rng(std::uint64_t seed) : g(seed) {}
  index_t operator()(index_t lo, index_t hi) { // inclusive
    return std::uniform_int_distribution<index_t>(lo, hi)(g);
  }
};

// Grid extents splitting P over N and the spatial dimensions, each prime factor of P given to a
// random one of them (channels never split).
std::vector<int> random_dims(rng& r, int p, int nd) {
  std::vector<int> dims(static_cast<std::size_t>(nd), 1);
  for (int f = 2; p > 1;) {
    if (p % f != 0) {
      ++f;
      continue;
    }
    p /= f;
    int d = static_cast<int>(r(0, nd - 2));
    dims[d == 0 ? 0 : d + 1] *= f;
  }
  return dims;
}

// Options for the input descriptor: balanced blocks, or (with `uneven`) random part sizes
// that may leave parts empty.
std::vector<dim_options> random_sizes(rng& r, shape_t const& shape, std::vector<int> const& dims,
                                      bool uneven) {
  std::vector<dim_options> o(shape.size());
  if (!uneven) return o;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (dims[d] == 1) continue;
    std::vector<index_t> cut{0, shape[d]};
    for (int p = 1; p < dims[d]; ++p) cut.push_back(r(0, shape[d]));
    std::sort(cut.begin(), cut.end());
    for (std::size_t p = 0; p + 1 < cut.size(); ++p) o[d].sizes.push_back(cut[p + 1] - cut[p]);
  }
  return o;
}

// The reference provider unless asked otherwise: its boxes are bitwise equal to the serial
// kernels, which is what most tests below check. With overlap, every interior is split off,
// however small (the tests' blocks are a few rows), so that the split is what they check.
ops::dist_options with_overlap(bool on,
                               ops::compute_provider p = ops::compute_provider::reference) {
  ops::dist_options o;
  o.overlap = on;
  o.overlap_min_interior = 0;
  o.provider = p;
  return o;
}

ops::pool_params max_pool(std::vector<index_t> k, std::vector<index_t> s = {},
                          std::vector<index_t> pad = {}) {
  ops::pool_params p;
  p.kernel = std::move(k);
  p.stride = std::move(s);
  p.pad_lo = p.pad_hi = std::move(pad);
  return p;
}

// Tolerance of the gradients summed over ranks (see docs/dist_ops.md).
template <class T> double sum_tol() { return sizeof(T) == 4 ? 2e-5 : 1e-12; }

struct window_case {
  shape_t x;        // [N, C, spatial...]
  index_t cout = 0; // conv only
  std::vector<index_t> k, s, pl, ph, dil;
  std::vector<int> dims; // grid
  std::vector<dim_options> sizes;
  bool overlap = true;
  std::string name;
  ops::compute_provider provider = ops::compute_provider::reference;
};

// Tolerance of forward and dx: bitwise for the reference provider, float rounding in another
// summation order for the others (docs/providers.md).
double provider_tol(ops::compute_provider p) {
  return p == ops::compute_provider::reference ? 0 : 2e-5;
}

std::string describe(window_case const& c) {
  std::ostringstream os;
  os << c.name << " x" << idx_str(c.x) << " k" << idx_str(c.k) << " s" << idx_str(c.s) << " pad"
     << idx_str(c.pl) << idx_str(c.ph) << " dil" << idx_str(c.dil) << " grid"
     << idx_str(shape_t(c.dims.begin(), c.dims.end())) << (c.overlap ? " overlap" : "")
     << " provider " << ops::to_string(c.provider);
  return os.str();
}

// Distributed convolution = serial: forward, dx bitwise; dw, db to summation order.
template <class T> void check_conv(window_case const& c) {
  SCOPED_TRACE(describe(c));
  process_grid grid(MPI_COMM_WORLD, c.dims);
  tensor_desc const xd(grid, c.x, halox::dtype_of<T>(), c.sizes);
  int const nsp = static_cast<int>(c.x.size()) - 2;
  shape_t ws{c.cout, c.x[1]};
  for (int i = 0; i < nsp; ++i) ws.push_back(c.k.size() == 1 ? c.k[0] : c.k[i]);
  ops::conv_params const p{c.s, c.pl, c.ph, c.dil};
  ops::dist_conv<T> layer(xd, ws, p, with_overlap(c.overlap, c.provider));
  shape_t const ys = ops::conv_output_shape(c.x, ws, p);
  ASSERT_EQ(layer.output_desc().shape(), ys);

  auto const x = random_tensor<T>(c.x, 11), w = random_tensor<T>(ws, 12);
  auto const b = random_tensor<T>({c.cout}, 13), dy = random_tensor<T>(ys, 14);
  std::vector<T> y_ref(dy.size()), dx_ref(x.size()), dw_ref(w.size()), db_ref(b.size());
  ops::conv_forward<T>({x.data(), c.x}, {w.data(), ws}, b.data(), {y_ref.data(), ys}, p);
  ops::conv_backward_data<T>({dy.data(), ys}, {w.data(), ws}, {dx_ref.data(), c.x}, p);
  ops::conv_backward_weights<T>({x.data(), c.x}, {dy.data(), ys}, {dw_ref.data(), ws}, p);
  ops::conv_backward_bias<T>({dy.data(), ys}, db_ref.data());

  auto xl = scatter(layer.input_desc(), x);
  std::vector<T> yl(static_cast<std::size_t>(layer.output_desc().local_elements()));
  layer.forward(tensor_view(layer.input_desc(), xl), {w.data(), ws}, b.data(),
                tensor_view(layer.output_desc(), yl));
  expect_owned(layer.output_desc(), yl, y_ref, provider_tol(c.provider), "y");

  auto dyl = scatter(layer.output_desc(), dy);
  std::vector<T> dxl(static_cast<std::size_t>(xd.local_elements())), dw(w.size()), db(b.size());
  layer.backward(tensor_view(layer.input_desc(), xl), tensor_view(layer.output_desc(), dyl),
                 {w.data(), ws}, tensor_view(xd, dxl), {dw.data(), ws}, db.data());
  expect_owned(xd, dxl, dx_ref, provider_tol(c.provider), "dx");
  expect_close(dw, dw_ref, sum_tol<T>(), "dw");
  expect_close(db, db_ref, sum_tol<T>(), "db");
  EXPECT_GE(layer.timings().total, layer.timings().compute) << nsp;
  std::string const d = layer.describe();
  EXPECT_NE(d.find("compute provider " + ops::to_string(c.provider) + ", "), std::string::npos)
      << d;
  EXPECT_NE(d.find(ops::local_kernels<T>(c.provider).threads_description()), std::string::npos)
      << d;
}

// Distributed pooling = serial, forward and backward, bitwise.
template <class T>
void check_pool(window_case const& c, ops::pool_kind kind, bool include_pad = true) {
  SCOPED_TRACE(describe(c) + (kind == ops::pool_kind::max ? " max" : " avg"));
  process_grid grid(MPI_COMM_WORLD, c.dims);
  tensor_desc const xd(grid, c.x, halox::dtype_of<T>(), c.sizes);
  ops::pool_params const p{kind, c.k, c.s, c.pl, c.ph, c.dil, include_pad};
  ops::dist_pool<T> layer(xd, p, with_overlap(c.overlap, c.provider));
  shape_t const ys = ops::pool_output_shape(c.x, p);
  // Integers: ties in max windows are frequent, so the first-maximum rule gets exercised.
  auto x = random_tensor<T>(c.x, 21, -4, 4);
  for (auto& v : x) v = std::floor(v);
  auto const dy = random_tensor<T>(ys, 22);
  std::vector<T> y_ref(dy.size()), dx_ref(x.size());
  ops::pool_forward<T>({x.data(), c.x}, {y_ref.data(), ys}, p);
  ops::pool_backward<T>({x.data(), c.x}, {dy.data(), ys}, {dx_ref.data(), c.x}, p);

  auto xl = scatter(layer.input_desc(), x);
  std::vector<T> yl(static_cast<std::size_t>(layer.output_desc().local_elements()));
  layer.forward(tensor_view(layer.input_desc(), xl), tensor_view(layer.output_desc(), yl));
  expect_owned(layer.output_desc(), yl, y_ref, provider_tol(c.provider), "y");
  auto dyl = scatter(layer.output_desc(), dy);
  auto dxl = scatter(layer.input_desc(), std::vector<T>(x.size(), T(7)));
  layer.backward(tensor_view(layer.input_desc(), xl), tensor_view(layer.output_desc(), dyl),
                 tensor_view(layer.input_desc(), dxl));
  expect_owned(layer.input_desc(), dxl, dx_ref, provider_tol(c.provider), "dx");
}

// A random valid window configuration on a random grid of the world size.
window_case random_case(rng& r, bool conv) {
  window_case c;
  int const nsp = static_cast<int>(r(1, 3));
  c.x = {r(1, 4), r(1, 3)};
  // Mostly extents with a real interior, sometimes tiny ones (blocks of 0 or 1 element).
  for (int i = 0; i < nsp; ++i) c.x.push_back(r(0, 3) == 0 ? r(1, 4) : r(5, nsp == 3 ? 7 : 13));
  c.cout = r(1, 3);
  for (int i = 0; i < nsp; ++i) {
    index_t const in = c.x[2 + i];
    while (true) {
      index_t const k = r(1, 5), s = r(1, 3), d = r(1, 2), pl = r(0, 3), ph = r(0, 3);
      if ((k - 1) * d + 1 > in + pl + ph) continue;
      if (!conv) { // max pooling rejects windows made only of padding
        try {
          auto mp = max_pool({k}, {s});
          mp.pad_lo = {pl};
          mp.pad_hi = {ph};
          mp.dilation = {d};
          (void)ops::pool_output_shape({1, 1, in}, mp);
        } catch (halox::error const&) {
          continue;
        }
      }
      c.k.push_back(k);
      c.s.push_back(s);
      c.dil.push_back(d);
      c.pl.push_back(pl);
      c.ph.push_back(ph);
      break;
    }
  }
  c.dims = random_dims(r, world_size(), static_cast<int>(c.x.size()));
  c.sizes = random_sizes(r, c.x, c.dims, r(0, 1) == 1);
  c.overlap = r(0, 3) != 0;
  c.name = conv ? "conv" : "pool";
  return c;
}

TEST(DistOps, ConvMatchesSerialRandom) {
  rng r(2024);
  for (int i = 0; i < 8; ++i) {
    auto const c = random_case(r, true);
    if (i % 2)
      check_conv<float>(c);
    else
      check_conv<double>(c);
  }
}

TEST(DistOps, PoolMatchesSerialRandom) {
  rng r(77);
  for (int i = 0; i < 8; ++i) {
    auto const c = random_case(r, false);
    auto const kind = i % 2 ? ops::pool_kind::max : ops::pool_kind::average;
    if (i % 3)
      check_pool<double>(c, kind, i % 4 != 1);
    else
      check_pool<float>(c, kind, i % 4 != 1);
  }
}

// Every fast host provider inside the distributed operators, on the random cases above (1-D,
// 2-D and 3-D, uneven and empty blocks, overlap on and off), against the serial reference.
TEST(DistOps, ProvidersMatchSerialRandom) {
  if (!ops::provider_built(ops::compute_provider::onednn))
    GTEST_SKIP() << "no fast host provider built (HALOX_ENABLE_ONEDNN=OFF)";
  rng r(4242);
  for (int i = 0; i < 8; ++i) {
    auto c = random_case(r, true);
    c.provider = ops::compute_provider::onednn;
    check_conv<float>(c);
  }
  for (int i = 0; i < 8; ++i) {
    auto c = random_case(r, false);
    c.provider = ops::compute_provider::onednn;
    check_pool<float>(c, i % 2 ? ops::pool_kind::max : ops::pool_kind::average, i % 4 != 1);
  }
}

// 7x7 global pooling of a 7x7 image split four ways along W (2,2,2,1): one rank computes the
// only output from all seven columns, reaching two ranks away; every rank needs its dy.
TEST(DistOps, MultiHopGlobalPool7x7) {
  int const p = world_size();
  int const ways = p % 4 == 0 ? 4 : p;
  window_case c;
  c.x = {p % 4 == 0 ? index_t(p / 4) : index_t(1), 2, 7, 7};
  c.dims = {p / ways, 1, 1, ways};
  c.k = {7};
  c.name = "multihop";
  check_pool<double>(c, ops::pool_kind::max);
  check_pool<float>(c, ops::pool_kind::average);
  if (ways == 4) {
    process_grid grid(MPI_COMM_WORLD, c.dims);
    tensor_desc const xd(grid, c.x, halox::dtype::float64);
    // Average pooling needs only the forward reach: the part owning column 3 reads [0, 7).
    auto avg = max_pool({7});
    avg.kind = ops::pool_kind::average;
    ops::dist_pool<double> layer(xd, avg);
    EXPECT_EQ(layer.halo_lo()[3], 2);
    EXPECT_EQ(layer.halo_hi()[3], 3) << layer.describe();
    // Max pooling backward re-evaluates the window from every part: each needs all 7 columns.
    ops::dist_pool<double> maxl(xd, max_pool({7}));
    EXPECT_EQ(maxl.halo_lo()[3], 6);
    EXPECT_EQ(maxl.halo_hi()[3], 5) << maxl.describe();
  }
  // The same reach with a convolution (7x7, valid): a single output column as well.
  c.cout = 2;
  c.k = {7, 7};
  check_conv<double>(c);
}

// Max pooling 3x3 / 2 over rows split between ranks (AlexNet's first pool): a rank whose
// inputs feed an output another rank owns computes that output too in forward, so that the
// winners oneDNN keeps are those its backward reads. Three rounds on one layer with new values
// (the winners follow each forward), whole blocks and overlapped boxes (where the owned
// outputs may be computed before the halo arrives, the others not), against the serial
// operators; 3-D too, split along D and W.
TEST(DistOps, SplitMaxPoolKeepsTheWinnersItsBackwardReads) {
  if (!ops::provider_built(ops::compute_provider::onednn))
    GTEST_SKIP() << "no oneDNN provider built (HALOX_ENABLE_ONEDNN=OFF)";
  int const p = world_size();
  struct shape_case {
    shape_t x;
    std::vector<int> dims;
    std::vector<index_t> k, s, pad;
  };
  for (auto const& sc :
       {shape_case{{3, 4, 2 * 7 * p, 9}, {1, 1, p, 1}, {3, 3}, {2, 2}, {1, 1}},
        // 5 rows each: rank 1's own outputs need no halo (computed before the exchange with
        // overlap), the rows it shares with its neighbours' outputs do.
        shape_case{{2, 3, 5 * p, 6}, {1, 1, p, 1}, {3, 3}, {2, 2}, {1, 1}},
        shape_case{
            {2, 3, 3 * p + 1, 5, 2 * p + 2}, {1, 1, p, 1, 1}, {3, 2, 3}, {2, 2, 2}, {1, 0, 1}},
        shape_case{{2, 3, 6, 5, 4 * p}, {1, 1, 1, 1, p}, {2, 2, 3}, {2, 1, 2}, {0, 1, 1}}})
    for (bool overlap : {false, true}) {
      SCOPED_TRACE("x" + idx_str(sc.x) + (overlap ? " overlap" : ""));
      process_grid grid(MPI_COMM_WORLD, sc.dims);
      tensor_desc const xd(grid, sc.x, halox::dtype_of<float>());
      ops::pool_params const pp{ops::pool_kind::max, sc.k, sc.s, sc.pad, sc.pad, {}, true};
      ops::dist_pool<float> layer(xd, pp, with_overlap(overlap, ops::compute_provider::onednn));
      shape_t const ys = ops::pool_output_shape(sc.x, pp);
      std::vector<float> xl(static_cast<std::size_t>(layer.input_desc().local_elements()));
      // y with the output's blocks in a buffer whose last dimension has stride 2 (any strides
      // are allowed for y): the owned rows the widened forward copies must land there too.
      tensor_desc const& od = layer.output_desc();
      std::vector<dim_options> yopt(static_cast<std::size_t>(od.ndim()));
      for (int d = 0; d < od.ndim(); ++d)
        for (int q = 0; q < od.dist().parts()[static_cast<std::size_t>(d)]; ++q)
          yopt[static_cast<std::size_t>(d)].sizes.push_back(od.dist().part_size(d, q));
      shape_t ystr(od.local_shape().size(), 2);
      for (std::size_t d = ystr.size() - 1; d-- > 0;)
        ystr[d] = ystr[d + 1] * std::max<index_t>(1, od.local_shape()[d + 1]);
      tensor_desc const yd(grid, ys, halox::dtype_of<float>(), yopt, ystr);
      // With overlap each direction alternates between split and whole calls while it measures
      // them; one extra forward in round 0 makes round 1 a split forward (its interior computed
      // before the halo arrives) followed by a whole backward (which uses kept winners).
      for (int round = 0; round < 3; ++round) {
        auto x = random_tensor<float>(sc.x, 31 + round, -4, 4);
        for (auto& v : x) v = std::floor(v); // ties: the first maximum wins
        auto const dy = random_tensor<float>(ys, 41 + round);
        std::vector<float> y_ref(dy.size()), dx_ref(x.size());
        ops::pool_forward<float>({x.data(), sc.x}, {y_ref.data(), ys}, pp);
        ops::pool_backward<float>({x.data(), sc.x}, {dy.data(), ys}, {dx_ref.data(), sc.x}, pp);
        xl = scatter(layer.input_desc(), x); // the same size: the buffer keeps its address
        std::vector<float> yl(static_cast<std::size_t>(yd.local_elements()));
        for (int call = 0; call < (round == 0 ? 2 : 1); ++call)
          layer.forward(tensor_view(layer.input_desc(), xl), tensor_view(yd, yl));
        expect_owned(yd, yl, y_ref, 0, "y");
        auto dyl = scatter(layer.output_desc(), dy);
        std::vector<float> dxl(xl.size(), 7.0f);
        layer.backward(tensor_view(layer.input_desc(), xl), tensor_view(layer.output_desc(), dyl),
                       tensor_view(layer.input_desc(), dxl));
        expect_owned(layer.input_desc(), dxl, dx_ref, provider_tol(ops::compute_provider::onednn),
                     "dx");
      }
    }
}

// The last mini-batch smaller than the number of ranks along N: trailing ranks own nothing.
TEST(DistOps, EmptyRankAlongN) {
  int const p = world_size();
  window_case c;
  c.x = {std::max<index_t>(1, p / 2), 2, 6, 5};
  c.dims = {p, 1, 1, 1};
  c.k = {3};
  c.pl = c.ph = {1};
  c.cout = 3;
  c.name = "emptyN";
  check_conv<double>(c);
  check_pool<float>(c, ops::pool_kind::max);
  // Explicit sizes with an empty rank in the middle of N as well as spatial empty parts.
  if (p >= 4 && p % 2 == 0) {
    c.dims = {p / 2, 1, 2, 1};
    c.sizes.assign(4, {});
    c.sizes[0].sizes.assign(static_cast<std::size_t>(p / 2), 0);
    c.sizes[0].sizes[0] = c.x[0];
    c.sizes[2].sizes = {6, 0};
    check_conv<float>(c);
  }
}

TEST(DistOps, ValidConvolution) {
  rng r(5);
  for (int i = 0; i < 3; ++i) {
    window_case c;
    c.x = {2, 2, 9, 8};
    c.k = {i == 1 ? 5 : 3};
    c.cout = 2;
    c.dims = random_dims(r, world_size(), 4);
    c.sizes = random_sizes(r, c.x, c.dims, i == 2);
    c.overlap = i != 1;
    c.name = "valid";
    check_conv<double>(c);
  }
}

TEST(DistOps, Stride2ConvAndPool) {
  rng r(6);
  for (int i = 0; i < 2; ++i) {
    window_case c;
    c.x = {2, 3, 9, 10};
    c.k = {3};
    c.s = {2};
    c.pl = c.ph = {1};
    c.cout = 4;
    c.dims = random_dims(r, world_size(), 4);
    c.sizes = random_sizes(r, c.x, c.dims, i == 1);
    c.name = "stride2";
    check_conv<float>(c);
    check_pool<double>(c, ops::pool_kind::max);
    c.k = {2};
    c.pl = c.ph = {0};
    check_pool<double>(c, ops::pool_kind::average);
  }
  window_case c3; // 3-D, stride 2 on depth only
  c3.x = {1, 2, 6, 5, 4};
  c3.k = {3, 3, 1};
  c3.s = {2, 1, 1};
  c3.pl = c3.ph = {1, 1, 0};
  c3.cout = 2;
  c3.dims = random_dims(r, world_size(), 5);
  c3.name = "stride2-3d";
  check_conv<double>(c3);
}

// Overlap on and off compute the same bits (and both equal the serial result).
TEST(DistOps, OverlapOnAndOffAreIdentical) {
  int const p = world_size();
  process_grid grid = process_grid::create(MPI_COMM_WORLD, {0, 1, 0, 0}, {2, 3, 12, 11},
                                           {0, 0, 1, 1}, {0, 0, 1, 1});
  tensor_desc const xd(grid, {2, 3, 12, 11}, halox::dtype::float32);
  shape_t const ws{4, 3, 3, 3};
  ops::conv_params const cp{{}, {1}, {1}, {}};
  auto const x = random_tensor<float>(xd.shape(), 31), w = random_tensor<float>(ws, 32);
  std::vector<std::vector<float>> ys;
  for (bool overlap : {true, false}) {
    ops::dist_conv<float> layer(xd, ws, cp, with_overlap(overlap));
    auto xl = scatter(layer.input_desc(), x);
    ys.emplace_back(static_cast<std::size_t>(layer.output_desc().local_elements()));
    layer.forward(tensor_view(layer.input_desc(), xl), {w.data(), ws}, nullptr,
                  tensor_view(layer.output_desc(), ys.back()));
  }
  EXPECT_EQ(ys[0], ys[1]) << "overlap changed the result on " << p << " ranks";
  window_case c;
  c.x = xd.shape();
  c.k = {3};
  c.pl = c.ph = {1};
  c.cout = 4;
  c.dims = grid.dims();
  for (bool overlap : {true, false}) {
    c.overlap = overlap;
    c.name = "overlap";
    check_conv<float>(c);
  }
  check_pool<float>(c, ops::pool_kind::max); // overlap off (the random cases mostly run on)
}

// Batch-norm statistics over the whole tensor: equal to serial up to the merge order.
template <class T> void check_bn_global(shape_t const& shape, std::vector<int> const& dims) {
  process_grid grid(MPI_COMM_WORLD, dims);
  tensor_desc const xd(grid, shape, halox::dtype_of<T>());
  index_t const c = shape[1];
  auto const x = random_tensor<T>(shape, 41, 1, 5), dy = random_tensor<T>(shape, 42);
  auto const gamma = random_tensor<T>({c}, 43), beta = random_tensor<T>({c}, 44);
  std::vector<T> rm_ref(c, T(0.5)), rv_ref(c, T(2)), rm(rm_ref), rv(rv_ref);
  std::vector<T> y_ref(x.size()), dx_ref(x.size()), dg_ref(c), db_ref(c), dg(c), db(c);
  ops::bn_params const bp{};
  auto const saved =
      ops::batch_norm_forward<T>({x.data(), shape}, gamma.data(), beta.data(), rm_ref.data(),
                                 rv_ref.data(), {y_ref.data(), shape}, bp);
  ops::batch_norm_backward<T>({x.data(), shape}, {dy.data(), shape}, saved, gamma.data(),
                              {dx_ref.data(), shape}, dg_ref.data(), db_ref.data(), bp);
  ops::dist_batch_norm<T> bn(xd, ops::bn_stats_mode::global, bp);
  auto xl = scatter(xd, x), dyl = scatter(xd, dy);
  std::vector<T> yl(xl.size()), dxl(xl.size());
  bn.forward(tensor_view(xd, xl), tensor_view(xd, yl), gamma.data(), beta.data(), rm.data(),
             rv.data());
  double const tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  expect_owned(xd, yl, y_ref, tol, "y");
  expect_close(rm, rm_ref, tol, "running_mean");
  expect_close(rv, rv_ref, tol, "running_var");
  bn.backward(tensor_view(xd, xl), tensor_view(xd, dyl), gamma.data(), tensor_view(xd, dxl),
              dg.data(), db.data());
  expect_owned(xd, dxl, dx_ref, tol, "dx");
  expect_close(dg, dg_ref, sum_tol<T>(), "dgamma");
  expect_close(db, db_ref, sum_tol<T>(), "dbeta");
}

TEST(DistOps, BatchNormGlobalStats) {
  int const p = world_size();
  rng r(8);
  check_bn_global<double>({4, 3, 6, 5}, random_dims(r, p, 4));
  check_bn_global<float>({2, 2, 3, 4, 5}, random_dims(r, p, 5));
  check_bn_global<double>({2, 3, 5, 4}, {p, 1, 1, 1}); // empty ranks along N
}

// Local statistics: each rank's block normalised on its own, bitwise as serial batch norm of
// that block; dgamma / dbeta summed over the blocks.
TEST(DistOps, BatchNormLocalStats) {
  int const p = world_size();
  rng r(9);
  shape_t const shape{4, 3, 6, 5};
  process_grid grid(MPI_COMM_WORLD, random_dims(r, p, 4));
  tensor_desc const xd(grid, shape, halox::dtype::float64);
  index_t const c = shape[1];
  auto const x = random_tensor<double>(shape, 51, -2, 3), dy = random_tensor<double>(shape, 52);
  auto const gamma = random_tensor<double>({c}, 53), beta = random_tensor<double>({c}, 54);
  std::vector<double> dg_sum(c, 0), db_sum(c, 0), y_ref(x.size()), dx_ref(x.size());
  std::vector<double> rm_ref(c, 0), rv_ref(c, 1);
  ops::bn_params const bp{};
  for (int q = 0; q < p; ++q) { // serial batch norm of every rank's block, one at a time
    box const own = xd.owned_box(q);
    if (own.empty()) continue;
    shape_t bs(own.hi, own.hi + 4), lo(own.lo, own.lo + 4);
    for (int d = 0; d < 4; ++d) bs[d] -= lo[d];
    auto const cut = [&](std::vector<double> const& g) {
      std::vector<double> v(static_cast<std::size_t>(ops::element_count(bs)));
      index_t k = 0;
      for (index_t a = 0; a < bs[0]; ++a)
        for (index_t b = 0; b < bs[1]; ++b)
          for (index_t e = 0; e < bs[2]; ++e)
            for (index_t f = 0; f < bs[3]; ++f)
              v[k++] =
                  g[(((lo[0] + a) * shape[1] + b) * shape[2] + lo[2] + e) * shape[3] + lo[3] + f];
      return v;
    };
    auto const xb = cut(x), dyb = cut(dy);
    std::vector<double> yb(xb.size()), dxb(xb.size()), dg(c), db(c), rm(c, 0), rv(c, 1);
    auto const m = ops::batch_norm_forward<double>({xb.data(), bs}, gamma.data(), beta.data(),
                                                   rm.data(), rv.data(), {yb.data(), bs}, bp);
    ops::batch_norm_backward<double>({xb.data(), bs}, {dyb.data(), bs}, m, gamma.data(),
                                     {dxb.data(), bs}, dg.data(), db.data(), bp);
    for (index_t i = 0; i < c; ++i) {
      dg_sum[i] += dg[i];
      db_sum[i] += db[i];
    }
    if (q != grid.rank()) continue;
    rm_ref = rm;
    rv_ref = rv;
    index_t k = 0; // back into global positions, to compare through expect_owned
    for (index_t a = 0; a < bs[0]; ++a)
      for (index_t b = 0; b < bs[1]; ++b)
        for (index_t e = 0; e < bs[2]; ++e)
          for (index_t f = 0; f < bs[3]; ++f, ++k) {
            index_t const g =
                (((lo[0] + a) * shape[1] + b) * shape[2] + lo[2] + e) * shape[3] + lo[3] + f;
            y_ref[g] = yb[k];
            dx_ref[g] = dxb[k];
          }
  }
  ops::dist_batch_norm<double> bn(xd, ops::bn_stats_mode::local, bp);
  auto xl = scatter(xd, x), dyl = scatter(xd, dy);
  std::vector<double> yl(xl.size()), dxl(xl.size()), dg(c), db(c), rm(c, 0), rv(c, 1);
  bn.forward(tensor_view(xd, xl), tensor_view(xd, yl), gamma.data(), beta.data(), rm.data(),
             rv.data());
  expect_owned(xd, yl, y_ref, 0, "y (local stats)");
  if (!xd.empty()) {
    EXPECT_EQ(rm, rm_ref);
    EXPECT_EQ(rv, rv_ref);
  }
  bn.backward(tensor_view(xd, xl), tensor_view(xd, dyl), gamma.data(), tensor_view(xd, dxl),
              dg.data(), db.data());
  expect_owned(xd, dxl, dx_ref, 0, "dx (local stats)");
  expect_close(dg, dg_sum, 1e-12, "dgamma");
  expect_close(db, db_sum, 1e-12, "dbeta");
}

// Batch norm + ReLU as one layer (forward_relu / backward_relu), writing y into a haloed buffer
// of another layout: bitwise the two layers run one after the other, for the fused host kernels
// (float: oneDNN's provider when built) and the two-pass default (double: reference).
template <class T> void check_bn_relu(shape_t const& shape, std::vector<int> const& dims) {
  process_grid grid(MPI_COMM_WORLD, dims);
  tensor_desc const xd(grid, shape, halox::dtype_of<T>());
  std::vector<dim_options> halos(shape.size(), dim_options::halo(0));
  for (std::size_t d = 2; d < shape.size(); ++d) halos[d] = dim_options::halo(1);
  tensor_desc const yd(grid, shape, halox::dtype_of<T>(), halos); // the next layer's input
  index_t const c = shape[1];
  auto const x = random_tensor<T>(shape, 71), dy = random_tensor<T>(shape, 72);
  auto const gamma = random_tensor<T>({c}, 73), beta = random_tensor<T>({c}, 74);
  ops::dist_batch_norm<T> a(xd), b(xd);
  std::vector<T> rma(c, T(0)), rva(c, T(1)), rmb(rma), rvb(rva), dga(c), dba(c), dgb(c), dbb(c);
  auto xl = scatter(xd, x);
  std::vector<T> ya(static_cast<std::size_t>(yd.local_elements()), T(-9)), yb(ya);
  a.forward(tensor_view(xd, xl), tensor_view(yd, ya), gamma.data(), beta.data(), rma.data(),
            rva.data());
  ops::dist_relu<T>(yd).forward(tensor_view(yd, ya), tensor_view(yd, ya));
  b.forward_relu(tensor_view(xd, xl), tensor_view(yd, yb), gamma.data(), beta.data(), rmb.data(),
                 rvb.data());
  EXPECT_EQ(ya, yb) << "forward_relu differs from forward + relu";
  EXPECT_EQ(rma, rmb);
  EXPECT_EQ(rva, rvb);
  auto dya = scatter(xd, dy), dyb = dya;
  std::vector<T> dxa(xl.size(), T(-9)), dxb(dxa);
  ops::dist_relu<T>(xd).backward(tensor_view(yd, ya), tensor_view(xd, dya), tensor_view(xd, dya));
  a.backward(tensor_view(xd, xl), tensor_view(xd, dya), gamma.data(), tensor_view(xd, dxa),
             dga.data(), dba.data());
  b.backward_relu(tensor_view(xd, xl), tensor_view(yd, yb), tensor_view(xd, dyb), gamma.data(),
                  tensor_view(xd, dxb), dgb.data(), dbb.data());
  EXPECT_EQ(dxa, dxb) << "backward_relu differs from relu backward + backward";
  EXPECT_EQ(dya, dyb) << "backward_relu leaves dy as the gradient of the batch norm's output";
  EXPECT_EQ(dga, dgb);
  EXPECT_EQ(dba, dbb);
  // Half the outputs of a centred normalisation are negative: the ReLU did something.
  std::size_t zeros = 0;
  for (T v : yb) zeros += v == T(0);
  if (!xd.empty()) EXPECT_GT(zeros, 0u);
}

// Convolution + ReLU as one layer (forward_relu / backward_relu) against the convolution, then
// ReLU, then their backward passes: bitwise with the two-pass default (double, reference); with
// oneDNN's post-op (float, when built) within the provider tolerance, as oneDNN measures its
// layout per problem and the fused convolution is another problem, which may get another kernel.
template <class T> void check_conv_relu(shape_t const& xs, std::vector<int> const& dims) {
  process_grid grid(MPI_COMM_WORLD, dims);
  tensor_desc const xd(grid, xs, halox::dtype_of<T>());
  shape_t ws{4, xs[1]};
  for (std::size_t d = 2; d < xs.size(); ++d) ws.push_back(3);
  ops::conv_params const cp{{}, {1}, {1}, {}};
  ops::dist_conv<T> a(xd, ws, cp), b(xd, ws, cp);
  tensor_desc const& in = a.input_desc();
  tensor_desc const& out = a.output_desc();
  auto const x = random_tensor<T>(xs, 81), w = random_tensor<T>(ws, 82),
             bias = random_tensor<T>({ws[0]}, 83);
  shape_t const ys = ops::conv_output_shape(xs, ws, cp);
  auto const dy = random_tensor<T>(ys, 84);
  auto xl = scatter(in, x);
  std::vector<T> ya(static_cast<std::size_t>(out.local_elements()), T(-9)), yb(ya);
  a.forward(tensor_view(in, xl), {w.data(), ws}, bias.data(), tensor_view(out, ya));
  ops::dist_relu<T>(out).forward(tensor_view(out, ya), tensor_view(out, ya));
  b.forward_relu(tensor_view(in, xl), {w.data(), ws}, bias.data(), tensor_view(out, yb));
  // Only EXPECTs here: a rank that returned early would leave the others in the collectives.
  double const tol = sizeof(T) == 4 ? provider_tol(ops::compute_provider::onednn) : 0.0;
  expect_close(yb, ya, tol, "forward_relu against forward + relu");
  auto dya = scatter(out, dy), dyb = dya;
  std::vector<T> dxa(xl.size(), T(0)), dxb(dxa), dwa(w.size()), dwb(w.size()), dba(ws[0]),
      dbb(ws[0]);
  ops::dist_relu<T>(out).backward(tensor_view(out, ya), tensor_view(out, dya),
                                  tensor_view(out, dya));
  a.backward(tensor_view(in, xl), tensor_view(out, dya), {w.data(), ws}, tensor_view(in, dxa),
             {dwa.data(), ws}, dba.data());
  b.backward_relu(tensor_view(in, xl), tensor_view(out, yb), tensor_view(out, dyb), {w.data(), ws},
                  tensor_view(in, dxb), {dwb.data(), ws}, dbb.data());
  expect_close(dyb, dya, tol, "backward_relu's masked dy");
  expect_close(dxb, dxa, tol, "dx");
  expect_close(dwb, dwa, tol, "dw");
  expect_close(dbb, dba, tol, "db");
}

// With overlap, a rank whose interior covers less than dist_options::overlap_min_interior of
// its block computes the block in one call after the exchange: 3 rows per rank and a 3x3
// window leave an interior of 1 or 2 rows of 3, below the default 0.75 on every rank and
// split off at 0. The results are the same bits either way, and a share outside [0, 1] is an
// error on every rank that names it.
TEST(DistOps, SmallInteriorsAreNotSplitOff) {
  int const p = world_size();
  process_grid grid(MPI_COMM_WORLD, {1, 1, p, 1});
  tensor_desc const xd(grid, {2, 3, 3 * p, 5}, halox::dtype::float64);
  shape_t const ws{2, 3, 3, 3};
  ops::conv_params const cp{{}, {1}, {1}, {}};
  auto const x = random_tensor<double>(xd.shape(), 41), w = random_tensor<double>(ws, 42);
  std::vector<std::vector<double>> ys;
  for (double share : {0.75, 0.0}) {
    ops::dist_options o = with_overlap(true);
    o.overlap_min_interior = share;
    ops::dist_conv<double> layer(xd, ws, cp, o);
    std::string const d = layer.describe();
    bool const whole =
        d.find("forward: interior [0, 0) x [0, 0) + 1 boundary box(es)") != std::string::npos;
    // One rank alone has no boundary: its interior is its block, whatever the share.
    EXPECT_EQ(whole, p > 1 && share > 0) << "share " << share << ": " << d;
    auto xl = scatter(layer.input_desc(), x);
    ys.emplace_back(static_cast<std::size_t>(layer.output_desc().local_elements()));
    layer.forward(tensor_view(layer.input_desc(), xl), {w.data(), ws}, nullptr,
                  tensor_view(layer.output_desc(), ys.back()));
  }
  EXPECT_EQ(ys[0], ys[1]) << "the split changed the result on " << p << " ranks";
  for (double share : {1.5, -0.25}) {
    ops::dist_options o;
    o.overlap_min_interior = share;
    std::ostringstream v;
    v << "overlap_min_interior = " << share << "; use a share of the block in [0, 1]";
    halox::test::expect_error_everywhere([&] { ops::dist_conv<double> layer(xd, ws, cp, o); },
                                         halox::errc::invalid_argument, v.str());
  }
}

// With overlap_trials, each direction of a layer alternates between the split and one call
// on the whole block for its first calls, then every rank keeps the same mode: each call's
// results are the bits of overlap off, the choice shows in describe() and agrees over the
// ranks, and a count outside [0, 1000] is an error on every rank that names it.
TEST(DistOps, MeasuredOverlapKeepsTheBitsAndAgrees) {
  int const p = world_size();
  process_grid grid(MPI_COMM_WORLD, {1, 1, p, 1});
  tensor_desc const xd(grid, {2, 3, 4 * p, 6}, halox::dtype::float64);
  shape_t const ws{2, 3, 3, 3};
  ops::conv_params const cp{{}, {1}, {1}, {}};
  auto const x = random_tensor<double>(xd.shape(), 51), w = random_tensor<double>(ws, 52);
  ops::dist_options measured = with_overlap(true);
  measured.overlap_trials = 2;
  ops::dist_conv<double> tuned(xd, ws, cp, measured), plain(xd, ws, cp, with_overlap(false));
  ops::dist_pool<double> tuned_pool(plain.output_desc(), max_pool({3}, {1}, {1}), measured),
      plain_pool(plain.output_desc(), max_pool({3}, {1}, {1}), with_overlap(false));
  tensor_desc const& yd = plain.output_desc();
  tensor_desc const& qd = plain_pool.output_desc();
  auto xl = scatter(plain.input_desc(), x);
  auto const dy = random_tensor<double>(yd.shape(), 53), dq = random_tensor<double>(qd.shape(), 54);
  auto const z = random_tensor<double>(yd.shape(), 55);
  auto dyl = scatter(yd, dy), dql = scatter(qd, dq), zl = scatter(plain_pool.input_desc(), z);
  struct outputs {
    std::vector<double> y, q, dx, dy, dw;
  };
  auto step = [&](ops::dist_conv<double>& c, ops::dist_pool<double>& pl) {
    outputs o;
    o.y.resize(static_cast<std::size_t>(yd.local_elements()));
    o.q.resize(static_cast<std::size_t>(qd.local_elements()));
    o.dx.resize(static_cast<std::size_t>(c.input_desc().local_elements()));
    o.dy.resize(static_cast<std::size_t>(pl.input_desc().local_elements()));
    o.dw.resize(w.size());
    c.forward(tensor_view(c.input_desc(), xl), {w.data(), ws}, nullptr, tensor_view(yd, o.y));
    pl.forward(tensor_view(pl.input_desc(), zl), tensor_view(qd, o.q));
    pl.backward(tensor_view(pl.input_desc(), zl), tensor_view(qd, dql),
                tensor_view(pl.input_desc(), o.dy));
    c.backward(tensor_view(c.input_desc(), xl), tensor_view(yd, dyl), {w.data(), ws},
               tensor_view(c.input_desc(), o.dx), {o.dw.data(), ws}, nullptr);
    return o;
  };
  outputs const ref = step(plain, plain_pool);
  for (int call = 0; call < 8; ++call) { // 6 measured calls per direction, then the choice
    outputs const got = step(tuned, tuned_pool);
    EXPECT_EQ(got.y, ref.y) << "call " << call;
    EXPECT_EQ(got.q, ref.q) << "call " << call;
    EXPECT_EQ(got.dy, ref.dy) << "call " << call;
    EXPECT_EQ(got.dx, ref.dx) << "call " << call;
    EXPECT_EQ(got.dw, ref.dw) << "call " << call;
  }
  for (std::string const d : {tuned.describe(), tuned_pool.describe()}) {
    if (p == 1) { // nothing to hide: no measuring
      EXPECT_EQ(d.find("overlap measured"), std::string::npos) << d;
      continue;
    }
    std::size_t const f = d.find("overlap measured: forward "), b = d.find("; backward ", f);
    ASSERT_NE(f, std::string::npos) << d;
    ASSERT_NE(b, std::string::npos) << d;
    int mine[2] = {d.compare(f + 26, 5, "split") == 0 ? 1 : 0,
                   d.compare(b + 11, 5, "split") == 0 ? 1 : 0};
    EXPECT_TRUE(mine[0] == 1 || d.compare(f + 26, 5, "whole") == 0) << d;
    EXPECT_TRUE(mine[1] == 1 || d.compare(b + 11, 5, "whole") == 0) << d;
    int lo[2] = {0, 0}, hi[2] = {0, 0};
    MPI_Allreduce(mine, lo, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(mine, hi, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(lo[0], hi[0]) << "ranks chose different forward modes: " << d;
    EXPECT_EQ(lo[1], hi[1]) << "ranks chose different backward modes: " << d;
  }
  for (int trials : {-1, 1001}) {
    ops::dist_options o;
    o.overlap_trials = trials;
    halox::test::expect_error_everywhere([&] { ops::dist_conv<double> layer(xd, ws, cp, o); },
                                         halox::errc::invalid_argument,
                                         "overlap_trials = " + std::to_string(trials) + "; use 0");
  }
}

// The fused calls check their buffers as the unfused ones do: a y or dy of other blocks is an
// error on every rank that names the call and the fix, and leaves dy untouched.
// defer_gradient_reduce: backward leaves the dw/db all-reduce in flight; finish_gradients (or
// the next call) writes the sums, bitwise those of the waiting layer; dx is complete at once.
TEST(DistOps, DeferredGradientReduceMatchesWaiting) {
  int const p = world_size();
  process_grid grid(MPI_COMM_WORLD, {1, 1, p, 1});
  tensor_desc const xd(grid, {2, 3, 3 * p + 1, 5}, halox::dtype::float32);
  shape_t const ws{4, 3, 3, 3};
  ops::conv_params const cp{{}, {1}, {1}, {}};
  auto const x = random_tensor<float>(xd.shape(), 61), w = random_tensor<float>(ws, 62);
  auto const b = random_tensor<float>({4}, 63);
  ops::dist_options deferred;
  deferred.defer_gradient_reduce = true;
  ops::dist_conv<float> waits(xd, ws, cp), defers(xd, ws, cp, deferred);
  tensor_desc const& yd = waits.output_desc();
  auto xl = scatter(waits.input_desc(), x);
  struct grads {
    std::vector<float> y, dx, dw, db;
  };
  auto run = [&](ops::dist_conv<float>& c, std::uint64_t seed, bool finish) {
    auto dyl = scatter(yd, random_tensor<float>(yd.shape(), seed));
    grads g;
    g.y.resize(static_cast<std::size_t>(yd.local_elements()));
    g.dx.resize(static_cast<std::size_t>(c.input_desc().local_elements()));
    g.dw.assign(w.size(), -1.0f);
    g.db.assign(4, -1.0f);
    c.forward(tensor_view(c.input_desc(), xl), {w.data(), ws}, b.data(), tensor_view(yd, g.y));
    c.backward(tensor_view(c.input_desc(), xl), tensor_view(yd, dyl), {w.data(), ws},
               tensor_view(c.input_desc(), g.dx), {g.dw.data(), ws}, g.db.data());
    if (finish) c.finish_gradients();
    return g;
  };
  for (std::uint64_t seed : {64, 65}) {
    grads const want = run(waits, seed, false);
    EXPECT_FALSE(waits.gradients_pending());
    grads const got = run(defers, seed, true);
    EXPECT_FALSE(defers.gradients_pending());
    EXPECT_EQ(got.y, want.y);
    EXPECT_EQ(got.dx, want.dx);
    EXPECT_EQ(got.dw, want.dw) << "seed " << seed;
    EXPECT_EQ(got.db, want.db) << "seed " << seed;
  }
  // Unfinished: the next forward completes it into the buffers backward was given.
  grads const want = run(waits, 66, false);
  std::vector<float> dw(w.size(), -1.0f), db(4, -1.0f),
      y(static_cast<std::size_t>(yd.local_elements()));
  std::vector<float> dx(static_cast<std::size_t>(defers.input_desc().local_elements()));
  auto dyl = scatter(yd, random_tensor<float>(yd.shape(), 66));
  defers.forward(tensor_view(defers.input_desc(), xl), {w.data(), ws}, b.data(),
                 tensor_view(yd, y));
  defers.backward(tensor_view(defers.input_desc(), xl), tensor_view(yd, dyl), {w.data(), ws},
                  tensor_view(defers.input_desc(), dx), {dw.data(), ws}, db.data());
  EXPECT_TRUE(defers.gradients_pending());
  EXPECT_EQ(dx, want.dx);
  defers.forward(tensor_view(defers.input_desc(), xl), {w.data(), ws}, b.data(),
                 tensor_view(yd, y));
  EXPECT_FALSE(defers.gradients_pending());
  EXPECT_EQ(dw, want.dw);
  EXPECT_EQ(db, want.db);
  defers.finish_gradients(); // nothing pending: returns at once
}

// reduce_gradients = false: backward leaves dw and db as this rank's partial sums, nothing in
// flight (also with defer_gradient_reduce); their sum over the ranks is the reduced gradient.
TEST(DistOps, UnreducedGradientsArePartialSums) {
  int const p = world_size();
  process_grid grid(MPI_COMM_WORLD, {1, 1, p, 1});
  tensor_desc const xd(grid, {2, 3, 3 * p + 1, 5}, halox::dtype::float32);
  shape_t const ws{4, 3, 3, 3};
  ops::conv_params const cp{{}, {1}, {1}, {}};
  auto const x = random_tensor<float>(xd.shape(), 71), w = random_tensor<float>(ws, 72);
  auto const b = random_tensor<float>({4}, 73);
  ops::dist_options partial;
  partial.reduce_gradients = false;
  partial.defer_gradient_reduce = true; // no effect without the reduction
  ops::dist_conv<float> reduces(xd, ws, cp), leaves(xd, ws, cp, partial);
  tensor_desc const& yd = reduces.output_desc();
  auto xl = scatter(reduces.input_desc(), x);
  auto dyl = scatter(yd, random_tensor<float>(yd.shape(), 74));
  auto run = [&](ops::dist_conv<float>& c, std::vector<float>& dx) {
    std::vector<float> y(static_cast<std::size_t>(yd.local_elements()));
    std::vector<float> g(w.size() + 4, -1.0f); // dw then db
    dx.assign(static_cast<std::size_t>(c.input_desc().local_elements()), 0.0f);
    c.forward(tensor_view(c.input_desc(), xl), {w.data(), ws}, b.data(), tensor_view(yd, y));
    c.backward(tensor_view(c.input_desc(), xl), tensor_view(yd, dyl), {w.data(), ws},
               tensor_view(c.input_desc(), dx), {g.data(), ws}, g.data() + w.size());
    return g;
  };
  std::vector<float> dx_want, dx_got;
  std::vector<float> const want = run(reduces, dx_want), got = run(leaves, dx_got);
  EXPECT_FALSE(leaves.gradients_pending());
  EXPECT_EQ(dx_got, dx_want);
  std::vector<double> sum(got.begin(), got.end());
  MPI_Allreduce(MPI_IN_PLACE, sum.data(), static_cast<int>(sum.size()), MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  double err = 0, differs = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(sum[i] - want[i]) / (1.0 + std::abs(sum[i])));
    differs = std::max(differs, static_cast<double>(std::abs(got[i] - want[i])));
  }
  EXPECT_LT(err, 1e-5);
  MPI_Allreduce(MPI_IN_PLACE, &differs, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (p > 1) EXPECT_GT(differs, 0.0) << "the partial sums equal the totals: reduced after all";
}

TEST(DistOps, FusedReluRejectsBuffersOfOtherBlocks) {
  int const p = world_size();
  process_grid grid(MPI_COMM_WORLD, {1, 1, p});
  tensor_desc const xd(grid, {2, 2, 4 * p}, halox::dtype::float64);
  tensor_desc const other(grid, {2, 2, 4 * p + 1}, halox::dtype::float64);
  std::vector<double> x(static_cast<std::size_t>(xd.local_elements()), 1.0), dy(x), dx(x);
  std::vector<double> wrong(static_cast<std::size_t>(other.local_elements()), 1.0);
  std::vector<double> gamma(2, 1.0), beta(2, 0.0), dg(2), db(2);
  auto expect_throw = [](auto&& call, std::string const& what) {
    bool threw = false;
    try {
      call();
    } catch (halox::error const& e) {
      threw = true;
      EXPECT_EQ(e.code(), halox::errc::invalid_argument);
      EXPECT_NE(e.message().find(what), std::string::npos) << e.what();
      EXPECT_NE(e.message().find("allocate it from the operator's descriptor"), std::string::npos)
          << e.what();
    }
    EXPECT_TRUE(threw) << what;
  };
  ops::dist_batch_norm<double> bn(xd);
  expect_throw(
      [&] {
        bn.forward_relu(tensor_view(xd, x), tensor_view(other, wrong), gamma.data(), beta.data(),
                        nullptr, nullptr);
      },
      "dist_batch_norm::forward_relu: y");
  expect_throw(
      [&] {
        bn.backward_relu(tensor_view(xd, x), tensor_view(other, wrong), tensor_view(xd, dy),
                         gamma.data(), tensor_view(xd, dx), dg.data(), db.data());
      },
      "dist_batch_norm::backward_relu: y");
  ops::conv_params const cp{{}, {1}, {1}, {}};
  shape_t const ws{2, 2, 3};
  ops::dist_conv<double> conv(xd, ws, cp);
  std::vector<double> w(12, 0.5), xl(static_cast<std::size_t>(conv.input_desc().local_elements()));
  expect_throw(
      [&] {
        conv.backward_relu(tensor_view(conv.input_desc(), xl), tensor_view(other, wrong),
                           tensor_view(conv.output_desc(), dy), {w.data(), ws}, tensor_view{}, {},
                           nullptr);
      },
      "dist_conv::backward_relu: y");
  for (double v : dy) EXPECT_EQ(v, 1.0) << "dy changed by a rejected call";
}

TEST(DistOps, ConvWithFusedRelu) {
  int const p = world_size();
  rng r(11);
  check_conv_relu<float>({2, 3, 9, 7}, random_dims(r, p, 4));
  check_conv_relu<double>({2, 2, 5, 6, 4}, random_dims(r, p, 5));
}

TEST(DistOps, BatchNormWithFusedRelu) {
  int const p = world_size();
  rng r(10);
  check_bn_relu<float>({4, 3, 6, 5}, random_dims(r, p, 4));
  check_bn_relu<double>({2, 3, 4, 5, 3}, random_dims(r, p, 5));
  check_bn_relu<float>({2, 3, 5, 4}, {p, 1, 1, 1}); // empty ranks along N
}

// ReLU on the owned block of a haloed buffer, then a layer chain writing straight into the next
// layer's haloed input: conv -> relu (in place) -> max pool.
TEST(DistOps, ReluAndChainedLayers) {
  shape_t const xs{2, 2, 10, 9}, ws{3, 2, 3, 3};
  process_grid grid =
      process_grid::create(MPI_COMM_WORLD, {0, 1, 0, 0}, xs, {0, 0, 1, 1}, {0, 0, 1, 1});
  tensor_desc const xd(grid, xs, halox::dtype::float64);
  ops::conv_params const cp{{}, {1}, {1}, {}};
  ops::pool_params const pp = max_pool({3}, {2}, {1});
  ops::dist_conv<double> conv(xd, ws, cp);
  ops::dist_pool<double> pool(conv.output_desc(), pp);
  ops::dist_relu<double> relu(pool.input_desc());
  auto const x = random_tensor<double>(xs, 61), w = random_tensor<double>(ws, 62);
  shape_t const ys = ops::conv_output_shape(xs, ws, cp), zs = ops::pool_output_shape(ys, pp);
  std::vector<double> y_ref(static_cast<std::size_t>(ops::element_count(ys)));
  std::vector<double> z_ref(static_cast<std::size_t>(ops::element_count(zs)));
  ops::conv_forward<double>({x.data(), xs}, {w.data(), ws}, nullptr, {y_ref.data(), ys}, cp);
  ops::relu_forward<double>({y_ref.data(), ys}, {y_ref.data(), ys});
  ops::pool_forward<double>({y_ref.data(), ys}, {z_ref.data(), zs}, pp);

  auto xl = scatter(conv.input_desc(), x);
  std::vector<double> yl(static_cast<std::size_t>(pool.input_desc().local_elements()));
  std::vector<double> zl(static_cast<std::size_t>(pool.output_desc().local_elements()));
  tensor_view const yv(pool.input_desc(), yl);
  conv.forward(tensor_view(conv.input_desc(), xl), {w.data(), ws}, nullptr, yv);
  relu.forward(yv, yv);
  pool.forward(yv, tensor_view(pool.output_desc(), zl));
  expect_owned(pool.input_desc(), yl, y_ref, 0, "conv+relu");
  expect_owned(pool.output_desc(), zl, z_ref, 0, "conv+relu+pool");
}

// Providers the distributed operators cannot use fail on every rank at construction, naming the
// fix: cudnn where it cannot run (not built, no GPU) or with a backend that moves host memory,
// onednn for double, a negative thread count.
TEST(DistOps, RejectsUnusableProviders) {
  process_grid grid(MPI_COMM_WORLD, {1, 1, world_size()});
  auto expect_throw = [](auto&& make, std::vector<std::string> const& parts) {
    bool threw = false;
    try {
      make();
    } catch (halox::error const& e) {
      threw = true;
      for (auto const& s : parts) EXPECT_NE(e.message().find(s), std::string::npos) << e.what();
    }
    EXPECT_TRUE(threw) << parts.front();
  };
  tensor_desc const xf(grid, {1, 2, 4 * world_size()}, halox::dtype::float32);
  ops::dist_options o;
  o.provider = ops::compute_provider::cudnn; // with the default method, mpi_pack
  // Which fix is named depends on the build and the machine; each says what to change.
  std::string const fix = !ops::provider_built(ops::compute_provider::cudnn)
                              ? "not built into this halox"
                              : "device memory";
  expect_throw(
      [&] {
        ops::dist_conv<float> l(xf, {2, 2, 3}, {{1}, {1}, {1}, {1}}, o);
      },
      {"dist_conv", "cudnn", fix});
  expect_throw([&] { ops::dist_batch_norm<float> l(xf, ops::bn_stats_mode::global, {}, o); },
               {"dist_batch_norm", "cudnn", fix});
  expect_throw([&] { ops::dist_relu<float> l(xf, o); }, {"cudnn", fix});
  if (ops::provider_built(ops::compute_provider::onednn)) {
    tensor_desc const xd(grid, {1, 2, 4 * world_size()}, halox::dtype::float64);
    o.provider = ops::compute_provider::onednn;
    expect_throw([&] { ops::dist_pool<double> l(xd, max_pool({2}), o); },
                 {"onednn", "float32 only", "reference"});
  }
  o.provider = ops::compute_provider::automatic;
  o.threads = -2;
  expect_throw([&] { ops::dist_pool<float> l(xf, max_pool({2}), o); },
               {"threads = -2", "positive"});
}

TEST(DistOps, RejectsSplitChannels) {
  int const p = world_size();
  if (p == 1) GTEST_SKIP() << "needs 2 ranks to split the channels";
  process_grid grid(MPI_COMM_WORLD, {1, p, 1});
  tensor_desc const xd(grid, {1, 2 * p, 8}, halox::dtype::float32);
  bool threw = false;
  try {
    ops::dist_pool<float> layer(xd, max_pool({2}));
  } catch (halox::error const& e) {
    threw = true;
    EXPECT_NE(e.message().find("channels"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(threw);
}

} // namespace
