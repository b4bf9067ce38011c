// pick_devices on simulated nodes: processes bound to sockets take that socket's devices,
// evenly; unbound processes (or devices of unknown locality) go round-robin by node-local rank;
// more devices than processes, fewer, per-process device subsets and nodes of unequal sizes.
#include "plan/device_choice.hpp"

#include <halox/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <vector>

using halox::detail::device_seen;
using halox::detail::pick_devices;
using halox::detail::process_seen;

namespace {

std::vector<int> range(int lo, int hi) { // [lo, hi)
  std::vector<int> v(static_cast<std::size_t>(hi - lo));
  std::iota(v.begin(), v.end(), lo);
  return v;
}

std::string bus(int node, int d) { return "0000:" + std::to_string(10 * node + d) + ":00.0"; }

// A node of `sockets` sockets of `cores` cpus each, with `per_socket` devices on each socket
// (device s * per_socket + i on socket s).
std::vector<device_seen> socket_devices(int node, int sockets, int cores, int per_socket) {
  std::vector<device_seen> ds;
  for (int s = 0; s < sockets; ++s)
    for (int i = 0; i < per_socket; ++i)
      ds.push_back({bus(node, s * per_socket + i), range(s * cores, (s + 1) * cores)});
  return ds;
}

// `n` processes on `node`, process k bound to cpu `cpu_of(k)` (or unbound when it returns -1).
template <class F> void add_node(std::vector<process_seen>& ps, int node, int n,
                                 std::vector<device_seen> const& ds, F cpu_of) {
  for (int k = 0; k < n; ++k) {
    int const c = cpu_of(k);
    ps.push_back({node, k, c < 0 ? std::vector<int>{} : std::vector<int>{c}, ds});
  }
}

std::vector<int> devices_of(std::vector<halox::detail::device_pick> const& picks) {
  std::vector<int> d;
  for (auto const& p : picks) d.push_back(p.device);
  return d;
}

} // namespace

TEST(DeviceChoice, TwoSocketsTwoGpusEachFourRanksPerSocket) {
  // 2 sockets x 8 cpus, GPUs 0,1 on socket 0 and 2,3 on socket 1; ranks 0-3 bound to socket 0
  // (cpus 0,2,4,6), ranks 4-7 to socket 1 (cpus 8,10,12,14).
  std::vector<process_seen> ps;
  add_node(ps, 0, 8, socket_devices(0, 2, 8, 2), [](int k) { return 2 * k; });
  auto const picks = pick_devices(ps);
  EXPECT_EQ(devices_of(picks), (std::vector<int>{0, 1, 0, 1, 2, 3, 2, 3}));
  for (auto const& p : picks)
    EXPECT_NE(p.reason.find("local to the process's cpus"), std::string::npos) << p.reason;
  EXPECT_NE(picks[4].reason.find("PCI 0000:2:00.0"), std::string::npos) << picks[4].reason;
}

TEST(DeviceChoice, InterleavedBindingStillFollowsSockets) {
  // Ranks alternate sockets (round-robin mapping): even ranks on socket 0, odd on socket 1.
  std::vector<process_seen> ps;
  add_node(ps, 0, 8, socket_devices(0, 2, 8, 2), [](int k) { return (k % 2) * 8 + k / 2; });
  EXPECT_EQ(devices_of(pick_devices(ps)), (std::vector<int>{0, 2, 1, 3, 0, 2, 1, 3}));
}

TEST(DeviceChoice, UnboundRanksGoRoundRobin) {
  std::vector<process_seen> ps;
  add_node(ps, 0, 6, socket_devices(0, 2, 8, 2), [](int) { return -1; });
  auto const picks = pick_devices(ps);
  EXPECT_EQ(devices_of(picks), (std::vector<int>{0, 1, 2, 3, 0, 1}));
  EXPECT_NE(picks[5].reason.find("node-local rank 5 modulo 4"), std::string::npos)
      << picks[5].reason;
  EXPECT_NE(picks[5].reason.find("not bound"), std::string::npos) << picks[5].reason;
}

TEST(DeviceChoice, UnknownLocalityFallsBackAndSaysWhich) {
  auto ds = socket_devices(0, 2, 8, 1);
  ds[1].cpus.clear(); // hwloc did not see the second GPU's PCI device
  std::vector<process_seen> ps;
  add_node(ps, 0, 3, ds, [](int k) { return 8 + k; }); // all on socket 1
  auto const picks = pick_devices(ps);
  EXPECT_EQ(devices_of(picks), (std::vector<int>{0, 1, 0}));
  EXPECT_NE(picks[0].reason.find("locality of device 1 (PCI 0000:1:00.0) is unknown"),
            std::string::npos)
      << picks[0].reason;
}

TEST(DeviceChoice, MoreGpusThanRanks) {
  // 2 ranks, one per socket, 4 GPUs per socket: each takes its socket's first GPU.
  std::vector<process_seen> ps;
  add_node(ps, 0, 2, socket_devices(0, 2, 8, 4), [](int k) { return 8 * k; });
  EXPECT_EQ(devices_of(pick_devices(ps)), (std::vector<int>{0, 4}));
}

