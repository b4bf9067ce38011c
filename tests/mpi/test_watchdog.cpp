// Faults at execution time: a rank that never executes, a rank that fails before sending, a
// rank that executes another plan. With a timeout every waiting rank reports instead of hanging
// (a rank that fails its own checks is named at once by its notice, see test_peer_failure.cpp);
// with execute-time checking every rank reports at once. And collective errors that say which
// field differs between ranks.
#include "support/mpi_helpers.hpp"

#include <halox/halox.hpp>
#include <halox/ops/distributed.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

namespace {

using namespace halox;
using halox::test::expect_error_everywhere;
using halox::test::outcome;
using halox::test::run;
using halox::test::world_rank;
using halox::test::world_size;

constexpr double bound = 1.0; // seconds

std::vector<int> near_square(int p) {
  int a = 1;
  for (int k = 1; k * k <= p; ++k)
    if (p % k == 0) a = k;
  return {a, p / a};
}

// Periodic in both dimensions: at 2 to 4 ranks every rank exchanges with every other.
tensor_desc make_tensor() {
  process_grid g(MPI_COMM_WORLD, near_square(world_size()));
  return tensor_desc(g, {8, 8}, dtype::float64,
                     {dim_options::halo(1, true), dim_options::halo(1, true)});
}

class Watchdog : public ::testing::TestWithParam<backend> {};

// At 2 to 4 ranks on the periodic 2-D grid every rank exchanges with every other; beyond, some
// ranks are no neighbours of the faulty one and (rightly) complete.
bool all_neighbours() { return world_size() >= 2 && world_size() <= 4; }

TEST_P(Watchdog, RankThatNeverExecutesIsNamedByEveryWaitingRank) {
  if (!all_neighbours()) GTEST_SKIP() << "needs 2 to 4 ranks";
  int const skipper = world_size() - 1;
  {
    context ctx(MPI_COMM_WORLD); // fresh: a timed-out context is not reused
    tensor_desc const t = make_tensor();
    halo_options o;
    o.method = GetParam();
    o.timeout_seconds = bound;
    halo_plan p(ctx, t, o);
    std::vector<double> x(t.local_elements(), 1.0);
    if (world_rank() != skipper) {
      outcome const r = run([&] { p.execute(tensor_view(t, x)); });
      EXPECT_EQ(r.code, static_cast<int>(errc::timeout)) << r.message;
      EXPECT_NE(r.message.find("no message yet from rank " + std::to_string(skipper)),
                std::string::npos)
          << r.message;
      EXPECT_NE(r.message.find("B outstanding"), std::string::npos) << r.message;
      EXPECT_NE(r.message.find("halo_plan"), std::string::npos) << r.message;
      EXPECT_GE(r.seconds, bound * 0.99);
      EXPECT_LT(r.seconds, bound + 5.0) << "reported long after the timeout";
    }
    // The skipper keeps its context until the others gave up, as in the test below: with the
    // ucx backends a peer whose transport is already gone fails a send at once (a UCX shared
    // memory error) instead of leaving the sender waiting for the timeout this test checks.
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// A rank that fails its own checks is not left to the watchdog: its notice names it at once.
TEST_P(Watchdog, RankThatFailsBeforeSendingIsNamedBeforeTheBound) {
  if (!all_neighbours()) GTEST_SKIP() << "needs 2 to 4 ranks";
  {
    context ctx(MPI_COMM_WORLD);
    tensor_desc const t = make_tensor();
    halo_options o;
    o.method = GetParam();
    o.timeout_seconds = 10 * bound; // the notice must come first
    halo_plan p(ctx, t, o);
    std::vector<double> x(t.local_elements(), 1.0);
    // Rank 0 passes a buffer one element short: it throws before posting anything.
    tensor_view v(t, x.data(), (x.size() - (world_rank() == 0 ? 1 : 0)) * sizeof(double));
    outcome const r = run([&] { p.execute(v); });
    if (world_rank() == 0) {
      EXPECT_EQ(r.code, static_cast<int>(errc::invalid_argument)) << r.message;
    } else {
      EXPECT_EQ(r.code, static_cast<int>(errc::peer_failed)) << r.message;
      EXPECT_NE(r.message.find("rank 0"), std::string::npos) << r.message;
      EXPECT_LT(r.seconds, bound + 5.0);
    }
    // Rank 0 keeps its context until the others gave up: the ucx backends' transport lives in
    // the context, and a peer whose transport is gone fails a send at once instead of timing out.
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// Ranks executing different plans each wait for messages the others never send: no rank can
// see that locally, so the watchdog reports it, naming the peers still missing.
TEST_P(Watchdog, RanksOnDifferentPlansEachNameAMissingPeer) {
  if (!all_neighbours()) GTEST_SKIP() << "needs 2 to 4 ranks";
  {
    context ctx(MPI_COMM_WORLD);
    tensor_desc const t = make_tensor();
    halo_options o;
    o.method = GetParam();
    o.timeout_seconds = bound;
    halo_plan p(ctx, t, o), q(ctx, t, o);
    std::vector<double> x(t.local_elements(), 1.0);
    outcome const r = run([&] { (world_rank() == 0 ? q : p).execute(tensor_view(t, x)); });
    EXPECT_EQ(r.code, static_cast<int>(errc::timeout)) << r.message;
    if (world_rank() != 0)
      EXPECT_NE(r.message.find("no message yet from rank 0"), std::string::npos) << r.message;
    else
      EXPECT_NE(r.message.find("no message yet from rank"), std::string::npos) << r.message;
    EXPECT_LT(r.seconds, bound + 5.0) << "reported long after the timeout";
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

INSTANTIATE_TEST_SUITE_P(PointToPoint, Watchdog,
                         ::testing::Values(backend::mpi_pack, backend::mpi_datatype,
                                           backend::mpi_persistent),
                         [](auto const& info) { return std::string(to_string(info.param)); });

// Those of `want` this build offers.
std::vector<backend> offered_among(std::initializer_list<backend> want) {
  std::vector<backend> out;
  for (backend b : host_backends())
    if (std::find(want.begin(), want.end(), b) != want.end()) out.push_back(b);
  return out;
}
// The ucx backends wait in their own progress loop (builds with UCX), cma for its senders'
// addresses and its receivers' "read" notices (Linux builds): the same watchdog names the peers.
INSTANTIATE_TEST_SUITE_P(Ucx, Watchdog,
                         ::testing::ValuesIn(offered_among({backend::ucx, backend::ucx_iov})),
                         [](auto const& info) { return std::string(to_string(info.param)); });
INSTANTIATE_TEST_SUITE_P(Cma, Watchdog, ::testing::ValuesIn(offered_among({backend::cma})),
                         [](auto const& info) { return std::string(to_string(info.param)); });

TEST(ExecuteCheck, BadBufferOnOneRankIsAnErrorEverywhere) {
  tensor_desc const t = make_tensor();
  halo_options o;
  o.check_execute = true;
  o.method = backend::mpi_pack;
  halo_plan p(t, o);
  std::vector<double> x(t.local_elements(), 1.0);
  bool const bad = world_rank() == world_size() - 1;
  tensor_view v(t, bad ? nullptr : x.data(), bad ? 0 : x.size() * sizeof(double));
  expect_error_everywhere([&] { p.execute(v); }, errc::invalid_argument,
                          bad ? "holds 0 bytes" : "passed invalid buffers");
  // The plan is still usable afterwards: nothing was posted.
  tensor_view good(t, x);
  p.execute(good);
}

TEST(ExecuteCheck, RankExecutingAnotherPlanIsAnErrorEverywhere) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  tensor_desc const t = make_tensor();
  halo_options o;
  o.check_execute = true;
  halo_plan p(t, o), q(t, o);
  std::vector<double> x(t.local_elements(), 1.0);
  expect_error_everywhere([&] { (world_rank() == 0 ? q : p).execute(tensor_view(t, x)); },
                          errc::inconsistent_ranks, "other ranks run another plan");
  expect_error_everywhere(
      [&] {
        if (world_rank() == 0)
          p.execute_reverse(tensor_view(t, x));
        else
          p.execute(tensor_view(t, x));
      },
      errc::inconsistent_ranks, "other direction");
  p.execute(tensor_view(t, x));
}

TEST(ExecuteCheck, EnvironmentVariableTurnsItOnForNewContexts) {
  setenv("HALOX_CHECK", "1", 1);
  context ctx(MPI_COMM_WORLD);
  unsetenv("HALOX_CHECK");
  EXPECT_TRUE(ctx.check_execute());
  setenv("HALOX_TIMEOUT", "2.5", 1);
  context timed(MPI_COMM_WORLD);
  EXPECT_DOUBLE_EQ(timed.timeout_seconds(), 2.5);
  setenv("HALOX_TIMEOUT", "soon", 1);
  expect_error_everywhere([] { context bad(MPI_COMM_WORLD); }, errc::invalid_argument,
                          "HALOX_TIMEOUT=\"soon\"");
  unsetenv("HALOX_TIMEOUT");
}

TEST(MismatchMessages, DifferingFieldIsNamedWithBothValues) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  process_grid g(MPI_COMM_WORLD, {world_size(), 1});
  int const w = world_rank() == 1 ? 2 : 1;
  expect_error_everywhere(
      [&] {
        tensor_desc t(g, {8, 8}, dtype::float32, {dim_options::halo(w), dim_options::halo(1)});
      },
      errc::inconsistent_ranks, "halo of dim 0: 1,1 on rank 0, 2,2 on rank 1");
  halo_options a;
  a.boundary = world_rank() == 1 ? boundary_fill::constant : boundary_fill::untouched;
  tensor_desc const t(g, {8, 8}, dtype::float32, {dim_options::halo(1), dim_options::halo(1)});
  expect_error_everywhere([&] { halo_plan p(t, a); }, errc::inconsistent_ranks,
                          "boundary: untouched on rank 0, constant on rank 1");
}

TEST(MismatchMessages, OperatorParametersThatDifferAreNamed) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  process_grid g(MPI_COMM_WORLD, {1, 1, world_size(), 1});
  tensor_desc const x(g, {1, 2, 4 * world_size(), 6}, dtype::float32);
  index_t const pad = world_rank() == 1 ? 2 : 1;
  ops::conv_params const cp{{}, {pad}, {pad}, {}};
  expect_error_everywhere(
      [&] {
        ops::dist_conv<float> conv(x, {3, 2, 3, 3}, cp);
      },
      errc::inconsistent_ranks, "padding of spatial dim 0: 1,1 on rank 0, 2,2 on rank 1");
}

TEST(MismatchMessages, ExplicitPartSizesAppearInDescriptions) {
  process_grid g(MPI_COMM_WORLD, {world_size()});
  std::vector<index_t> sizes(static_cast<std::size_t>(world_size()), 2);
  sizes[0] = 3;
  dim_options o;
  o.sizes = sizes;
  tensor_desc const t(g, {2 * world_size() + 1}, dtype::float32, {o});
  EXPECT_NE(t.dist().str().find("sizes0(3"), std::string::npos) << t.dist().str();
}

} // namespace
