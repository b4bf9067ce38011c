// The pack/unpack kernels on the device against the CPU pack path, on random schedules (the
// device counterpart of tests/unit/test_pack_descriptors.cpp), and the rejection of host
// buffers by device plans. (The CUDA/NCCL check macros are tested in the unit suite, which
// needs no device.)

#include "gpu_support.hpp"

#include "exec/cpu/pack.hpp"
#include "exec/cuda/device_pack.hpp"
#include "owned_pack.hpp"
#include "plan/halo_planner.hpp"

#include "exec/cuda/cuda_handle.hpp"
#include <halox/error.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

using namespace halox;
using namespace halox::detail;

namespace {

// ---- kernels vs CPU -------------------------------------------------------------------------

constexpr dtype all_types[] = {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16,
                               dtype::int32,   dtype::int64,   dtype::uint8};

schedule random_schedule(std::mt19937& rng, bool fill) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  schedule s;
  int const ntensors = pick(1, 3);
  for (int t = 0; t < ntensors; ++t) {
    int const nd = pick(1, 3);
    std::vector<index_t> shape(static_cast<std::size_t>(nd));
    std::vector<int> parts(static_cast<std::size_t>(nd));
    std::vector<dim_options> opts(static_cast<std::size_t>(nd));
    for (std::size_t d = 0; d < shape.size(); ++d) {
      shape[d] = pick(1, nd == 1 ? 5000 : nd == 2 ? 150 : 40);
      parts[d] = pick(1, 3);
      int const w = std::min(pick(0, 4), static_cast<int>(shape[d]));
      opts[d] = dim_options::halo(w, pick(0, 1) == 0);
    }
    distribution const dist(shape, all_types[rng() % 7], parts, opts);
    int const rank = pick(0, dist.nranks() - 1);
    s.merge(plan_halo(dist, rank, {}, fill));
  }
  return s;
}

// Small integers in every dtype (float payloads stay ordinary numbers: NaN propagation is not
// the same on the CPU and the GPU).
void small_values(std::mt19937& rng, schedule const& s,
                  std::vector<std::vector<unsigned char>>& h) {
  h.resize(s.slots.size());
  for (std::size_t i = 0; i < s.slots.size(); ++i) {
    auto const& sl = s.slots[i];
    h[i].resize(static_cast<std::size_t>(sl.elements) * sl.elem_size);
    for (index_t k = 0; k < sl.elements; ++k) {
      auto const v = static_cast<int>(rng() % 8);
      unsigned char* p = h[i].data() + static_cast<std::size_t>(k) * sl.elem_size;
      auto put = [&](auto x) { std::memcpy(p, &x, sizeof x); };
      switch (sl.type) {
      case dtype::float32: put(static_cast<float>(v)); break;
      case dtype::float64: put(static_cast<double>(v)); break;
      case dtype::int32: put(static_cast<std::int32_t>(v)); break;
      case dtype::int64: put(static_cast<std::int64_t>(v)); break;
      case dtype::uint8: put(static_cast<std::uint8_t>(v)); break;
      case dtype::float16: put(float_to_half(static_cast<float>(v))); break;
      case dtype::bfloat16: put(float_to_bf16(static_cast<float>(v))); break;
      }
    }
  }
}

