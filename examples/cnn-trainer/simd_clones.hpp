#pragma once
// Multiversioning of the trainer's SIMD loops: on x86-64 a function marked TRAINER_SIMD_CLONES
// is also compiled for AVX-512 and AVX2, and the loader picks the widest the CPU runs. Those
// clones may contract multiply-adds, so they can round differently from the baseline, but
// every rank of a job on the same kind of CPU runs the same clone.
//
// The library's internal multiversioning macro is not part of its public API, which is all the
// trainer uses, so the trainer names the clones itself. A helper they call is compiled once,
// for the baseline, unless it is inlined into each clone: TRAINER_CLONE_INLINE makes sure it
// is.
#if defined(__x86_64__) && (defined(__clang__) ? __clang_major__ >= 14 : defined(__GNUC__))
#define TRAINER_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define TRAINER_CLONE_INLINE __attribute__((always_inline)) inline
#else
#define TRAINER_SIMD_CLONES
#define TRAINER_CLONE_INLINE inline
#endif
