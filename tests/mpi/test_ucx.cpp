// The ucx and ucx_iov backends beyond the oracle sweeps (which run them through host_backends()):
// availability, several plans of one context (one UCX worker) in flight at once, and a UCX that
// cannot start or cannot reach a peer, which tests/CMakeLists.txt runs with HALOX_UCX_TLS set.
#include "support/backend_tests.hpp"

#include <halox/config.hpp>
#include <halox/halox.hpp>
#if HALOX_HAS_UCX
#include "exec/ucx/ucx_resources.hpp"
#endif

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace halox;
using halox::test::numbered;
using halox::test::offered;
using halox::test::periodic_2d_tensor;
using halox::test::world_size;

// The UCX settings the environment ctests give halox's UCX (nullptr: a normal run).
char const* bad_tls() {
  char const* v = std::getenv("HALOX_UCX_TLS");
  return v && (std::strcmp(v, "nonexistent") == 0 || std::strcmp(v, "self") == 0) ? v : nullptr;
}

TEST(Ucx, OfferedForHostMemoryInUcxBuilds) {
  EXPECT_EQ(backend_from_string("ucx"), backend::ucx);
  EXPECT_EQ(backend_from_string("ucx_iov"), backend::ucx_iov);
  EXPECT_STREQ(to_string(backend::ucx), "ucx");
  EXPECT_STREQ(to_string(backend::ucx_iov), "ucx_iov");
  EXPECT_EQ(offered(backend::ucx), HALOX_HAS_UCX != 0);
  EXPECT_EQ(offered(backend::ucx_iov), HALOX_HAS_UCX != 0);
  for (backend b : device_backends()) EXPECT_TRUE(b != backend::ucx && b != backend::ucx_iov);
#if !HALOX_HAS_UCX
  halox::test::expect_not_available(backend::ucx);
#endif
}

#if HALOX_HAS_UCX
// Within one node halox's UCX sends messages below 64 KiB eagerly (UCX's automatic threshold
// sent 16-48 KiB faces by rendezvous, 2-3x slower there); between nodes, or when the user names
// a threshold, UCX's setting stands.
TEST(Ucx, RendezvousThresholdIsRaisedWithinOneNodeUnlessTheUserSetsOne) {
  if (bad_tls()) GTEST_SKIP() << "needs a working UCX";
  if (std::getenv("UCX_RNDV_THRESH") || std::getenv("HALOX_UCX_RNDV_THRESH"))
    GTEST_SKIP() << "the environment sets a rendezvous threshold";
  EXPECT_TRUE(detail::ucx_resources(true).rndv_thresh_set());
  EXPECT_FALSE(detail::ucx_resources(false).rndv_thresh_set());
  setenv("HALOX_UCX_RNDV_THRESH", "auto", 1);
  EXPECT_FALSE(detail::ucx_resources(true).rndv_thresh_set());
  unsetenv("HALOX_UCX_RNDV_THRESH");
  setenv("UCX_RNDV_THRESH", "8192", 1);
  EXPECT_FALSE(detail::ucx_resources(true).rndv_thresh_set());
  unsetenv("UCX_RNDV_THRESH");
}
#endif

// Two plans of one context share its UCX worker; their messages carry different tags, so
// posting both before completing either (in the opposite order) must not mix them up.
TEST(Ucx, PlansOfOneContextInFlightTogetherMatchMpiPack) {
  if (!offered(backend::ucx) || bad_tls()) GTEST_SKIP() << "needs a working UCX";
  for (backend b : {backend::ucx, backend::ucx_iov}) {
    context ctx(MPI_COMM_WORLD);
    tensor_desc const t = periodic_2d_tensor(dtype::float64, {12, 10}, 2);
    tensor_desc const u = periodic_2d_tensor(dtype::int32, {9, 14}, 1);
    halo_options o, ref;
    o.method = b;
    ref.method = backend::mpi_pack;
    halo_plan p(ctx, t, o), q(ctx, u, o), pr(ctx, t, ref), qr(ctx, u, ref);
    auto x = numbered<double>(t, 1), xr = x;
    auto y = numbered<std::int32_t>(u, 2), yr = y;
    p.start(tensor_view(t, x));
    q.start(tensor_view(u, y));
    q.wait();
    p.wait();
    pr.execute(tensor_view(t, xr));
    qr.execute(tensor_view(u, yr));
    EXPECT_EQ(x, xr) << to_string(b);
    EXPECT_EQ(y, yr) << to_string(b);
    // The reverse exchange combines: ucx_iov receives into a landing area there.
    p.execute_reverse(tensor_view(t, x), reduce_op::sum);
    pr.execute_reverse(tensor_view(t, xr), reduce_op::sum);
    EXPECT_EQ(x, xr) << to_string(b) << " reverse";
    EXPECT_EQ(p.selected_backend(), b);
    EXPECT_NE(ctx.describe().find("UCX started"), std::string::npos) << ctx.describe();
  }
}

// Run by the ucx_tls_* ctests: HALOX_UCX_TLS=nonexistent (ucp_init fails) or self (UCX starts
// but cannot reach another process). Either way every rank gets a clear error when asking for
// ucx, and automatic selection reports the ucx candidates unavailable and picks another.
TEST(UcxEnvironment, UnusableUcxIsAClearErrorEverywhereAndAutoPassesOverIt) {
  char const* tls = bad_tls();
  if (!offered(backend::ucx) || tls == nullptr)
    GTEST_SKIP() << "run by the ucx_tls_* ctests with HALOX_UCX_TLS=nonexistent or self";
  if (world_size() < 2) GTEST_SKIP() << "with one rank UCX's self transport is enough";
  context ctx(MPI_COMM_WORLD);
  tensor_desc const t = periodic_2d_tensor(dtype::float32, {8, 8}, 1);
  std::string const call = std::strcmp(tls, "self") == 0 ? "ucp_ep_create" : "ucp_init";
  for (backend b : {backend::ucx, backend::ucx_iov}) {
    halo_options o;
    o.method = b;
    o.timeout_seconds = 30;
    int threw = 0;
    try {
      halo_plan p(ctx, t, o);
    } catch (halox::error const& e) {
      threw = 1;
      EXPECT_EQ(e.code(), errc::ucx_error) << e.what();
      for (std::string const& s :
           {std::string("UCX: ") + call + " failed with '", std::string("HALOX_UCX_TLS=") + tls,
            std::string("check UCX_TLS/UCX_NET_DEVICES"), std::string("use another backend")})
        EXPECT_NE(e.message().find(s), std::string::npos)
            << "expected \"" << s << "\" in " << e.what();
    }
    EXPECT_EQ(threw, 1) << to_string(b) << " was built although UCX cannot work";
    int all = 0;
    MPI_Allreduce(&threw, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(all, world_size()) << "not every rank threw";
  }
  if (call == "ucp_init")
    EXPECT_NE(ctx.describe().find("UCX failed: UCX: ucp_init"), std::string::npos)
        << ctx.describe();
  halo_options a;
  a.method = backend::automatic;
  a.timeout_seconds = 30;
  halo_plan p(ctx, t, a);
  EXPECT_NE(p.selected_backend(), backend::ucx);
  EXPECT_NE(p.selected_backend(), backend::ucx_iov);
  std::string const d = p.describe();
  EXPECT_NE(d.find("ucx unavailable"), std::string::npos) << d;
  EXPECT_NE(d.find("ucx_iov unavailable"), std::string::npos) << d;
  std::vector<float> x(t.local_elements(), 1.0f);
  p.execute(tensor_view(t, x));
}

} // namespace