struct device_slots {
  std::vector<void*> ptr;
  explicit device_slots(std::vector<std::vector<unsigned char>> const& h) {
    for (auto const& b : h) {
      void* p = nullptr;
      // 8 bytes past a 256-byte boundary: 16-byte words must be capped at run time. 8 bytes
      // more at the end keep the pointer of an empty buffer inside its allocation, where the
      // pack engine's memory-type check finds it to be device memory.
      EXPECT_EQ(cudaMalloc(&p, b.size() + 16), cudaSuccess);
      p = static_cast<unsigned char*>(p) + 8;
      EXPECT_EQ(cudaMemcpy(p, b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
      ptr.push_back(p);
    }
  }
  ~device_slots() {
    for (void* p : ptr) cudaFree(static_cast<unsigned char*>(p) - 8);
  }
  void download(std::vector<std::vector<unsigned char>>& h) const {
    for (std::size_t i = 0; i < ptr.size(); ++i)
      EXPECT_EQ(cudaMemcpy(h[i].data(), ptr[i], h[i].size(), cudaMemcpyDeviceToHost), cudaSuccess);
  }
};

void check_schedule(std::mt19937& rng, schedule const& s, combine_op op) {
  std::vector<std::vector<unsigned char>> host;
  small_values(rng, s, host);
  device_slots dev(host);
  owned_device_pack owned_dp(s, {true, true, 7.0});
  device_pack& dp = owned_dp.dp;
  auto const& l = dp.layout();
  // Pack, and compare the whole stream with the CPU's packing.
  cudaStream_t st = nullptr;
  ASSERT_EQ(cudaStreamCreate(&st), cudaSuccess);
  dp.pack(dev.ptr.data(), st);
  ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
  std::vector<unsigned char> got(static_cast<std::size_t>(l.total)), want(got.size());
  if (!got.empty()) {
    ASSERT_EQ(cudaMemcpy(got.data(), dp.stream(), got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  std::vector<void const*> hp;
  for (auto& b : host) hp.push_back(b.data());
  for (std::size_t i = 0; i < s.sends.size(); ++i) {
    std::vector<std::byte> ref(s.sends[i].bytes);
    pack_message(s, s.sends[i], hp.data(), ref.data());
    ASSERT_EQ(0, std::memcmp(ref.data(), got.data() + l.send_offset[i], ref.size()))
        << "send " << i << "\n"
        << s.str();
  }
  for (std::size_t i = 0; i < s.copies.size(); ++i) {
    std::vector<std::byte> ref(region_bytes(s, s.copies[i].src));
    pack_region(s, s.copies[i].src, hp.data(), ref.data());
    ASSERT_EQ(0, std::memcmp(ref.data(), got.data() + l.copy_offset[i], ref.size()))
        << "copy " << i << "\n"
        << s.str();
  }
  // Unpack: the landing areas get the packed regions of other small-valued buffers, the copy
  // area keeps what the pack wrote; the device and the CPU unpack the same stream.
  std::vector<std::vector<unsigned char>> other;
  small_values(rng, s, other);
  std::vector<void const*> op_src;
  for (auto& b : other) op_src.push_back(b.data());
  std::vector<unsigned char> stream = got;
  for (std::size_t i = 0; i < s.recvs.size(); ++i) {
    auto* at = reinterpret_cast<std::byte*>(stream.data() + l.recv_offset[i]);
    for (auto const& r : s.recvs[i].regions) at += pack_region(s, r, op_src.data(), at);
  }
  if (!stream.empty()) {
    ASSERT_EQ(cudaMemcpy(dp.stream(), stream.data(), stream.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  dp.unpack(dev.ptr.data(), op, st);
  ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(st), cudaSuccess);
  // The CPU applies the regions in the batch's order, the order the levels fix for every cell.
  std::vector<void*> hw;
  for (auto& b : host) hw.push_back(b.data());
  struct item {
    region const* r;
    index_t at; // stream offset; -1 for a fill
  };
  std::vector<item> items;
  for (std::size_t i = 0; i < s.recvs.size(); ++i) {
    index_t at = l.recv_offset[i];
    for (auto const& r : s.recvs[i].regions) {
      auto const n = static_cast<index_t>(region_bytes(s, r));
      if (n > 0) items.push_back({&r, at});
      at += n;
    }
  }
  for (std::size_t i = 0; i < s.copies.size(); ++i)
    if (region_bytes(s, s.copies[i].dst) > 0) items.push_back({&s.copies[i].dst, l.copy_offset[i]});
  for (auto const& f : s.fills)
    if (region_bytes(s, f) > 0) items.push_back({&f, -1});
  ASSERT_EQ(items.size(), dp.unpack_batch().source.size());
  for (int k : dp.unpack_batch().source) {
    item const& it = items[static_cast<std::size_t>(k)];
    if (it.at >= 0) {
      unpack_region(s, *it.r, hw.data(), reinterpret_cast<std::byte const*>(stream.data() + it.at),
                    op);
    } else {
      schedule one;
      one.slots = s.slots;
      one.fills = {*it.r};
      run_fills(one, hw.data(), 7.0);
    }
  }
  auto dres = host;
  dev.download(dres);
  for (std::size_t i = 0; i < host.size(); ++i)
    ASSERT_EQ(0, std::memcmp(dres[i].data(), host[i].data(), host[i].size()))
        << "slot " << i << " after unpack\n"
        << s.str();
}

class DeviceKernels : public testing::Test {
protected:
  void SetUp() override {
    if (auto const why = gpu_test::device_problem(); !why.empty()) GTEST_SKIP() << why;
    gpu_test::select_device();
  }
};

TEST_F(DeviceKernels, RandomSchedulesMatchCpuPack) {
  std::mt19937 rng(4242);
  combine_op const ops[] = {combine_op::sum, combine_op::max, combine_op::min};
  for (int iter = 0; iter < 60; ++iter) {
    schedule const fwd = random_schedule(rng, iter % 2 == 0);
    check_schedule(rng, fwd, combine_op::replace);
    check_schedule(rng, fwd.reversed(), ops[iter % 3]);
    if (HasFatalFailure()) return;
  }
}

TEST_F(DeviceKernels, HostMemoryIsRejectedWithAClearError) {
  schedule const s = plan_halo(
      distribution({16}, dtype::float32, {1}, {dim_options::halo(1, true)}), 0, {}, false);
  owned_device_pack owned_dp(s, {});
  device_pack& dp = owned_dp.dp;
  std::vector<float> host(18);
  void* bufs[] = {host.data()};
  try {
    dp.pack(bufs, nullptr);
    FAIL() << "no exception";
  } catch (error const& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(e.message().find("host memory"), std::string::npos) << e.what();
  }
}

} // namespace
