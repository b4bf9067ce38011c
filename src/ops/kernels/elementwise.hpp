#pragma once
// Internal loops over every element of up to three equally shaped strided tensors: one call
// per element (`for_each_element`), or one call per contiguous run (`for_each_run`), which is
// what lets the element-wise kernels run as vectorised loops.

#include "common/strided_region.hpp"
#include <halox/box.hpp>
#include <halox/error.hpp>
#include <halox/ops/dims.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace halox::ops::detail {

/// Calls `f(oa, ob, oc)` with the element offsets of each index of `shape` in three layouts
/// (pass the same strides twice when fewer are needed). The last dimension is the inner loop;
/// the outer dimensions are walked as an odometer so any rank works.
template <class F>
void for_each_element(dims const& shape, dims const& sa, dims const& sb, dims const& sc, F&& f) {
  std::size_t const r = shape.size();
  for (index_t e : shape)
    if (e == 0) return;
  if (r == 0) {
    f(index_t{0}, index_t{0}, index_t{0});
    return;
  }
  index_t idx[max_dims] = {};
  index_t const inner = shape[r - 1], ia = sa[r - 1], ib = sb[r - 1], ic = sc[r - 1];
  index_t oa = 0, ob = 0, oc = 0;
  while (true) {
    for (index_t i = 0; i < inner; ++i) f(oa + i * ia, ob + i * ib, oc + i * ic);
    std::size_t d = r - 1;
    while (d > 0) {
      --d;
      if (++idx[d] < shape[d]) {
        oa += sa[d];
        ob += sb[d];
        oc += sc[d];
        break;
      }
      oa -= (shape[d] - 1) * sa[d];
      ob -= (shape[d] - 1) * sb[d];
      oc -= (shape[d] - 1) * sc[d];
      idx[d] = 0;
      if (d == 0) return;
    }
    if (r == 1) return;
  }
}

/// Calls `f(oa, ob, oc, n)` for each run of `n` consecutive elements of `shape` that are
/// contiguous (unit stride) in all three layouts, with the offsets of the run's first element;
/// every element is visited once, in row-major order. Dimensions of extent 1 are dropped and
/// dimensions that are contiguous with the next in all three layouts are merged, so a dense
/// tensor is one run and the owned block of a haloed buffer is one run per row. Where the
/// innermost dimension is strided in some layout the runs have length 1. Allocates nothing:
/// element-wise kernels call it on every layer execution.
template <class F>
void for_each_run(dims const& shape, dims const& sa, dims const& sb, dims const& sc, F&& f) {
  constexpr int cap = max_dims;
  index_t ext[cap], a[cap], b[cap], c[cap];
  int r = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return;
    if (shape[d] == 1) continue;
    if (r > 0 && a[r - 1] == sa[d] * shape[d] && b[r - 1] == sb[d] * shape[d] &&
        c[r - 1] == sc[d] * shape[d]) {
      ext[r - 1] *= shape[d]; // the outer dimension continues this one: merge them
      a[r - 1] = sa[d];
      b[r - 1] = sb[d];
      c[r - 1] = sc[d];
      continue;
    }
    HALOX_REQUIRE(r < cap, errc::invalid_argument,
                  "element-wise kernel: a tensor of " + std::to_string(shape.size()) +
                      " dimensions with more than " + std::to_string(cap) +
                      " non-mergeable ones; use at most " + std::to_string(cap) + " dimensions");
    ext[r] = shape[d];
    a[r] = sa[d];
    b[r] = sb[d];
    c[r] = sc[d];
    ++r;
  }
  if (r == 0) {
    f(index_t{0}, index_t{0}, index_t{0}, index_t{1});
    return;
  }
  // The innermost dimension is the run when every layout walks it with unit stride.
  bool const unit = a[r - 1] == 1 && b[r - 1] == 1 && c[r - 1] == 1;
  index_t const run = unit ? ext[r - 1] : 1;
  int const outer = unit ? r - 1 : r; // dimensions walked by the odometer
  index_t idx[cap] = {};
  index_t oa = 0, ob = 0, oc = 0;
  for (;;) {
    f(oa, ob, oc, run);
    int d = outer - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < ext[d]) {
        oa += a[d];
        ob += b[d];
        oc += c[d];
        break;
      }
      oa -= (ext[d] - 1) * a[d];
      ob -= (ext[d] - 1) * b[d];
      oc -= (ext[d] - 1) * c[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

} // namespace halox::ops::detail
