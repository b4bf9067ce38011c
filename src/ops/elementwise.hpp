#pragma once
// Internal loop over every element of up to three equally shaped strided tensors.

#include <halox/detail/box.hpp>

#include <cstddef>
#include <vector>

namespace halox::ops::detail {

/// Calls `f(oa, ob, oc)` with the element offsets of each index of `shape` in three layouts
/// (pass the same strides twice when fewer are needed). The last dimension is the inner loop;
/// the outer dimensions are walked as an odometer so any rank works.
template <class F>
void for_each_element(std::vector<index_t> const& shape, std::vector<index_t> const& sa,
                      std::vector<index_t> const& sb, std::vector<index_t> const& sc, F&& f) {
  std::size_t const r = shape.size();
  for (index_t e : shape)
    if (e == 0) return;
  if (r == 0) {
    f(index_t{0}, index_t{0}, index_t{0});
    return;
  }
  std::vector<index_t> idx(r, 0);
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

} // namespace halox::ops::detail
