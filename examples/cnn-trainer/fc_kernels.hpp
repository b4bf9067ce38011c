#pragma once
// The fully connected layer's loops: y = x W^T + b, the weight and bias gradient sums, and
// dx = dy W, row-major with x [rows, F], W [O, F], y and dy [rows, O].
//
// Every result element is computed in an order fixed by the code, whatever the number of rows,
// so a rank's rows give the bits they would give on one rank. On x86-64 the loops are also
// compiled for AVX-512 and AVX2 and the loader picks the widest the CPU runs; those clones
// may contract multiply-adds, so they can round differently from the baseline, but every rank
// of a job on the same kind of CPU runs the same clone.
#include <halox/box.hpp>

namespace trainer {

/// Elements of the scratch `fc_forward` needs.
halox::index_t fc_forward_scratch(halox::index_t F, halox::index_t O);

/// y[n, o] = b[o] + sum over f, ascending, of W[o, f] x[n, f] (`b` may be null); `wt` is
/// scratch of `fc_forward_scratch(F, O)` elements (it receives W^T, padded).
template <class T> void fc_forward(halox::index_t rows, halox::index_t F, halox::index_t O,
                                   T const* x, T const* w, T const* b, T* y, T* wt);

/// gw[o, f] = sum over n of dy[n, o] x[n, f] and, when `gb` is not null, gb[o] = sum over n
/// of dy[n, o], in double, each sum over the rows in ascending order. For float the products
/// are exact in double, so every clone gives the same bits.
template <class T> void fc_weight_sums(halox::index_t rows, halox::index_t F, halox::index_t O,
                                       T const* x, T const* dy, double* gw, double* gb);

/// dx[n, f] = sum over o, ascending, of dy[n, o] W[o, f].
template <class T> void fc_backward_data(halox::index_t rows, halox::index_t F, halox::index_t O,
                                         T const* dy, T const* w, T* dx);

} // namespace trainer