TEST(DeviceChoice, FewerGpusThanRanksShareEvenly) {
  // One GPU per socket, 6 ranks per socket: each socket's GPU takes its 6 ranks.
  std::vector<process_seen> ps;
  add_node(ps, 0, 12, socket_devices(0, 2, 8, 1), [](int k) { return k < 6 ? k : 8 + k - 6; });
  EXPECT_EQ(devices_of(pick_devices(ps)), (std::vector<int>{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}));
  // A single-socket node with 2 GPUs and 5 ranks: 3 and 2.
  std::vector<process_seen> one;
  add_node(one, 0, 5, socket_devices(0, 1, 8, 2), [](int k) { return k; });
  EXPECT_EQ(devices_of(pick_devices(one)), (std::vector<int>{0, 1, 0, 1, 0}));
}

TEST(DeviceChoice, NoLocalDeviceSpreadsOverAll) {
  // Rank bound to socket 1, but both GPUs are on socket 0: no device is local, use all.
  std::vector<process_seen> ps;
  add_node(ps, 0, 3, socket_devices(0, 1, 8, 2), [](int k) { return 8 + k; });
  auto const picks = pick_devices(ps);
  EXPECT_EQ(devices_of(picks), (std::vector<int>{0, 1, 0}));
  EXPECT_NE(picks[0].reason.find("no device is local"), std::string::npos) << picks[0].reason;
}

TEST(DeviceChoice, WideBindingPrefersTheSocketWithMoreOfItsCpus) {
  std::vector<process_seen> ps;
  ps.push_back({0, 0, {0, 1, 2, 8}, socket_devices(0, 2, 8, 1)}); // 3 cpus on socket 0, 1 on 1
  ps.push_back({0, 1, {8, 9, 10, 0}, socket_devices(0, 2, 8, 1)});
  for (auto& p : ps) std::sort(p.cpus.begin(), p.cpus.end());
  EXPECT_EQ(devices_of(pick_devices(ps)), (std::vector<int>{0, 1}));
}

TEST(DeviceChoice, UnevenNodesAreChosenIndependently) {
  // Node 7 has 3 ranks on one socket with 2 GPUs; node 3 has 5 ranks over 2 sockets with one
  // GPU each; listed interleaved. Each node starts over and only counts its own processes.
  std::vector<process_seen> ps;
  std::vector<process_seen> a, b;
  add_node(a, 7, 3, socket_devices(7, 1, 4, 2), [](int k) { return k; });
  add_node(b, 3, 5, socket_devices(3, 2, 4, 1), [](int k) { return k < 2 ? k : 2 + k; });
  ps = {b[4], a[0], b[0], a[2], b[1], b[2], a[1], b[3]};
  auto const d = devices_of(pick_devices(ps));
  // a: ranks 0,1,2 -> 0,1,0. b: ranks 0,1 on socket 0 -> 0,0; ranks 2,3,4 on socket 1 -> 1,1,1.
  EXPECT_EQ(d, (std::vector<int>{1, 0, 0, 0, 0, 1, 1, 1}));
}

TEST(DeviceChoice, PerProcessDeviceSubsetsAreMatchedByBusId) {
  // CUDA_VISIBLE_DEVICES gives rank 0 only GPU 1 and rank 1 both, same socket: rank 0 must take
  // its index 0 (bus 1); rank 1 then sees bus 1 taken once and takes bus 0 (its index 0).
  auto const all = socket_devices(0, 1, 8, 2);
  std::vector<process_seen> ps;
  ps.push_back({0, 0, {0}, {all[1]}});
  ps.push_back({0, 1, {1}, all});
  EXPECT_EQ(devices_of(pick_devices(ps)), (std::vector<int>{0, 0}));
  ps[1].devices = {all[1], all[0]}; // rank 1 sees them in the other order
  EXPECT_EQ(devices_of(pick_devices(ps)), (std::vector<int>{0, 1}));
}

TEST(DeviceChoice, RejectsMissingDevicesAndBadLocalRanks) {
  std::vector<process_seen> ps;
  add_node(ps, 0, 2, socket_devices(0, 1, 8, 1), [](int k) { return k; });
  auto bad = ps;
  bad[1].devices.clear();
  try {
    (void)pick_devices(bad);
    FAIL() << "expected an error";
  } catch (halox::error const& e) {
    EXPECT_EQ(e.code(), halox::errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("sees no CUDA device"), std::string::npos) << e.what();
  }
  bad = ps;
  bad[1].local_rank = 5;
  try {
    (void)pick_devices(bad);
    FAIL() << "expected an error";
  } catch (halox::error const& e) {
    EXPECT_NE(std::string(e.what()).find("not 0..1"), std::string::npos) << e.what();
  }
}

TEST(DeviceChoice, CpuList) {
  EXPECT_EQ(halox::detail::cpu_list({}), "none");
  EXPECT_EQ(halox::detail::cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
}
