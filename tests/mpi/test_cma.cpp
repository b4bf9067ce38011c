// The cma backend beyond the oracle sweeps (which run it through host_backends()): buffers that
// move between executions (their addresses travel with every exchange), several tensors of
// different types in one message, two plans in flight at once, and a rank that may not read
// its peers' memory.
#include "support/backend_tests.hpp"

#include <halox/config.hpp>
#include <halox/halox.hpp>
#if HALOX_HAS_CMA
#include "exec/cma/cma_transport.hpp"
#endif

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using namespace halox;
using halox::test::numbered;
using halox::test::offered;
using halox::test::periodic_2d_tensor;
using halox::test::world_size;

TEST(Cma, OfferedForHostMemoryOnLinux) {
  EXPECT_EQ(backend_from_string("cma"), backend::cma);
  EXPECT_STREQ(to_string(backend::cma), "cma");
  EXPECT_EQ(offered(backend::cma), HALOX_HAS_CMA != 0);
  for (backend b : device_backends()) EXPECT_NE(b, backend::cma);
#if !HALOX_HAS_CMA
  halox::test::expect_not_available(backend::cma);
#endif
}

// Every execution may pass other buffers: the receiver reads from wherever the sender's tensor
// is this time. Two tensors of different element types travel in one message per peer.
TEST(Cma, BuffersThatMoveBetweenExecutionsAndTwoTensorsPerMessageMatchMpiPack) {
  if (!offered(backend::cma)) GTEST_SKIP() << "cma is not in this build";
  tensor_desc const t = periodic_2d_tensor(dtype::float64, {13, 11}, 2);
  tensor_desc const u = periodic_2d_tensor(dtype::uint8, {13, 11}, 1);
  halo_options o, ref;
  o.method = backend::cma;
  ref.method = backend::mpi_pack;
  halo_plan p({t, u}, o), pr({t, u}, ref);
  EXPECT_EQ(p.selected_backend(), backend::cma);
  for (int round = 0; round < 3; ++round) {
    // Fresh vectors every round: new addresses on every rank.
    auto x = numbered<double>(t, round), xr = x;
    auto y = numbered<std::uint8_t>(u, round + 7), yr = y;
    p.execute({tensor_view(t, x), tensor_view(u, y)});
    pr.execute({tensor_view(t, xr), tensor_view(u, yr)});
    EXPECT_EQ(x, xr) << "round " << round;
    EXPECT_EQ(y, yr) << "round " << round;
    // The reverse exchange combines: what is read lands in the workspace and is summed in.
    p.execute_reverse({tensor_view(t, x), tensor_view(u, y)}, reduce_op::sum);
    pr.execute_reverse({tensor_view(t, xr), tensor_view(u, yr)}, reduce_op::sum);
    EXPECT_EQ(x, xr) << "round " << round << " reverse";
    EXPECT_EQ(y, yr) << "round " << round << " reverse";
  }
}

// Two plans of one context in flight together, completed in the opposite order, and a
// redistribution whose rows become columns (each run a row segment on one side, a column's
// worth of runs on the other).
TEST(Cma, PlansInFlightTogetherAndATransposeMatchMpiPack) {
  if (!offered(backend::cma)) GTEST_SKIP() << "cma is not in this build";
  context ctx(MPI_COMM_WORLD);
  tensor_desc const t = periodic_2d_tensor(dtype::float32, {12, 10}, 1);
  tensor_desc const u = periodic_2d_tensor(dtype::int32, {9, 14}, 2);
  halo_options o, ref;
  o.method = backend::cma;
  ref.method = backend::mpi_pack;
  halo_plan p(ctx, t, o), q(ctx, u, o), pr(ctx, t, ref), qr(ctx, u, ref);
  auto x = numbered<float>(t, 1), xr = x;
  auto y = numbered<std::int32_t>(u, 2), yr = y;
  p.start(tensor_view(t, x));
  q.start(tensor_view(u, y));
  q.wait();
  p.wait();
  pr.execute(tensor_view(t, xr));
  qr.execute(tensor_view(u, yr));
  EXPECT_EQ(x, xr);
  EXPECT_EQ(y, yr);
  halox::test::expect_transpose_matches_mpi_pack(ctx, backend::cma);
}

#if HALOX_HAS_CMA
// A rank that may not read its peer's memory (here made to see EPERM, as under
// kernel.yama.ptrace_scope=1 without CAP_SYS_PTRACE): a clear error on every rank that names
// both ranks, the reason and the way out; automatic selection passes over cma.
TEST(Cma, ARefusedReadIsAClearErrorEverywhereAndAutoPassesOverIt) {
  if (!offered(backend::cma)) GTEST_SKIP() << "cma is not in this build";
  if (world_size() < 2) GTEST_SKIP() << "one rank reads nobody's memory";
  context ctx(MPI_COMM_WORLD);
  tensor_desc const t = periodic_2d_tensor(dtype::float32, {8, 6}, 1);
  halo_options o;
  o.method = backend::cma;
  o.timeout_seconds = 30;
  detail::cma_refuse_reads_once(1);
  halox::test::expect_error_everywhere([&] { halo_plan p(ctx, t, o); }, errc::unsupported,
                                       "backend cma cannot run here: rank 1 cannot read the "
                                       "memory of rank ");
  detail::cma_refuse_reads_once(1);
  try {
    halo_plan p(ctx, t, o);
    ADD_FAILURE() << "cma was built although rank 1 may not read";
  } catch (halox::error const& e) {
    for (std::string const s : {"process_vm_readv", "Operation not permitted", "ptrace",
                                "CAP_SYS_PTRACE", "use another backend"})
      EXPECT_NE(e.message().find(s), std::string::npos)
          << "expected \"" << s << "\" in " << e.what();
  }
  // A shape no other test tunes, so that the decision is measured here and not cached.
  tensor_desc const v = periodic_2d_tensor(dtype::float32, {23, 7}, 1);
  halo_options a;
  a.method = backend::automatic;
  a.timeout_seconds = 30;
  detail::cma_refuse_reads_once(1);
  halo_plan p(ctx, v, a);
  EXPECT_NE(p.selected_backend(), backend::cma);
  EXPECT_NE(p.describe().find("cma unavailable"), std::string::npos) << p.describe();
  detail::cma_refuse_reads_once(-1);
  std::vector<float> x(v.local_elements(), 1.0f);
  p.execute(tensor_view(v, x));
}
#endif

} // namespace
