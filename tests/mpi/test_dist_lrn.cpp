// dist_lrn = serial LRN bit for bit, with the channels split (channel halo exchanges), with N
// and space split (no communication), and both; parameter errors on every rank.
//
// Every rank builds the whole input from the same seed, runs the serial operator on the whole
// tensor, and compares its owned outputs with the serial result restricted to its block. Halo
// cells start as NaN, so a channel halo the exchange misses, or a kernel reading past the
// global channel range, shows.
#include <halox/error.hpp>
#include <halox/ops/dist_lrn.hpp>
#include <halox/ops/lrn.hpp>

#include "support/dist_ops_helpers.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace ops = halox::ops;
using halox::box;
using halox::index_t;
using halox::process_grid;
using halox::tensor_desc;
using halox::tensor_view;
using halox::test::expect_owned;
using halox::test::random_tensor;
using halox::test::scatter;
using halox::test::shape_t;

int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

template <class T> void check(shape_t const& shape, std::vector<int> const& dims,
                              ops::lrn_params const& p, ops::dist_options const& o = {},
                              double tol = 0) {
  std::ostringstream what;
  what << "shape rank " << shape.size() << " grid";
  for (int d : dims) what << " " << d;
  what << " size " << p.size << " " << halox::to_string(halox::dtype_of<T>()) << " overlap "
       << o.overlap;
  process_grid grid(MPI_COMM_WORLD, dims);
  tensor_desc const xd(grid, shape, halox::dtype_of<T>());
  auto const x = random_tensor<T>(shape, 5, -3, 3), dy = random_tensor<T>(shape, 6, -3, 3);
  std::vector<T> y_ref(x.size()), dx_ref(x.size());
  ops::lrn_forward<T>({x.data(), shape}, {y_ref.data(), shape}, p);
  ops::lrn_backward<T>({x.data(), shape}, {dy.data(), shape}, {dx_ref.data(), shape}, p);

  ops::dist_lrn<T> lrn(xd, p, o);
  EXPECT_EQ(lrn.splits_channels(), dims[1] > 1) << what.str();
  tensor_desc const& in = lrn.input_desc();
  tensor_desc const& out = lrn.output_desc();
  if (dims[1] > 1) {
    EXPECT_EQ(in.dist().options(1).halo_lo, p.size / 2) << what.str();
    EXPECT_EQ(in.dist().options(1).halo_hi, (p.size - 1) / 2) << what.str();
  } else {
    EXPECT_EQ(lrn.bytes_sent(), 0u);
  }
  auto xl = scatter(in, x);
  auto dyl = scatter(out, dy);
  std::vector<T> yl(static_cast<std::size_t>(out.local_elements())), dxl(yl.size());
  lrn.forward(tensor_view(in, xl), tensor_view(out, yl));
  expect_owned(out, yl, y_ref, tol, "y, " + what.str());
  lrn.backward(tensor_view(in, xl), tensor_view(out, dyl), tensor_view(out, dxl));
  expect_owned(out, dxl, dx_ref, tol, "dx, " + what.str());
  // dx in place of dy.
  lrn.backward(tensor_view(in, xl), tensor_view(out, dyl), tensor_view(out, dyl));
  expect_owned(out, dyl, dx_ref, tol, "dx in dy, " + what.str());
}

ops::dist_options reference(bool overlap = true) {
  ops::dist_options o;
  o.provider = ops::compute_provider::reference;
  o.overlap = overlap;
  return o;
}

TEST(DistLrn, ChannelSplitMatchesSerial) {
  int const p = world_size();
  for (int size : {1, 2, 3, 4, 5, 6}) {
    ops::lrn_params const lp{size, 0.5, 0.75, 2.0};
    check<double>({2, 7, 3, 4}, {1, p, 1, 1}, lp, reference());
    check<float>({2, 7, 5}, {1, p, 1}, lp, reference());
  }
  // Windows wider than a rank's block (deep halos), 3-D, overlap off.
  check<double>({1, 2 * p + 1, 2, 2, 3}, {1, p, 1, 1, 1}, {9, 1.0, 0.75, 1.0}, reference());
  check<double>({2, 6, 4, 3}, {1, p, 1, 1}, {5, 0.5, 0.75, 2.0}, reference(false));
}

TEST(DistLrn, ChannelsAndSpaceSplitMatchSerial) {
  int const p = world_size();
  int const pc = p % 3 == 0 ? 3 : p % 2 == 0 ? 2 : 1;
  check<double>({2, 8, 6, 5}, {1, pc, p / pc, 1}, {5, 0.5, 0.75, 2.0}, reference());
  check<float>({p, 5, 3, 4}, {p / pc, pc, 1, 1}, {4, 1e-2, 0.75, 1.0}, reference());
}

TEST(DistLrn, SpatialAndBatchSplitMatchSerial) {
  int const p = world_size();
  check<double>({2, 6, 4 * p, 3}, {1, 1, p, 1}, {5, 0.5, 0.75, 2.0}, reference());
  check<float>({p, 5, 3, 4}, {p, 1, 1, 1}, {3, 0.1, 0.5, 1.0}, reference());
  // The automatic provider (oneDNN for float when built) on each rank's block.
  check<float>({2, 9, 4 * p, 3}, {1, 1, p, 1}, {5, 0.5, 0.75, 2.0}, {}, 1e-5);
}

void expect_throw_everywhere(std::function<void()> const& make,
                             std::vector<std::string> const& parts) {
  int threw = 0;
  try {
    make();
  } catch (halox::error const& e) {
    threw = 1;
    for (auto const& s : parts) EXPECT_NE(e.message().find(s), std::string::npos) << e.what();
  }
  EXPECT_EQ(threw, 1) << parts.front();
}

TEST(DistLrn, BadParametersFailOnEveryRank) {
  int const p = world_size();
  process_grid grid(MPI_COMM_WORLD, {1, p, 1});
  tensor_desc const xd(grid, {1, 2 * p, 8}, halox::dtype::float32);
  expect_throw_everywhere(
      [&] {
        ops::dist_lrn<float> l(xd, {0, 1e-4, 0.75, 1.0});
      },
      {"dist_lrn", "size = 0", "size >= 1"});
  expect_throw_everywhere(
      [&] {
        ops::dist_lrn<float> l(xd, {5, 1e-4, 0.75, -1.0});
      },
      {"k = -1", "k > 0"});
  expect_throw_everywhere([&] { ops::dist_lrn<double> l(xd); }, {"dtype float32"});
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (p > 1) { // one rank with another size: everyone learns what differs
    ops::lrn_params lp;
    lp.size = rank == p - 1 ? 3 : 5;
    expect_throw_everywhere([&] { ops::dist_lrn<float> l(xd, lp); }, {"size: 5 on rank 0"});
  }
  if (!ops::provider_built(ops::compute_provider::cudnn)) {
    ops::dist_options o;
    o.provider = ops::compute_provider::cudnn;
    expect_throw_everywhere([&] { ops::dist_lrn<float> l(xd, {}, o); }, {"cudnn"});
  }
}

} // namespace
