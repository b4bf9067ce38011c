// Pack/unpack bandwidth of the CUDA kernels against cudaMemcpy device-to-device of the same
// bytes, on the faces of a 3-D float32 tensor (runs from 4 bytes to whole rows) and on the full
// 26-neighbour halo of a periodic 2x2x2 decomposition. The packed stream is checked against the
// CPU pack path first.
//
// Columns: bytes = packed bytes; run = bytes per contiguous run; pack, unpack, memcpy = GB/s of
// packed bytes; ratio = kernel bandwidth / memcpy bandwidth (1.0: as fast as a copy of the same
// bytes). Runs shorter than 128 bytes cannot reach memcpy speed: every run costs whole 32-byte
// sectors of the strided side. For them "bound" is the best ratio that sector traffic allows,
// 2B / (S + B) for B packed bytes and S bytes of touched sectors, and "of bound" is the measured
// pack ratio divided by it.
//
// Usage: halox_gpu_pack_bench [--quick]. Exit status 77 (skipped) when no device is visible.

#include "exec/cpu/pack.hpp"
#include "exec/cuda/device_pack.hpp"
#include "owned_pack.hpp"
#include "plan/halo_planner.hpp"

#include "exec/cuda/cuda_handle.hpp"
#include <halox/error.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace halox;
using namespace halox::detail;

namespace {

struct bench_case {
  std::string name;
  schedule s; // one float32 slot; sends are packed, receives unpacked
};

// One region `b` of a row-major buffer of local shape `ls`, sent and received.
bench_case face_case(std::string name, std::vector<index_t> const& ls, box b) {
  bench_case c{std::move(name), {}};
  slot_layout sl;
  sl.strides = {ls[1] * ls[2], ls[2], 1};
  sl.elements = ls[0] * ls[1] * ls[2];
  sl.type = dtype::float32;
  sl.elem_size = 4;
  c.s.slots.push_back(sl);
  message m;
  m.peer = 1;
  m.regions.push_back({0, b});
  c.s.sends.push_back(m);
  c.s.recvs.push_back(m);
  c.s.finalize();
  return c;
}

box make_box(index_t lo0, index_t hi0, index_t lo1, index_t hi1, index_t lo2, index_t hi2) {
  box b;
  b.nd = 3;
  b.lo[0] = lo0;
  b.hi[0] = hi0;
  b.lo[1] = lo1;
  b.hi[1] = hi1;
  b.lo[2] = lo2;
  b.hi[2] = hi2;
  return b;
}

// Bytes of the 32-byte sectors the strided side touches (buffer base 256-byte aligned).
double sector_bytes(schedule const& s) {
  double total = 0;
  for (auto const& m : s.sends)
    for (auto const& r : m.regions) {
      auto const& sl = s.slots[static_cast<std::size_t>(r.slot)];
      strided_region const sr = make_region(r.b, sl.strides.data());
      auto const len = static_cast<index_t>(sr.run) * static_cast<index_t>(sl.elem_size);
      for (index_t k = 0; k < sr.runs(); ++k) {
        index_t const off = sr.run_offset(k) * static_cast<index_t>(sl.elem_size);
        total += static_cast<double>(((off + len - 1) / 32 - off / 32 + 1) * 32);
      }
    }
  return total;
}

double mean_run_bytes(schedule const& s) {
  double runs = 0;
  for (auto const& m : s.sends)
    for (auto const& r : m.regions)
      runs += static_cast<double>(make_region(r.b, s.slots[0].strides.data()).runs());
  return static_cast<double>(s.send_bytes()) / runs;
}

template <class F> double time_ms(cudaStream_t st, int iters, F&& f) {
  unique_event a, b;
  HALOX_CUDA_CHECK(cudaEventCreate(a.out()));
  HALOX_CUDA_CHECK(cudaEventCreate(b.out()));
  for (int i = 0; i < 3; ++i) f(); // warm-up
  HALOX_CUDA_CHECK(cudaEventRecord(a.get(), st));
  for (int i = 0; i < iters; ++i) f();
  HALOX_CUDA_CHECK(cudaEventRecord(b.get(), st));
  HALOX_CUDA_CHECK(cudaEventSynchronize(b.get()));
  float ms = 0;
  HALOX_CUDA_CHECK(cudaEventElapsedTime(&ms, a.get(), b.get()));
  return static_cast<double>(ms) / iters;
}

// Packs on the device and compares every message with the CPU pack path.
bool verify(bench_case const& c, std::vector<float> const& host, device_pack& dp, void* dev,
            cudaStream_t st) {
  void* bufs[] = {dev};
  dp.pack(bufs, st);
  HALOX_CUDA_CHECK(cudaStreamSynchronize(st));
  void const* hb[] = {host.data()};
  for (std::size_t i = 0; i < c.s.sends.size(); ++i) {
    auto const& m = c.s.sends[i];
    std::vector<std::byte> want(m.bytes), got(m.bytes);
    pack_message(c.s, m, hb, want.data());
    HALOX_CUDA_CHECK(cudaMemcpy(got.data(), dp.stream() + dp.layout().send_offset[i], m.bytes,
                                cudaMemcpyDeviceToHost));
    if (std::memcmp(want.data(), got.data(), m.bytes) != 0) return false;
  }
  return true;
}

} // namespace

