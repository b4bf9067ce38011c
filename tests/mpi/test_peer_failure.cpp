// A rank whose own checks refuse an execution tells the peers of that execution, so that at
// default settings (no HALOX_CHECK, the default watchdog) they raise errc::peer_failed naming it
// and its reason within moments instead of waiting for it. Every host backend, halo exchanges in
// both directions, redistribution and box gathers; what is left usable afterwards; and the
// default watchdog for the faults no rank can see locally.
#include "support/mpi_helpers.hpp"

#include <halox/halox.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace {

using namespace halox;
using halox::test::outcome;
using halox::test::run;
using halox::test::world_rank;
using halox::test::world_size;

// Seconds within which a peer must report: the notice arrives at once, then the healthy peers'
// messages get up to a second to complete. Generous for oversubscribed ranks, and more so
// beyond 4 ranks, where 8 ranks share 2 cores with another test (ctest -j2); either bound is
// far below the 300 s the watchdog would take.
double report_within() { return world_size() <= 4 ? 5.0 : 15.0; }

std::vector<int> near_square(int p) {
  int a = 1;
  for (int k = 1; k * k <= p; ++k)
    if (p % k == 0) a = k;
  return {a, p / a};
}

// Periodic in both dimensions: at 2 to 4 ranks every rank exchanges with every other.
tensor_desc make_tensor(index_t n = 8) {
  process_grid g(MPI_COMM_WORLD, near_square(world_size()));
  return tensor_desc(g, {n, n}, dtype::float64,
                     {dim_options::halo(1, true), dim_options::halo(1, true)});
}

bool all_neighbours() { return world_size() >= 2 && world_size() <= 4; }

