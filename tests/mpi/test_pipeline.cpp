// The mpi_pipeline backend beyond the oracle sweeps (which run it through host_backends(), where
// most messages are too short to be cut): messages cut into many fragments (a fragment size of a
// few elements), strided and contiguous faces, two tensors per message of one and of two element
// types, reverse (summing) exchanges, a transpose and its inverse, the automatic cut of a long
// message, and a fragment size the ranks disagree on.
#include "support/backend_tests.hpp"

#include <halox/halox.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using namespace halox;
using halox::test::expect_error_everywhere;
using halox::test::numbered;
using halox::test::offered;
using halox::test::periodic_2d_tensor;
using halox::test::world_rank;
using halox::test::world_size;

context pipeline_context(std::size_t fragment) {
  context_options co;
  co.pipeline_fragment_bytes = fragment;
  return context(MPI_COMM_WORLD, co);
}

TEST(Pipeline, OfferedForHostMemory) {
  EXPECT_EQ(backend_from_string("mpi_pipeline"), backend::mpi_pipeline);
  EXPECT_STREQ(to_string(backend::mpi_pipeline), "mpi_pipeline");
  EXPECT_TRUE(offered(backend::mpi_pipeline));
  for (backend b : device_backends()) EXPECT_NE(b, backend::mpi_pipeline);
}

// Fragments of 1, 3 and 40 elements of 8 bytes: every face is cut, mostly in the middle of a
// region, so each side unpacks sub-boxes of its regions. Two tensors of one element type share
// a message (cut across the tensors); with a uint8 tensor beside them (mixed sizes) the message
// goes whole. Buffers move between executions.
TEST(Pipeline, ManySmallFragmentsMatchMpiPackForwardAndReverse) {
  tensor_desc const t = periodic_2d_tensor(dtype::float64, {13, 11}, 2);
  tensor_desc const u = periodic_2d_tensor(dtype::float64, {9, 14}, 1);
  tensor_desc const w = periodic_2d_tensor(dtype::uint8, {13, 11}, 1);
  for (std::size_t fragment : {std::size_t{8}, std::size_t{24}, std::size_t{320}}) {
    context ctx = pipeline_context(fragment);
    halo_options o, ref;
    o.method = backend::mpi_pipeline;
    ref.method = backend::mpi_pack;
    halo_plan p(ctx, {t, u}, o), pr(ctx, {t, u}, ref);
    halo_plan q(ctx, {t, w}, o), qr(ctx, {t, w}, ref);
    EXPECT_EQ(p.selected_backend(), backend::mpi_pipeline);
    for (int round = 0; round < 3; ++round) {
      auto x = numbered<double>(t, round), xr = x;
      auto y = numbered<double>(u, round + 5), yr = y;
      p.execute({tensor_view(t, x), tensor_view(u, y)});
      pr.execute({tensor_view(t, xr), tensor_view(u, yr)});
      EXPECT_EQ(x, xr) << "fragment " << fragment << " round " << round;
      EXPECT_EQ(y, yr) << "fragment " << fragment << " round " << round;
      p.execute_reverse({tensor_view(t, x), tensor_view(u, y)}, reduce_op::sum);
      pr.execute_reverse({tensor_view(t, xr), tensor_view(u, yr)}, reduce_op::sum);
      EXPECT_EQ(x, xr) << "fragment " << fragment << " round " << round << " reverse";
      EXPECT_EQ(y, yr) << "fragment " << fragment << " round " << round << " reverse";

      auto a = numbered<double>(t, round + 9), ar = a;
      auto b = numbered<std::uint8_t>(w, round + 3), br = b;
      q.execute({tensor_view(t, a), tensor_view(w, b)});
      qr.execute({tensor_view(t, ar), tensor_view(w, br)});
      EXPECT_EQ(a, ar) << "mixed types, fragment " << fragment;
      EXPECT_EQ(b, br) << "mixed types, fragment " << fragment;
    }
  }
}

// Rows to columns: each rank's message is a strided block on the sending side and a contiguous
// one on the receiving side (received in place, fragment by fragment), and back.
TEST(Pipeline, ATransposeInFragmentsMatchesMpiPackAndInverts) {
  halox::test::expect_transpose_matches_mpi_pack(pipeline_context(56), backend::mpi_pipeline);
}

// With the automatic size, a 160 KB face (a column of 20 000 doubles: 20 000 runs of one
// element) is cut in fragments of at least 64 KiB, which describe() reports; the result is
// mpi_pack's.
TEST(Pipeline, AutomaticCutOfALongStridedFace) {
  int const n = world_size();
  process_grid g(MPI_COMM_WORLD, {1, n});
  tensor_desc const t(g, {20000, 4 * n}, dtype::float64,
                      {dim_options::halo(0, false), dim_options::halo(1, true)});
  context ctx = pipeline_context(0);
  halo_options o, ref;
  o.method = backend::mpi_pipeline;
  ref.method = backend::mpi_pack;
  halo_plan p(ctx, t, o), pr(ctx, t, ref);
  if (n > 1) {
    // Every message (one per neighbour, both columns when the two neighbours are one rank) cut.
    std::string const d = p.describe();
    EXPECT_NE(d.find(" sent message(s) cut"), std::string::npos) << d;
    EXPECT_EQ(d.find(" 0 of "), std::string::npos) << d;
    EXPECT_NE(d.find("fragment size automatic"), std::string::npos) << d;
  }
  auto x = numbered<double>(t, 1), xr = x;
  p.execute(tensor_view(t, x));
  pr.execute(tensor_view(t, xr));
  EXPECT_EQ(x, xr);
  p.execute_reverse(tensor_view(t, x), reduce_op::max);
  pr.execute_reverse(tensor_view(t, xr), reduce_op::max);
  EXPECT_EQ(x, xr);
}

TEST(Pipeline, RanksThatDisagreeOnTheFragmentSizeFailEverywhere) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  context_options co;
  co.pipeline_fragment_bytes = world_rank() == 0 ? 4096 : 8192;
  expect_error_everywhere([&] { context ctx(MPI_COMM_WORLD, co); }, errc::inconsistent_ranks,
                          "context");
}

TEST(Pipeline, AFragmentSizeThatIsNotANumberIsAClearError) {
  ::setenv("HALOX_PIPELINE_FRAGMENT", "64k", 1);
  expect_error_everywhere([] { context ctx(MPI_COMM_WORLD); }, errc::invalid_argument,
                          "HALOX_PIPELINE_FRAGMENT=\"64k\" is not a number of bytes");
  ::unsetenv("HALOX_PIPELINE_FRAGMENT");
}

} // namespace
