#include "ops/gemm.hpp"

#include <algorithm>
#include <vector>

namespace halox::ops::detail {
namespace {

// Register tile and cache blocks. The tile keeps MR x NR accumulators in registers (12 SSE
// registers for both types at the baseline x86-64 ISA); KC x NR panels of B stay in L1 and
// MC x KC blocks of A in L2. The blocks are modest because callers run one product per thread.
template <class T> struct tile;
template <> struct tile<float> { static constexpr int mr = 6, nr = 8; };
template <> struct tile<double> { static constexpr int mr = 6, nr = 4; };
constexpr index_t kc_block = 256;
constexpr index_t mc_block = 96;
constexpr index_t nc_block = 2048;

// Copies A[0:mc, 0:kc] into row panels of `mr` rows, each stored column by column (k-major);
// rows past the matrix are zero so the micro-kernel never branches.
template <class T, int MR>
void pack_a(index_t mc, index_t kc, T const* a, index_t rsa, index_t csa, T* dst) {
  for (index_t i0 = 0; i0 < mc; i0 += MR) {
    index_t mr = std::min<index_t>(MR, mc - i0);
    for (index_t p = 0; p < kc; ++p) {
      T const* src = a + i0 * rsa + p * csa;
      for (index_t i = 0; i < mr; ++i) dst[i] = src[i * rsa];
      for (index_t i = mr; i < MR; ++i) dst[i] = T(0);
      dst += MR;
    }
  }
}

// Copies B[0:kc, 0:nc] into column panels of `nr` columns, each stored row by row.
template <class T, int NR>
void pack_b(index_t kc, index_t nc, T const* b, index_t rsb, index_t csb, T* dst) {
  for (index_t j0 = 0; j0 < nc; j0 += NR) {
    index_t nr = std::min<index_t>(NR, nc - j0);
    for (index_t p = 0; p < kc; ++p) {
      T const* src = b + p * rsb + j0 * csb;
      if (csb == 1 && nr == NR) {
        for (index_t j = 0; j < NR; ++j) dst[j] = src[j];
      } else {
        for (index_t j = 0; j < nr; ++j) dst[j] = src[j * csb];
        for (index_t j = nr; j < NR; ++j) dst[j] = T(0);
      }
      dst += NR;
    }
  }
}

// Accumulates the register tile t = A_panel * B_panel over kc.
#if defined(__GNUC__)
// GCC/Clang vector types keep the MR x NR accumulators in registers at any optimisation level
// and without -march flags; plain arrays were spilled to the stack by GCC 12 at -O2.
template <class T, int MR, int NR>
void tile_product(index_t kc, T const* ap, T const* bp, T (&out)[MR][NR]) {
  typedef T vec __attribute__((vector_size(16)));
  constexpr int w = 16 / sizeof(T);
  constexpr int nv = NR / w;
  static_assert(NR % w == 0, "NR must be a multiple of the vector width");
  vec t[MR][nv];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 16
    for (int v = 0; v < nv; ++v) t[i][v] = vec{};
  for (index_t p = 0; p < kc; ++p) {
    vec b[nv];
#pragma GCC unroll 16
    for (int v = 0; v < nv; ++v) __builtin_memcpy(&b[v], bp + v * w, sizeof(vec));
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      vec const ai = vec{} + ap[i];
#pragma GCC unroll 16
      for (int v = 0; v < nv; ++v) t[i][v] += ai * b[v];
    }
    ap += MR;
    bp += NR;
  }
  __builtin_memcpy(out, t, sizeof(out));
}
#else
template <class T, int MR, int NR>
void tile_product(index_t kc, T const* ap, T const* bp, T (&out)[MR][NR]) {
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) out[i][j] = T(0);
  for (index_t p = 0; p < kc; ++p, ap += MR, bp += NR)
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) out[i][j] += ap[i] * bp[j];
}
#endif

// C (+)= the tile, on its valid mr x nr part.
template <class T, int MR, int NR> void micro_kernel(index_t kc, T const* ap, T const* bp, T* c,
                                                     index_t rsc, index_t csc, index_t mr,
                                                     index_t nr, bool add) {
  T t[MR][NR];
  tile_product<T, MR, NR>(kc, ap, bp, t);
  for (index_t i = 0; i < mr; ++i) {
    T* ci = c + i * rsc;
    if (add)
      for (index_t j = 0; j < nr; ++j) ci[j * csc] += t[i][j];
    else
      for (index_t j = 0; j < nr; ++j) ci[j * csc] = t[i][j];
  }
}

} // namespace

template <class T> void gemm(index_t m, index_t n, index_t k, T const* a, index_t rsa, index_t csa,
                             T const* b, index_t rsb, index_t csb, T* c, index_t rsc, index_t csc,
                             bool accumulate) {
  constexpr int MR = tile<T>::mr, NR = tile<T>::nr;
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate)
      for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < n; ++j) c[i * rsc + j * csc] = T(0);
    return;
  }
  // Per-thread scratch, reused across calls: callers invoke gemm once per work item.
  thread_local std::vector<T> abuf, bbuf;
  index_t const kcmax = std::min(k, kc_block);
  index_t const ncmax = std::min(n, nc_block);
  index_t const mcmax = std::min(m, mc_block);
  abuf.resize(static_cast<std::size_t>((mcmax + MR - 1) / MR * MR * kcmax));
  bbuf.resize(static_cast<std::size_t>((ncmax + NR - 1) / NR * NR * kcmax));

  for (index_t jc = 0; jc < n; jc += nc_block) {
    index_t nc = std::min(nc_block, n - jc);
    for (index_t pc = 0; pc < k; pc += kc_block) {
      index_t kc = std::min(kc_block, k - pc);
      bool add = accumulate || pc > 0;
      pack_b<T, NR>(kc, nc, b + pc * rsb + jc * csb, rsb, csb, bbuf.data());
      for (index_t ic = 0; ic < m; ic += mc_block) {
        index_t mc = std::min(mc_block, m - ic);
        pack_a<T, MR>(mc, kc, a + ic * rsa + pc * csa, rsa, csa, abuf.data());
        for (index_t jr = 0; jr < nc; jr += NR) {
          T const* bp = bbuf.data() + jr * kc;
          index_t nr = std::min<index_t>(NR, nc - jr);
          for (index_t ir = 0; ir < mc; ir += MR) {
            index_t mr = std::min<index_t>(MR, mc - ir);
            micro_kernel<T, MR, NR>(kc, abuf.data() + ir * kc, bp,
                                    c + (ic + ir) * rsc + (jc + jr) * csc, rsc, csc, mr, nr, add);
          }
        }
      }
    }
  }
}

template void gemm(index_t, index_t, index_t, float const*, index_t, index_t, float const*, index_t,
                   index_t, float*, index_t, index_t, bool);
template void gemm(index_t, index_t, index_t, double const*, index_t, index_t, double const*,
                   index_t, index_t, double*, index_t, index_t, bool);

} // namespace halox::ops::detail
