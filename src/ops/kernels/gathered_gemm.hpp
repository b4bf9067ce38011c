#pragma once
// The im2col + GEMM loop that convolution's forward and backward-data passes share: both write
// a box of their result as (rows x kdim weights) times (kdim x positions gathered columns), one
// GEMM per work item of (sample, chunk of positions); only the gather table (which source value
// each tap of each position reads) and the bias differ.

#include "ops/kernels/conv_common.hpp"
#include "ops/kernels/gemm.hpp"
#include "ops/kernels/parallel.hpp"

#include <algorithm>
#include <vector>

namespace halox::ops::detail {

/// dst[n, r, box b] = sum over (c, k) of m[r, c * kvol + k] * src[n, c, tap k of the position],
/// for r < rows, plus `bias[r]` (0 where `bias` is null) when `add_bias`, else nothing added.
/// `table(q0, pc, off)` fills the gather offsets of positions [q0, q0 + pc) of b into `off` (as
/// `forward_table` / `backward_table`); `plane`: the cells of the plane the positions run over
/// (the global output, or input for backward-data), which fixes every GEMM's column count.
template <class T, class Table>
void gathered_gemm(block3<T const> const& src, index_t channels, index_t kvol,
                   std::vector<T> const& m, index_t rows, T const* bias, bool add_bias,
                   block3<T> const& dst, box3 const& b, index_t plane, Table const& table) {
  index_t const npos = b.volume(), kdim = channels * kvol;
  if (npos == 0 || dst.n == 0 || rows == 0) return;
  index_t const width = gemm_columns(plane);
  index_t const nchunks = (npos + width - 1) / width, items = dst.n * nchunks;
  bool const par = items > 1 && use_threads(dst.n * npos * kdim * rows);
  parallel_region(par, [&] {
    // Per-thread tables and matrices, kept between calls: steady-state steps allocate nothing.
    thread_local std::vector<index_t> off, doff;
    thread_local std::vector<T> col, out;
#pragma omp for schedule(dynamic)
    for (index_t it = 0; it < items; ++it) {
      index_t const n = it / nchunks, q0 = (it % nchunks) * width;
      index_t const pc = std::min(width, npos - q0);
      table(q0, pc, off);
      col.resize(static_cast<std::size_t>(kdim * width));
      out.resize(static_cast<std::size_t>(rows * width));
      gather_columns(src.data + n * src.sn, src.sc, channels, off, kvol, pc, width, col.data());
      gemm<T>(false, rows, width, kdim, m.data(), kdim, col.data(), width, out.data(), width);
      position_offsets(dst, b, q0, pc, doff);
      for (index_t r = 0; r < rows; ++r) {
        T* dp = dst.data + n * dst.sn + r * dst.sc;
        T const* op = out.data() + r * width;
        if (add_bias) {
          T const add = bias ? bias[r] : T(0);
          for (index_t p = 0; p < pc; ++p) dp[doff[p]] = op[p] + add;
        } else {
          for (index_t p = 0; p < pc; ++p) dp[doff[p]] = op[p];
        }
      }
    }
  });
}

} // namespace halox::ops::detail
