#include "ops/kernels/conv_common.hpp"
#include "ops/kernels/gathered_gemm.hpp"
#include "ops/kernels/parallel.hpp"

#include <halox/error.hpp>
#include <halox/ops/conv.hpp>

#include <algorithm>
#include <string>

namespace halox::ops {
namespace detail {

template <class T> conv_problem make_conv_problem(char const* op, int nsp, dims const& in_extent,
                                                  index_t cin, tensor_ref<T> const& w,
                                                  conv_params const& p) {
  constexpr auto bad = errc::invalid_argument;
  check_ref(op, "w", w);
  HALOX_REQUIRE(static_cast<int>(in_extent.size()) == nsp, bad,
                std::string(op) + ": in_extent " + fmt(in_extent) + " has " +
                    std::to_string(in_extent.size()) +
                    " entries; expected one per spatial dimension (" + std::to_string(nsp) + ")");
  HALOX_REQUIRE(w.rank() == 2 + nsp, bad,
                std::string(op) + ": w has shape " + fmt(w.shape) +
                    "; expected [Cout, Cin, k...] of rank " + std::to_string(2 + nsp) + " for " +
                    std::to_string(nsp) + " spatial dimensions");
  HALOX_REQUIRE(w.shape[1] == cin, bad,
                std::string(op) + ": the input has " + std::to_string(cin) + " channels but w " +
                    fmt(w.shape) + " expects " + std::to_string(w.shape[1]) +
                    "; w must be [Cout, " + std::to_string(cin) + ", k...]");
  conv_problem cp;
  cp.w = conv_window(op, in_extent, spatial_extent(w.shape), p);
  cp.cin = cin;
  cp.cout = w.shape[0];
  return cp;
}

template <class T> std::vector<T> const& pack_weights(tensor_ref<T const> const& w,
                                                      window3 const& g, bool transposed) {
  index_t const cout = w.shape[0], cin = w.shape[1], kvol = g.kvol();
  index_t ks[s3] = {0, 0, 0};
  for (int i = 0; i < g.nsp; ++i) ks[s3 - g.nsp + i] = w.strides[2 + i];
  // Reused from call to call (every element is written below), so a step allocates nothing.
  thread_local std::vector<T> m;
  m.resize(static_cast<std::size_t>(cout * cin * kvol));
  for (index_t co = 0; co < cout; ++co)
    for (index_t ci = 0; ci < cin; ++ci) {
      T const* base = w.data + co * w.strides[0] + ci * w.strides[1];
      index_t k = 0;
      for (index_t k0 = 0; k0 < g.k[0]; ++k0)
        for (index_t k1 = 0; k1 < g.k[1]; ++k1)
          for (index_t k2 = 0; k2 < g.k[2]; ++k2, ++k) {
            T v = base[k0 * ks[0] + k1 * ks[1] + k2 * ks[2]];
            if (transposed)
              m[(ci * cout + co) * kvol + k] = v; // [Cin][Cout * kvol]
            else
              m[(co * cin + ci) * kvol + k] = v; // [Cout][Cin * kvol]
          }
    }
  return m;
}

template conv_problem make_conv_problem(char const*, int, dims const&, index_t,
                                        tensor_ref<float const> const&, conv_params const&);
template conv_problem make_conv_problem(char const*, int, dims const&, index_t,
                                        tensor_ref<double const> const&, conv_params const&);
template conv_problem make_conv_problem(char const*, int, dims const&, index_t,
                                        tensor_ref<float> const&, conv_params const&);
template conv_problem make_conv_problem(char const*, int, dims const&, index_t,
                                        tensor_ref<double> const&, conv_params const&);
template std::vector<float> const& pack_weights(tensor_ref<float const> const&, window3 const&,
                                                bool);
template std::vector<double> const& pack_weights(tensor_ref<double const> const&, window3 const&,
                                                 bool);

namespace {

// y[n, :, ob] = W * im2col(x) + bias, one GEMM per (sample, chunk of output positions).
template <class T> void forward_kernel(conv_problem const& cp, block3<T const> const& x,
                                       std::vector<T> const& wm, T const* bias, block3<T> const& y,
                                       box3 const& ob) {
  if (x.n == 0) return;
  gathered_gemm(x, cp.cin, cp.w.kvol(), wm, cp.cout, bias, true, y, ob,
                cp.w.out[0] * cp.w.out[1] * cp.w.out[2],
                [&](index_t q0, index_t pc, std::vector<index_t>& off) {
                  forward_table(cp.w, x, ob, q0, pc, off);
                });
}

template <class T> void forward_impl(char const* op, const_block_ref<T> const& x,
                                     dims const& in_extent, const_tensor_ref<T> const& w,
                                     T const* bias, block_ref<T> const& y, box const& out_box,
                                     conv_params const& p) {
  auto const c = check_conv_forward(op, x, in_extent, w, y, out_box, p);
  forward_kernel(c.cp, c.x, pack_weights(w, c.cp.w, false), bias, c.y, c.out);
}

} // namespace
} // namespace detail

template <class T> void conv_forward_box(const_block_ref<T> x, dims const& in_extent,
                                         const_tensor_ref<T> w, T const* bias, block_ref<T> y,
                                         box const& out_box, conv_params const& p) {
  detail::forward_impl("conv_forward_box", x, in_extent, w, bias, y, out_box, p);
}

template <class T> void conv_forward(const_tensor_ref<T> x, const_tensor_ref<T> w, T const* bias,
                                     tensor_ref<T> y, conv_params const& p) {
  char const* op = "conv_forward";
  auto expected = detail::conv_shape(op, x.shape, w.shape, p);
  detail::check_ref(op, "y", y);
  detail::require_shape(op, "y", y.shape, expected,
                        "(from x " + detail::fmt(x.shape) + " and w " + detail::fmt(w.shape) + ")");
  detail::forward_impl(op, const_block_ref<T>(x), detail::spatial_extent(x.shape), w, bias,
                       block_ref<T>(y), detail::spatial_box(expected), p);
}

template void conv_forward_box(const_block_ref<float>, dims const&, const_tensor_ref<float>,
                               float const*, block_ref<float>, box const&, conv_params const&);
template void conv_forward_box(const_block_ref<double>, dims const&, const_tensor_ref<double>,
                               double const*, block_ref<double>, box const&, conv_params const&);
template void conv_forward(const_tensor_ref<float>, const_tensor_ref<float>, float const*,
                           tensor_ref<float>, conv_params const&);
template void conv_forward(const_tensor_ref<double>, const_tensor_ref<double>, double const*,
                           tensor_ref<double>, conv_params const&);

} // namespace halox::ops