// The peers' side of every fault: peer_failed naming rank 0 and its reason, soon.
void expect_peer_failed(outcome const& r, std::string const& reason) {
  EXPECT_EQ(r.code, static_cast<int>(errc::peer_failed)) << r.message;
  EXPECT_NE(r.message.find("rank 0 of its communicator failed"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find(reason), std::string::npos) << r.message;
  EXPECT_LT(r.seconds, report_within()) << r.message;
}

// The fault kinds a rank's own checks catch at execute, each as the view rank 0 passes.
enum class fault { short_buffer, null_buffer, no_descriptor, other_descriptor };
struct fault_case {
  fault kind;
  char const* name;
  char const* reason; // in rank 0's error and in the peers' notice
};
fault_case const faults[] = {
    {fault::short_buffer, "ShortBuffer", "holds"},
    {fault::null_buffer, "NullBuffer", "is a null pointer"},
    {fault::no_descriptor, "NoDescriptor", "has no descriptor"},
    {fault::other_descriptor, "OtherDescriptor", "was described as"},
};

tensor_view faulty_view(fault f, tensor_desc const& t, tensor_desc const& other,
                        std::vector<double>& x) {
  std::size_t const bytes = x.size() * sizeof(double);
  switch (f) {
  case fault::short_buffer: return tensor_view(t, x.data(), bytes - 8);
  case fault::null_buffer: return tensor_view(t, nullptr, bytes);
  case fault::no_descriptor: {
    tensor_view v;
    v.data = x.data();
    v.bytes = bytes;
    return v;
  }
  case fault::other_descriptor: return tensor_view(other, x.data(), bytes);
  }
  return {};
}

std::vector<backend> host_backends_but_auto() {
  std::vector<backend> out;
  for (backend b : host_backends())
    if (b != backend::automatic) out.push_back(b);
  return out;
}

struct halo_case {
  backend method;
  fault_case f;
};
std::vector<halo_case> halo_cases() {
  std::vector<halo_case> out;
  for (backend b : host_backends_but_auto())
    for (auto const& f : faults) out.push_back({b, f});
  return out;
}

class PeerFailure : public ::testing::TestWithParam<halo_case> {};

bool collective(backend b) {
  return b == backend::alltoallv || b == backend::alltoallw || b == backend::mpi_neighbor;
}

TEST_P(PeerFailure, HaloExchangePeersNameTheFailedRankAtDefaultSettings) {
  if (!all_neighbours()) GTEST_SKIP() << "needs 2 to 4 ranks";
  tensor_desc const t = make_tensor();
  tensor_desc const other = make_tensor(10);
  halo_options o;
  o.method = GetParam().method;
  std::vector<double> x(t.local_elements(), 1.0);
  fault_case const& f = GetParam().f;
  for (bool reverse : {false, true}) {
    context ctx(MPI_COMM_WORLD);
    ASSERT_FALSE(ctx.check_execute()) << "run without HALOX_CHECK: this tests the defaults";
    halo_plan q(ctx, t, o);
    tensor_view const v = world_rank() == 0 ? faulty_view(f.kind, t, other, x) : tensor_view(t, x);
    outcome const r = run([&] {
      if (reverse)
        q.execute_reverse(v);
      else
        q.execute(v);
    });
    if (world_rank() == 0) {
      EXPECT_EQ(r.code, static_cast<int>(errc::invalid_argument)) << r.message;
      EXPECT_NE(r.message.find(f.reason), std::string::npos) << r.message;
    } else {
      expect_peer_failed(r, f.reason);
      if (reverse) EXPECT_NE(r.message.find("reverse"), std::string::npos) << r.message;
    }
    // The failed plan refuses to run again on every rank, saying what to do.
    outcome const again = run([&] { q.execute(tensor_view(t, x)); });
    EXPECT_EQ(again.code, static_cast<int>(errc::invalid_state)) << again.message;
    EXPECT_NE(again.message.find(collective(o.method) ? "build a new context" : "Build a new plan"),
              std::string::npos)
        << again.message;
    if (collective(o.method)) {
      // A collective left unfinished on the peers: the context says to build a new one.
      halox::test::expect_error_everywhere([&] { halo_plan n(ctx, t, o); }, errc::invalid_state,
                                           "build a new context");
    } else {
      // The context builds and runs new plans.
      halo_plan n(ctx, t, o);
      std::vector<double> y(t.local_elements(), 2.0);
      EXPECT_NO_THROW(n.execute(tensor_view(t, y)));
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

INSTANTIATE_TEST_SUITE_P(HostBackends, PeerFailure, ::testing::ValuesIn(halo_cases()),
                         [](auto const& info) {
                           return std::string(to_string(info.param.method)) + "_" +
                                  info.param.f.name;
                         });

TEST(PeerFailureState, StartWhileInFlightIsToldToThePeersOfTheNextExecution) {
  if (!all_neighbours()) GTEST_SKIP() << "needs 2 to 4 ranks";
  context ctx(MPI_COMM_WORLD);
  tensor_desc const t = make_tensor();
  halo_options o;
  o.method = backend::mpi_pack;
  halo_plan p(ctx, t, o);
  std::vector<double> x(t.local_elements(), 1.0);
  if (world_rank() == 0) {
    p.start(tensor_view(t, x));
    outcome const r = run([&] { p.start(tensor_view(t, x)); });
    EXPECT_EQ(r.code, static_cast<int>(errc::invalid_state)) << r.message;
    p.wait(); // the first exchange completes: every peer takes part in it
  } else {
    p.execute(tensor_view(t, x));
    expect_peer_failed(run([&] { p.execute(tensor_view(t, x)); }), "still in flight");
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(PeerFailureRedistribute, ShortBufferOnOneRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  context ctx(MPI_COMM_WORLD);
  process_grid rows(MPI_COMM_WORLD, {world_size(), 1}), cols(MPI_COMM_WORLD, {1, world_size()});
  index_t const n = 4 * world_size();
  tensor_desc const a(rows, {n, n}, dtype::float32), b(cols, {n, n}, dtype::float32);
  for (backend m : {backend::mpi_pack, backend::alltoallv}) {
    redistribute_options o;
    o.method = m;
    redistribute_plan p(ctx, a, b, o);
    std::vector<float> src(a.local_elements(), 1.0f), dst(b.local_elements(), 0.0f);
    std::size_t const short_by = world_rank() == 0 ? 8 : 0;
    outcome const r = run([&] {
      p.execute(tensor_view(a, src.data(), src.size() * sizeof(float) - short_by),
                tensor_view(b, dst));
    });
    if (world_rank() == 0) {
      EXPECT_EQ(r.code, static_cast<int>(errc::invalid_argument)) << r.message;
    } else {
      // Under alltoallv every rank takes part in each exchange, so every rank hears of it.
      expect_peer_failed(r, "holds");
      EXPECT_NE(r.message.find("redistribute_plan"), std::string::npos) << r.message;
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST(PeerFailureBoxGather, NullWorkspaceOnOneRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  process_grid g(MPI_COMM_WORLD, {world_size()});
  index_t const n = 4 * world_size();
  tensor_desc const t(g, {n}, dtype::float64);
  // Every rank needs the whole tensor: rank 0 receives from every other rank.
  box_gather_plan p(
      t, {std::vector<index_range>(static_cast<std::size_t>(world_size()), index_range{0, n})});
  std::vector<double> x(t.local_elements(), 1.0);
  std::vector<std::byte> ws(p.workspace_bytes());
  outcome const r =
      run([&] { p.execute(tensor_view(t, x), world_rank() == 0 ? nullptr : ws.data()); });
  if (world_rank() == 0) {
    EXPECT_EQ(r.code, static_cast<int>(errc::invalid_argument)) << r.message;
  } else {
    expect_peer_failed(r, "workspace is a null pointer");
    EXPECT_NE(r.message.find("box_gather_plan"), std::string::npos) << r.message;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(PeerFailureChain, RanksThatDoNotNeighbourTheFailedRankFinish) {
  if (world_size() < 3) GTEST_SKIP() << "needs three ranks";
  // A non-periodic chain: rank 0's only peer is rank 1; rank 2 exchanges with rank 1 only.
  context ctx(MPI_COMM_WORLD);
  process_grid g(MPI_COMM_WORLD, {world_size()});
  tensor_desc const t(g, {4 * world_size()}, dtype::float64, {dim_options::halo(1)});
  halo_options o;
  o.method = backend::mpi_pack;
  halo_plan p(ctx, t, o);
  std::vector<double> x(t.local_elements(), 1.0);
  tensor_view const v = world_rank() == 0 ? tensor_view(t, x.data(), x.size() * sizeof(double) - 8)
                                          : tensor_view(t, x);
  outcome const r = run([&] { p.execute(v); });
  if (world_rank() == 0)
    EXPECT_EQ(r.code, static_cast<int>(errc::invalid_argument)) << r.message;
  else if (world_rank() == 1)
    expect_peer_failed(r, "holds");
  else
    EXPECT_EQ(r.code, -1) << "rank " << world_rank() << " is no peer of rank 0: " << r.message;
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(DefaultWatchdog, IsOnAndLongAndZeroTurnsItOff) {
  ASSERT_EQ(std::getenv("HALOX_TIMEOUT"), nullptr) << "run without HALOX_TIMEOUT";
  context plain(MPI_COMM_WORLD);
  EXPECT_DOUBLE_EQ(plain.timeout_seconds(), default_timeout_seconds);
  EXPECT_DOUBLE_EQ(default_timeout_seconds, 300.0);
  context_options off;
  off.timeout_seconds = 0;
  EXPECT_DOUBLE_EQ(context(MPI_COMM_WORLD, off).timeout_seconds(), 0.0);
  setenv("HALOX_TIMEOUT", "0", 1);
  EXPECT_DOUBLE_EQ(context(MPI_COMM_WORLD).timeout_seconds(), 0.0);
  setenv("HALOX_TIMEOUT", "7", 1);
  EXPECT_DOUBLE_EQ(context(MPI_COMM_WORLD).timeout_seconds(), 7.0);
  context_options explicit_bound;
  explicit_bound.timeout_seconds = 2;
  EXPECT_DOUBLE_EQ(context(MPI_COMM_WORLD, explicit_bound).timeout_seconds(), 2.0);
  unsetenv("HALOX_TIMEOUT");
  context_options negative;
  negative.timeout_seconds = -1;
  halox::test::expect_error_everywhere([&] { context bad(MPI_COMM_WORLD, negative); },
                                       errc::invalid_argument, "timeout_seconds is -1");
  tensor_desc const t = make_tensor();
  halo_options o;
  o.timeout_seconds = -2;
  halox::test::expect_error_everywhere([&] { halo_plan p(plain, t, o); }, errc::invalid_argument,
                                       "halo_options::timeout_seconds is -2");
}

// With the watchdog off, notices still end the wait.
TEST(PeerFailureNoWatchdog, NoticeEndsAnUnboundedWait) {
  if (!all_neighbours()) GTEST_SKIP() << "needs 2 to 4 ranks";
  context_options co;
  co.timeout_seconds = 0;
  context ctx(MPI_COMM_WORLD, co);
  tensor_desc const t = make_tensor();
  halo_options o;
  o.method = backend::mpi_pack;
  halo_plan p(ctx, t, o);
  std::vector<double> x(t.local_elements(), 1.0);
  tensor_view const v =
      world_rank() == 0 ? tensor_view(t, nullptr, x.size() * sizeof(double)) : tensor_view(t, x);
  outcome const r = run([&] { p.execute(v); });
  if (world_rank() != 0) expect_peer_failed(r, "is a null pointer");
  MPI_Barrier(MPI_COMM_WORLD);
}

} // namespace

namespace {

// A wrapper that checks its inputs itself (halox.torch) skips an execution instead of running
// it: when every rank skips, nothing was sent and the plan runs on; a lone skip is a failure
// notice to the peers, as a failed execute-time check is.
void skip_cases(bool check_execute) {
  context ctx(MPI_COMM_WORLD);
  tensor_desc const t = make_tensor();
  halo_options o;
  o.method = backend::mpi_pack;
  o.check_execute = check_execute;
  std::vector<double> x(t.local_elements(), 1.0);
  {
    halo_plan p(ctx, t, o);
    p.execute(tensor_view(t, x));
    EXPECT_TRUE(p.skip_execution("every rank changes course"));
    EXPECT_TRUE(p.skip_execution("and once more, in reverse", true));
    outcome const r = run([&] {
      p.execute(tensor_view(t, x));
      p.execute_reverse(tensor_view(t, x));
    });
    EXPECT_EQ(r.code, -1) << r.message;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  {
    halo_plan p(ctx, t, o);
    if (world_rank() == 0) {
      double const t0 = MPI_Wtime();
      EXPECT_FALSE(p.skip_execution("rank 0's input changed"));
      EXPECT_LT(MPI_Wtime() - t0, report_within());
      if (!check_execute) {
        // A peer went ahead: messages of that execution may be queued, so the plan refuses.
        outcome const again = run([&] { p.execute(tensor_view(t, x)); });
        EXPECT_EQ(again.code, static_cast<int>(errc::invalid_state)) << again.message;
      }
    } else {
      outcome const r = run([&] { p.execute(tensor_view(t, x)); });
      if (check_execute) {
        // The execute-time all-reduce shows the skip as another plan's execution.
        EXPECT_EQ(r.code, static_cast<int>(errc::inconsistent_ranks)) << r.message;
      } else {
        expect_peer_failed(r, "rank 0's input changed");
      }
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

} // namespace

TEST(SkipExecution, TogetherKeepsThePlanAloneTellsThePeers) {
  if (!all_neighbours()) GTEST_SKIP() << "needs 2 to 4 ranks";
  skip_cases(false);
}

TEST(SkipExecution, UnderExecuteTimeChecks) {
  if (!all_neighbours()) GTEST_SKIP() << "needs 2 to 4 ranks";
  skip_cases(true);
}

TEST(SkipExecution, RedistributionSkippedByEveryRankRunsOn) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  context ctx(MPI_COMM_WORLD);
  process_grid rows(MPI_COMM_WORLD, {world_size(), 1}), cols(MPI_COMM_WORLD, {1, world_size()});
  index_t const n = 4 * world_size();
  tensor_desc const a(rows, {n, n}, dtype::float32), b(cols, {n, n}, dtype::float32);
  redistribute_options o;
  o.method = backend::mpi_pack;
  redistribute_plan p(ctx, a, b, o);
  std::vector<float> src(a.local_elements(), 1.0f), dst(b.local_elements(), 0.0f);
  EXPECT_TRUE(p.skip_execution("every rank skips"));
  p.execute(tensor_view(a, src), tensor_view(b, dst));
  for (float v : dst) ASSERT_EQ(v, 1.0f);
  MPI_Barrier(MPI_COMM_WORLD);
}

// A rank that destroys a plan tells its peers that it left it: one still executing the plan
// raises peer_failed at once instead of waiting for the watchdog.
TEST(PeerLeaves, ADestroyedPlanIsReportedToPeersStillExecutingIt) {
  if (!all_neighbours()) GTEST_SKIP() << "needs 2 to 4 ranks";
  context ctx(MPI_COMM_WORLD);
  tensor_desc const t = make_tensor();
  halo_options o;
  o.method = backend::mpi_pack;
  auto p = std::make_unique<halo_plan>(ctx, t, o);
  std::vector<double> x(t.local_elements(), 1.0);
  p->execute(tensor_view(t, x));
  if (world_rank() == 1) {
    p.reset();
  } else {
    outcome const r = run([&] { p->execute(tensor_view(t, x)); });
    EXPECT_EQ(r.code, static_cast<int>(errc::peer_failed)) << r.message;
    EXPECT_NE(r.message.find("rank 1 of its communicator left this plan"), std::string::npos)
        << r.message;
    EXPECT_NE(r.message.find("destroyed the plan after 1 execution(s)"), std::string::npos)
        << r.message;
    EXPECT_LT(r.seconds, report_within()) << r.message;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Plans destroyed together leave nothing behind that a later plan could take for its own.
TEST(PeerLeaves, PlansDestroyedTogetherDisturbNothing) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  context ctx(MPI_COMM_WORLD);
  tensor_desc const t = make_tensor();
  std::vector<double> x(t.local_elements(), 1.0);
  for (int round = 0; round < 3; ++round) {
    halo_options o;
    o.method = round == 1 ? backend::alltoallv : backend::mpi_pack;
    halo_plan p(ctx, t, o);
    outcome const r = run([&] {
      for (int k = 0; k < 3; ++k) p.execute(tensor_view(t, x));
      p.execute_reverse(tensor_view(t, x));
    });
    EXPECT_EQ(r.code, -1) << r.message;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
