// The distributed operators execute without heap allocation once warm: forward and backward
// (fused variants included) of every operator, float and double, on spatial, channel and sample
// splits, with and without overlap. Operator workspaces are reserved by the first executions;
// a training step repeats the same calls, so later steps must not touch the allocator. The
// kernels checked are halox's own (the reference provider): oneDNN's primitives allocate their
// argument maps inside each execute, which halox cannot change.
#include "support/alloc_counter.hpp"
#include "support/mpi_helpers.hpp"

#include <halox/halox.hpp>
#include <halox/ops/distributed.hpp>
#include <halox/ops/ops.hpp>
#include <halox/ops/provider.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace halox;
using halox::test::allocations_during;
using halox::test::world_size;

struct named_run {
  std::string name;
  std::function<void()> run;
};

// Runs each twice to warm up, then expects three more runs to allocate nothing.
void expect_no_allocations(std::vector<named_run> const& runs, std::string const& where) {
  for (auto const& r : runs) {
    r.run();
    r.run();
    long const n = allocations_during([&] {
      for (int k = 0; k < 3; ++k) r.run();
    });
    EXPECT_EQ(n, 0) << where << ": " << r.name << " allocated " << n << " times in 3 executions";
  }
}

template <class T> struct buffer {
  std::vector<T> v;
  tensor_view view;
  explicit buffer(tensor_desc const& d)
      : v(static_cast<std::size_t>(d.local_elements()) + 1, T(0.25)), view(d, v) {}
};

std::vector<int> spatial_grid(int p) {
  int a = 1;
  for (int k = 1; k * k <= p; ++k)
    if (p % k == 0) a = k;
  return {1, 1, a, p / a};
}

template <class T>
void check_layers(std::vector<int> const& dims, bool overlap, ops::bn_stats_mode mode) {
  std::vector<index_t> const xs{4, 4, 9, 8}, ws{4, 4, 3, 3};
  process_grid grid(MPI_COMM_WORLD, dims);
  tensor_desc const xd(grid, xs, dtype_of<T>());
  ops::dist_options o;
  o.provider = ops::compute_provider::reference;
  o.overlap = overlap;
  o.progress_min_bytes = 0;   // cut the overlapped interiors into pieces too
  o.overlap_min_interior = 0; // however small
  ops::dist_conv<T> conv(xd, ws, ops::conv_params{{}, {1}, {1}, {}}, o);
  tensor_desc const& yd = conv.output_desc();
  ops::dist_batch_norm<T> bn(yd, mode, {}, o);
  ops::pool_params mp;
  mp.kernel = {3};
  mp.stride = {2};
  mp.pad_lo = mp.pad_hi = {1};
  ops::pool_params ap = mp;
  ap.kind = ops::pool_kind::average;
  ops::dist_pool<T> maxpool(yd, mp, o), avgpool(yd, ap, o);
  ops::dist_relu<T> relu(yd, o);
  ops::dist_lrn<T> lrn(yd, ops::lrn_params{3, 1e-3, 0.75, 1.0}, o);

  buffer<T> x(conv.input_desc()), dx(conv.input_desc()), y(yd), dy(yd), z(yd), dz(yd),
      q(maxpool.output_desc()), dq(maxpool.output_desc()), a(avgpool.output_desc()),
      da(avgpool.output_desc()), l(lrn.output_desc()), dl(lrn.output_desc()), ly(lrn.input_desc()),
      ldx(lrn.output_desc()), px(maxpool.input_desc()), pdx(maxpool.input_desc()),
      apx(avgpool.input_desc()), apdx(avgpool.input_desc());
  std::vector<T> w(static_cast<std::size_t>(ops::element_count(ws)), T(0.1)), dw(w.size()),
      b(4, T(0.1)), db(4), g(4, T(1)), be(4), dg(4), rm(4), rv(4, T(1));
  ops::const_tensor_ref<T> const wr(w.data(), ws);
  ops::tensor_ref<T> const dwr(dw.data(), ws);

  expect_no_allocations(
      {
          {"dist_conv::forward", [&] { conv.forward(x.view, wr, b.data(), y.view); }},
          {"dist_conv::forward_relu", [&] { conv.forward_relu(x.view, wr, b.data(), y.view); }},
          {"dist_conv::backward",
           [&] { conv.backward(x.view, dy.view, wr, dx.view, dwr, db.data()); }},
          {"dist_conv::backward_relu",
           [&] { conv.backward_relu(x.view, y.view, dy.view, wr, dx.view, dwr, db.data()); }},
          {"dist_batch_norm::forward",
           [&] { bn.forward(y.view, z.view, g.data(), be.data(), rm.data(), rv.data()); }},
          {"dist_batch_norm::forward_relu",
           [&] { bn.forward_relu(y.view, z.view, g.data(), be.data(), rm.data(), rv.data()); }},
          {"dist_batch_norm::backward",
           [&] { bn.backward(y.view, dz.view, g.data(), dy.view, dg.data(), db.data()); }},
          {"dist_batch_norm::backward_relu",
           [&] {
             bn.backward_relu(y.view, z.view, dz.view, g.data(), dy.view, dg.data(), db.data());
           }},
          {"dist_pool::forward (max)", [&] { maxpool.forward(px.view, q.view); }},
          {"dist_pool::backward (max)", [&] { maxpool.backward(px.view, dq.view, pdx.view); }},
          {"dist_pool::forward (average)", [&] { avgpool.forward(apx.view, a.view); }},
          {"dist_pool::backward (average)",
           [&] { avgpool.backward(apx.view, da.view, apdx.view); }},
          {"dist_relu::forward", [&] { relu.forward(y.view, z.view); }},
          {"dist_relu::backward", [&] { relu.backward(y.view, dz.view, dy.view); }},
          {"dist_lrn::forward", [&] { lrn.forward(ly.view, l.view); }},
          {"dist_lrn::backward", [&] { lrn.backward(ly.view, dl.view, ldx.view); }},
      },
      std::string(sizeof(T) == 4 ? "float" : "double") + " grid " + std::to_string(dims[0]) + "x" +
          std::to_string(dims[1]) + "x" + std::to_string(dims[2]) + "x" + std::to_string(dims[3]) +
          (overlap ? " overlap" : " no overlap") +
          (mode == ops::bn_stats_mode::global ? " global" : " local") + " statistics");
}

