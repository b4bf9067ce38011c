// choose_device on real devices (label `gpu`; skips with the reason when no device is visible):
// the index is valid, closest_device agrees, and it is exactly what the pure chooser gives for
// the inputs probe_node reads on this node; context_options::select_device makes it current.
#include "api/device_select.hpp"
#include "gpu_support.hpp"
#include "plan/device_choice.hpp"

#include <halox/context.hpp>
#include <halox/device.hpp>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

namespace {

std::string skip_reason() { return halox::gpu_test::any_rank(halox::gpu_test::device_problem()); }

} // namespace

TEST(GpuDeviceChoice, MatchesThePureChooserOnProbedInputs) {
  if (auto const why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  auto const choice = halox::choose_device(MPI_COMM_WORLD);
  int const n = halox::gpu_test::device_count();
  EXPECT_GE(choice.device, 0) << choice.reason;
  EXPECT_LT(choice.device, n) << choice.reason;
  EXPECT_EQ(halox::closest_device(MPI_COMM_WORLD), choice.device);

  auto const view = halox::detail::probe_node(MPI_COMM_WORLD);
  ASSERT_LT(view.me, static_cast<int>(view.processes.size()));
  EXPECT_EQ(static_cast<int>(view.processes[view.me].devices.size()), n);
  auto const picks = halox::detail::pick_devices(view.processes);
  EXPECT_EQ(picks[view.me].device, choice.device) << choice.reason;
  EXPECT_EQ(choice.reason.rfind(picks[view.me].reason, 0), 0u)
      << choice.reason << " vs " << picks[view.me].reason;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::printf("rank %d: %s\n", rank, choice.reason.c_str());
}

TEST(GpuDeviceChoice, ContextSelectsTheDevice) {
  if (auto const why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  int before = -1;
  ASSERT_EQ(cudaGetDevice(&before), cudaSuccess);
  {
    halox::context plain(MPI_COMM_WORLD);
    int now = -1;
    ASSERT_EQ(cudaGetDevice(&now), cudaSuccess);
    EXPECT_EQ(now, before) << "a context without select_device changed the current device";
  }
  halox::context_options o;
  o.select_device = true;
  halox::context ctx(MPI_COMM_WORLD, o);
  int now = -1;
  ASSERT_EQ(cudaGetDevice(&now), cudaSuccess);
  EXPECT_EQ(now, halox::closest_device(MPI_COMM_WORLD));
  EXPECT_EQ(ctx.selected_device(), now);
  ASSERT_EQ(cudaSetDevice(before), cudaSuccess);
}
