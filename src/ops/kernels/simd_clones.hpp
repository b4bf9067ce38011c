#pragma once
// Function multiversioning for the kernels whose speed depends on the vector width.
//
// The library is built for the baseline ISA (SSE2 on x86-64) so that one binary runs anywhere.
// A function marked HALOX_SIMD_CLONES is compiled for AVX-512 and AVX2 as well, and the
// loader picks the widest the CPU runs (GCC and Clang's target_clones). Where the clones may
// round differently (contracted multiply-adds), every rank of a job still runs the same one.

#if defined(__x86_64__) && (defined(__clang__) ? __clang_major__ >= 14 : defined(__GNUC__))
#define HALOX_SIMD_CLONES_BUILT 1
#define HALOX_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HALOX_SIMD_CLONES_BUILT 0
#define HALOX_SIMD_CLONES
#endif

namespace halox::ops::detail {

/// The clone the loader picks on this CPU: "avx512f", "avx2" or "baseline".
[[nodiscard]] inline char const* simd_clone_isa() noexcept {
#if HALOX_SIMD_CLONES_BUILT
  // The order in which the target_clones resolver tries them.
  if (__builtin_cpu_supports("avx512f")) return "avx512f";
  if (__builtin_cpu_supports("avx2")) return "avx2";
#endif
  return "baseline";
}

} // namespace halox::ops::detail
