#pragma once
// Internal pieces shared by the convolution kernels: validation of the weights, weight packing,
// and the gather tables that turn a chunk of positions into the columns of a GEMM.
//
// Work is split into items of (sample, chunk of at most `gemm_columns` positions of the box
// being computed), enumerated in row-major box order. For an item, a table `off[k * pc + p]` gives,
// for kernel tap k and position p, the spatial element offset of the value to read in the
// source plane, or -1 when the tap falls into padding (or, for backward-data, between strided
// outputs). Gathering channel by channel through the table builds the im2col matrix without
// per-element bounds checks.

#include "ops/kernels/geometry.hpp"

#include <halox/ops/tensor_ref.hpp>

#include <vector>

namespace halox::ops::detail {

inline constexpr index_t chunk = 256; // most positions per work item (im2col columns)

/// Columns of every GEMM of a problem whose positions run over planes of `plane` cells (the
/// global output, or input for backward-data): `chunk`, or the plane rounded up to 16 when
/// smaller. Work items hold at most this many positions and pad the rest of their columns with
/// zeros, so every product of the problem has one shape, whatever box or rank it serves, and
/// a position's result does not depend on how the work was cut (see gemm.hpp).
inline index_t gemm_columns(index_t plane) {
  index_t const rounded = (plane + 15) / 16 * 16;
  return rounded < chunk ? rounded : chunk;
}

/// Validated convolution problem.
struct conv_problem {
  window3 w;        ///< geometry
  index_t cin = 0;  ///< input channels
  index_t cout = 0; ///< output channels
};

/// Checks the weights against the input (rank, channels) and builds the window.
template <class T> conv_problem make_conv_problem(char const* op, int nsp, dims const& in_extent,
                                                  index_t cin, tensor_ref<T> const& w,
                                                  conv_params const& p);

/// A convolution on boxes, checked the same way by every provider before it computes: the
/// spatial rank, the blocks, the weights against the channels, the batch and channel agreement
/// of the tensors, the box inside the layer, and blocks that cover what the box reads and
/// writes. Errors name the tensor, its shape and what it must be.
template <class T> struct conv_forward_check {
  int nsp = 0;
  block3<T const> x;
  block3<T> y;
  conv_problem cp;
  box3 out; ///< the outputs to compute
};
template <class T>
conv_forward_check<T> check_conv_forward(char const* op, const_block_ref<T> const& x,
                                         dims const& in_extent, const_tensor_ref<T> const& w,
                                         block_ref<T> const& y, box const& out_box,
                                         conv_params const& p);

template <class T> struct conv_backward_data_check {
  int nsp = 0;
  block3<T const> dy;
  block3<T> dx;
  conv_problem cp;
  box3 in;            ///< the input gradients to compute
  box3 out_footprint; ///< the outputs whose windows read `in`
};
template <class T> conv_backward_data_check<T>
check_conv_backward_data(char const* op, const_block_ref<T> const& dy, dims const& in_extent,
                         const_tensor_ref<T> const& w, block_ref<T> const& dx, box const& in_box,
                         conv_params const& p);

template <class T> struct conv_backward_weights_check {
  int nsp = 0;
  block3<T const> x, dy;
  conv_problem cp;
  box3 out; ///< the outputs whose gradients are summed
};
template <class T> conv_backward_weights_check<T>
check_conv_backward_weights(char const* op, const_block_ref<T> const& x, dims const& in_extent,
                            const_block_ref<T> const& dy, tensor_ref<T> const& dw,
                            box const& out_box, conv_params const& p);

/// Weights as a dense row-major [Cout][Cin * kvol] matrix (columns in (ci, k) order), or when
/// `transposed` as [Cin][Cout * kvol] (columns in (co, k) order) for backward-data. The matrix
/// lives in the calling thread's scratch, valid until its next call.
template <class T>
std::vector<T> const& pack_weights(tensor_ref<T const> const& w, window3 const& g, bool transposed);

/// Global coordinates of position `q` (row-major) of box `b`.
inline void box_position(box3 const& b, index_t q, index_t (&o)[s3]) {
  index_t e2 = b.extent(2), e1 = b.extent(1);
  o[2] = b.lo[2] + q % e2;
  q /= e2;
  o[1] = b.lo[1] + q % e1;
  o[0] = b.lo[0] + q / e1;
}

/// Gather table for the forward direction: outputs `[q0, q0 + pc)` of `ob` read input taps
/// `o * s - pl + k * d`, located in `src` (a block in input coordinates).
template <class T> void forward_table(window3 const& w, block3<T> const& src, box3 const& ob,
                                      index_t q0, index_t pc, std::vector<index_t>& off) {
  off.resize(static_cast<std::size_t>(w.kvol() * pc));
  index_t o[s3];
  for (index_t p = 0; p < pc; ++p) {
    box_position(ob, q0 + p, o);
    index_t k = 0;
    for (index_t k0 = 0; k0 < w.k[0]; ++k0) {
      index_t g0 = o[0] * w.s[0] - w.pl[0] + k0 * w.d[0];
      bool v0 = g0 >= 0 && g0 < w.in[0];
      for (index_t k1 = 0; k1 < w.k[1]; ++k1) {
        index_t g1 = o[1] * w.s[1] - w.pl[1] + k1 * w.d[1];
        bool v1 = v0 && g1 >= 0 && g1 < w.in[1];
        for (index_t k2 = 0; k2 < w.k[2]; ++k2, ++k) {
          index_t g2 = o[2] * w.s[2] - w.pl[2] + k2 * w.d[2];
          bool v = v1 && g2 >= 0 && g2 < w.in[2];
          off[k * pc + p] = v ? (g0 - src.org[0]) * src.str[0] + (g1 - src.org[1]) * src.str[1] +
                                    (g2 - src.org[2]) * src.str[2]
                              : -1;
        }
      }
    }
  }
}

/// Gather table for backward-data: input positions `[q0, q0 + pc)` of `ib` receive dy at
/// output `(i + pl - k * d) / s` when that division is exact and inside the global output;
/// `src` is the dy block (output coordinates).
template <class T> void backward_table(window3 const& w, block3<T> const& src, box3 const& ib,
                                       index_t q0, index_t pc, std::vector<index_t>& off) {
  off.resize(static_cast<std::size_t>(w.kvol() * pc));
  index_t i[s3];
  // Output coordinate for input position x and tap k along d, or -1 when no output reads it.
  auto out_of = [&w](int d, index_t x, index_t k) -> index_t {
    index_t t = x + w.pl[d] - k * w.d[d];
    if (t < 0 || t % w.s[d] != 0) return -1;
    t /= w.s[d];
    return t < w.out[d] ? t : -1;
  };
  for (index_t p = 0; p < pc; ++p) {
    box_position(ib, q0 + p, i);
    index_t k = 0;
    for (index_t k0 = 0; k0 < w.k[0]; ++k0) {
      index_t o0 = out_of(0, i[0], k0);
      for (index_t k1 = 0; k1 < w.k[1]; ++k1) {
        index_t o1 = o0 < 0 ? -1 : out_of(1, i[1], k1);
        for (index_t k2 = 0; k2 < w.k[2]; ++k2, ++k) {
          index_t o2 = o1 < 0 ? -1 : out_of(2, i[2], k2);
          off[k * pc + p] = o2 < 0
                                ? -1
                                : (o0 - src.org[0]) * src.str[0] + (o1 - src.org[1]) * src.str[1] +
                                      (o2 - src.org[2]) * src.str[2];
        }
      }
    }
  }
}

/// Builds the [channels * kvol][ld] column matrix: row (c, k), column p < pc is
/// `plane[c * sc + off[k * pc + p]]`, or zero where the table says -1; columns pc to ld are zero.
template <class T> void gather_columns(T const* plane, index_t sc, index_t channels,
                                       std::vector<index_t> const& off, index_t kvol, index_t pc,
                                       index_t ld, T* col) {
  for (index_t c = 0; c < channels; ++c) {
    T const* src = plane + c * sc;
    for (index_t k = 0; k < kvol; ++k) {
      index_t const* o = off.data() + k * pc;
      T* dst = col + (c * kvol + k) * ld;
      for (index_t p = 0; p < pc; ++p) dst[p] = o[p] >= 0 ? src[o[p]] : T(0);
      for (index_t p = pc; p < ld; ++p) dst[p] = T(0);
    }
  }
}

/// Element offsets (within a plane) of positions `[q0, q0 + pc)` of box `b` in block `blk`.
template <class T> void position_offsets(block3<T> const& blk, box3 const& b, index_t q0,
                                         index_t pc, std::vector<index_t>& off) {
  off.resize(static_cast<std::size_t>(pc));
  index_t o[s3];
  for (index_t p = 0; p < pc; ++p) {
    box_position(b, q0 + p, o);
    off[p] = (o[0] - blk.org[0]) * blk.str[0] + (o[1] - blk.org[1]) * blk.str[1] +
             (o[2] - blk.org[2]) * blk.str[2];
  }
}

} // namespace halox::ops::detail