int main(int argc, char** argv) {
  bool const quick = argc > 1 && std::string(argv[1]) == "--quick";
  int ndev = 0;
  cudaError_t const rc = cudaGetDeviceCount(&ndev);
  if (rc != cudaSuccess || ndev == 0) {
    std::printf("skipped: no CUDA device visible: %s\n",
                rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
    return 77;
  }
  try {
    cudaDeviceProp prop{};
    HALOX_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    index_t const n = quick ? 128 : 256; // owned cells per dimension
    int const iters = quick ? 10 : 30;
    std::printf("halox GPU pack bandwidth on %s, float32 %lld^3 owned cells per rank\n", prop.name,
                static_cast<long long>(n));

    std::vector<bench_case> cases;
    for (int h : {1, 2, 4}) {
      std::vector<index_t> const ls = {n + 2 * h, n + 2 * h, n + 2 * h};
      index_t const lo = h, hi = n + h;
      std::string const w = " h=" + std::to_string(h);
      cases.push_back(face_case("dim0 face" + w, ls, make_box(lo, lo + h, lo, hi, lo, hi)));
      cases.push_back(face_case("dim1 face" + w, ls, make_box(lo, hi, lo, lo + h, lo, hi)));
      cases.push_back(face_case("dim2 face" + w, ls, make_box(lo, hi, lo, hi, lo, lo + h)));
    }
    for (int h : {1, 2}) {
      distribution const d(
          {2 * n, 2 * n, 2 * n}, dtype::float32, {2, 2, 2},
          {dim_options::halo(h, true), dim_options::halo(h, true), dim_options::halo(h, true)});
      cases.push_back({"26 neighbours h=" + std::to_string(h), plan_halo(d, 0, {}, false)});
    }

    std::printf("%-22s %10s %7s %8s %8s %8s %6s %6s %6s %8s %6s\n", "case", "bytes", "run B",
                "pack", "unpack", "memcpy", "pack/", "unpk/", "check", "sector", "of");
    std::printf("%-22s %10s %7s %8s %8s %8s %6s %6s %6s %8s %6s\n", "", "", "", "GB/s", "GB/s",
                "GB/s", "memcp", "memcp", "", "bound", "bound");
    unique_stream st;
    HALOX_CUDA_CHECK(cudaStreamCreateWithFlags(st.out(), cudaStreamNonBlocking));
    bool all_ok = true;
    for (auto const& c : cases) {
      auto const& sl = c.s.slots[0];
      std::vector<float> host(static_cast<std::size_t>(sl.elements));
      for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 1000003);
      unique_device_memory dev = make_device_memory(host.size() * 4);
      HALOX_CUDA_CHECK(cudaMemcpy(dev.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
      owned_device_pack owned_dp(c.s, {});
      device_pack& dp = owned_dp.dp;
      bool const ok = verify(c, host, dp, dev.get(), st.get());
      all_ok = all_ok && ok;
      void* bufs[] = {dev.get()};
      double const bytes = static_cast<double>(c.s.send_bytes());
      double const t_pack = time_ms(st.get(), iters, [&] { dp.pack(bufs, st.get()); });
      double const t_unpack =
          time_ms(st.get(), iters, [&] { dp.unpack(bufs, combine_op::replace, st.get()); });
      unique_device_memory a = make_device_memory(c.s.send_bytes());
      unique_device_memory b = make_device_memory(c.s.send_bytes());
      double const t_copy = time_ms(st.get(), iters, [&] {
        HALOX_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), c.s.send_bytes(),
                                         cudaMemcpyDeviceToDevice, st.get()));
      });
      double const run = mean_run_bytes(c.s);
      auto gbs = [&](double ms) { return bytes / (ms * 1e6); };
      std::printf("%-22s %10.0f %7.0f %8.1f %8.1f %8.1f %6.2f %6.2f %6s", c.name.c_str(), bytes,
                  run, gbs(t_pack), gbs(t_unpack), gbs(t_copy), t_copy / t_pack, t_copy / t_unpack,
                  ok ? "ok" : "WRONG");
      if (run < 128) {
        double const bound = 2 * bytes / (sector_bytes(c.s) + bytes);
        std::printf(" %8.2f %6.2f\n", bound, (t_copy / t_pack) / bound);
      } else {
        std::printf(" %8s %6s\n", "-", "-");
      }
    }
    if (!all_ok) {
      std::printf("FAILED: a device pack differs from the CPU pack\n");
      return 1;
    }
  } catch (std::exception const& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
  return 0;
}