TEST(OpsAllocations, CounterIsInEffect) {
  long const n = allocations_during([] { std::vector<int> v(3); });
  EXPECT_GT(n, 0) << "the allocation counter does not see operator new";
}

TEST(OpsAllocations, SpatialSplitExecutesWithoutAllocating) {
  auto const dims = spatial_grid(world_size());
  check_layers<float>(dims, true, ops::bn_stats_mode::global);
  check_layers<double>(dims, false, ops::bn_stats_mode::local);
}

// Channels split (the layers that allow it): LRN exchanges channel halos.
TEST(OpsAllocations, ChannelSplitExecutesWithoutAllocating) {
  using T = float;
  std::vector<index_t> const xs{3, 7, 5, 4};
  process_grid grid(MPI_COMM_WORLD, {1, world_size(), 1, 1});
  tensor_desc const xd(grid, xs, dtype_of<T>());
  ops::dist_options o;
  o.provider = ops::compute_provider::reference;
  ops::dist_lrn<T> lrn(xd, ops::lrn_params{5, 1e-3, 0.75, 1.0}, o);
  ops::dist_relu<T> relu(xd, o);
  buffer<T> x(lrn.input_desc()), y(xd), dy(xd), dx(xd);
  expect_no_allocations(
      {
          {"dist_lrn::forward", [&] { lrn.forward(x.view, y.view); }},
          {"dist_lrn::backward", [&] { lrn.backward(x.view, dy.view, dx.view); }},
          {"dist_relu::forward", [&] { relu.forward(y.view, dx.view); }},
          {"dist_relu::backward", [&] { relu.backward(y.view, dy.view, dx.view); }},
      },
      "channels split");
}

// Samples split, more ranks than samples at 6 and 8: some ranks own nothing.
TEST(OpsAllocations, SampleSplitExecutesWithoutAllocating) {
  check_layers<double>({world_size(), 1, 1, 1}, true, ops::bn_stats_mode::global);
}

} // namespace
