// choose_device / closest_device and context_options::select_device at the MPI level. Without
// CUDA in the build, or without a visible device, every rank must get errc::unsupported naming
// the cause (never a hang, never some ranks only); with a device, every rank gets an index.
// The comparison against the pure chooser on probed inputs is in tests/gpu.
#include "model/topology_probe.hpp"
#include "plan/device_choice.hpp"
#include "support/mpi_helpers.hpp"

#include <halox/config.hpp>
#include <halox/context.hpp>
#include <halox/device.hpp>
#include <halox/error.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

using halox::test::expect_error_everywhere;

namespace {

// The build's expected cause when no device can be chosen.
char const* expected_cause() {
  return HALOX_HAS_CUDA ? "no CUDA device visible" : "halox was built without CUDA";
}

// True on every rank when every rank can choose a device (a CUDA build on GPU nodes).
bool devices_everywhere() {
  int ok = 1;
  try {
    (void)halox::choose_device(MPI_COMM_WORLD);
  } catch (halox::error const&) {
    ok = 0;
  }
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

} // namespace

TEST(DeviceChoiceMpi, WithoutDeviceEveryRankGetsUnsupported) {
  if (HALOX_HAS_CUDA && devices_everywhere()) {
    auto const c = halox::choose_device(MPI_COMM_WORLD);
    EXPECT_GE(c.device, 0) << c.reason;
    EXPECT_EQ(halox::closest_device(MPI_COMM_WORLD), c.device); // deterministic
    return;
  }
  expect_error_everywhere([] { (void)halox::closest_device(MPI_COMM_WORLD); },
                          halox::errc::unsupported, expected_cause());
  // Every rank names the same (lowest) failing rank.
  expect_error_everywhere([] { (void)halox::choose_device(MPI_COMM_WORLD); },
                          halox::errc::unsupported, "choose_device: rank 0 cannot choose a device");
}

TEST(DeviceChoiceMpi, RejectsNullCommunicator) {
  try {
    (void)halox::choose_device(MPI_COMM_NULL);
    FAIL() << "expected an error";
  } catch (halox::error const& e) {
    EXPECT_EQ(e.code(), halox::errc::invalid_argument);
    EXPECT_NE(e.message().find("MPI_COMM_NULL"), std::string::npos) << e.what();
  }
}

TEST(DeviceChoiceMpi, ContextLeavesTheDeviceAloneUnlessAsked) {
  halox::context ctx(MPI_COMM_WORLD);
  EXPECT_EQ(ctx.selected_device(), -1);
  EXPECT_EQ(ctx.describe().find("selected"), std::string::npos) << ctx.describe();
}

TEST(DeviceChoiceMpi, ContextSelectDevice) {
  halox::context_options o;
  o.select_device = true;
  if (HALOX_HAS_CUDA && devices_everywhere()) {
    halox::context ctx(MPI_COMM_WORLD, o);
    EXPECT_EQ(ctx.selected_device(), halox::closest_device(MPI_COMM_WORLD));
    EXPECT_NE(ctx.describe().find("selected device"), std::string::npos) << ctx.describe();
    return;
  }
  expect_error_everywhere([&] { halox::context ctx(MPI_COMM_WORLD, o); }, halox::errc::unsupported,
                          expected_cause());
}

TEST(DeviceChoiceMpi, ContextSelectDeviceFromEnvironment) {
  ::setenv("HALOX_SELECT_DEVICE", "yes", 1);
  expect_error_everywhere([] { halox::context ctx(MPI_COMM_WORLD); }, halox::errc::invalid_argument,
                          "HALOX_SELECT_DEVICE=\"yes\"");
  ::setenv("HALOX_SELECT_DEVICE", "1", 1);
  if (HALOX_HAS_CUDA && devices_everywhere()) {
    halox::context ctx(MPI_COMM_WORLD);
    EXPECT_GE(ctx.selected_device(), 0);
  } else {
    expect_error_everywhere([] { halox::context ctx(MPI_COMM_WORLD); }, halox::errc::unsupported,
                            expected_cause());
  }
  ::unsetenv("HALOX_SELECT_DEVICE");
  halox::context ctx(MPI_COMM_WORLD);
  EXPECT_EQ(ctx.selected_device(), -1);
}

// The hwloc half of the probe, checked against the kernel: the bound cpus are this process's
// affinity mask (or empty when that covers every online cpu), a bus id hwloc has never seen has
// no locality, and the PCI device behind a network interface has one (when hwloc sees it).
TEST(DeviceChoiceMpi, LocalityProbeMatchesTheKernel) {
  if (!HALOX_HAS_HWLOC) GTEST_SKIP() << "halox was built without hwloc";
  // A network interface's PCI device: the last "dddd:bb:dd.f" component of its sysfs path.
  std::string nic_bus;
  std::error_code ec;
  std::regex const pci("[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\\.[0-9a-f]");
  for (auto const& e : std::filesystem::directory_iterator("/sys/class/net", ec)) {
    auto const dev = std::filesystem::canonical(e.path() / "device", ec);
    if (ec) continue;
    for (auto const& part : dev)
      if (std::regex_match(part.string(), pci)) nic_bus = part.string();
    if (!nic_bus.empty()) break;
  }
  std::vector<std::string> ids{"ffff:ff:1f.7"};
  if (!nic_bus.empty()) ids.push_back(nic_bus);
  auto const seen = halox::detail::probe_locality(ids);
  EXPECT_TRUE(seen.note.empty()) << seen.note;

  cpu_set_t mask;
  CPU_ZERO(&mask);
  ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  std::vector<int> affinity;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) affinity.push_back(c);
  long const online = sysconf(_SC_NPROCESSORS_ONLN);
  if (static_cast<long>(affinity.size()) >= online)
    EXPECT_TRUE(seen.cpus.empty()) << "unbound, yet cpus " << halox::detail::cpu_list(seen.cpus);
  else
    EXPECT_EQ(seen.cpus, affinity);

  ASSERT_EQ(seen.device_cpus.size(), ids.size());
  EXPECT_TRUE(seen.device_cpus[0].empty()) << halox::detail::cpu_list(seen.device_cpus[0]);
  if (!nic_bus.empty())
    EXPECT_FALSE(seen.device_cpus[1].empty())
        << "hwloc gave no locality for the network device at PCI " << nic_bus;
}
