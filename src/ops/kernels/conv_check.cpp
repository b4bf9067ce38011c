// The checks every provider's convolution on boxes starts with (see conv_common.hpp).
#include "ops/kernels/conv_common.hpp"

#include <halox/error.hpp>

#include <string>

namespace halox::ops::detail {
namespace {

constexpr auto bad = errc::invalid_argument;

void require_same_batch(char const* op, char const* a, dims const& sa, char const* b,
                        dims const& sb) {
  HALOX_REQUIRE(sa[0] == sb[0], bad,
                std::string(op) + ": " + a + " " + fmt(sa) + " has batch " + std::to_string(sa[0]) +
                    " but " + b + " " + fmt(sb) + " has " + std::to_string(sb[0]));
}

// `name` must have the Cout of `wname` (shape `ws`); the message is built only on failure.
void require_channels(char const* op, char const* name, dims const& shape, index_t expected,
                      char const* wname, dims const& ws) {
  HALOX_REQUIRE(shape[1] == expected, bad,
                std::string(op) + ": " + name + " " + fmt(shape) + " has " +
                    std::to_string(shape[1]) + " channels; expected " + std::to_string(expected) +
                    " (Cout of " + wname + " " + fmt(ws) + ")");
}

// The output box of a forward or backward-weights problem: inside the layer's output, covered
// by `out` (y or dy, named `out_name`), and its input footprint covered by x.
template <class T, class O> box3 check_out_box(char const* op, box const& out_box, int nsp,
                                               conv_problem const& cp, char const* out_name,
                                               block3<O> const& out, block3<T const> const& x) {
  box3 const ob = to_box3(op, "out_box", out_box, nsp);
  require_inside(op, "out_box", ob, cp.w, false);
  require_covers(op, out_name, out, ob, nsp, "out_box");
  require_covers(op, "x", x, input_footprint(cp.w, ob), nsp, "the input footprint of out_box");
  return ob;
}

} // namespace

template <class T>
conv_forward_check<T> check_conv_forward(char const* op, const_block_ref<T> const& x,
                                         dims const& in_extent, const_tensor_ref<T> const& w,
                                         block_ref<T> const& y, box const& out_box,
                                         conv_params const& p) {
  conv_forward_check<T> c;
  c.nsp = spatial_dims(op, "x", x.ref.rank());
  c.x = to_block3(op, "x", x, c.nsp);
  c.y = to_block3(op, "y", y, c.nsp);
  c.cp = make_conv_problem(op, c.nsp, in_extent, c.x.c, w, p);
  require_channels(op, "y", y.ref.shape, c.cp.cout, "w", w.shape);
  require_same_batch(op, "y", y.ref.shape, "x", x.ref.shape);
  c.out = check_out_box(op, out_box, c.nsp, c.cp, "y", c.y, c.x);
  return c;
}

template <class T> conv_backward_data_check<T>
check_conv_backward_data(char const* op, const_block_ref<T> const& dy, dims const& in_extent,
                         const_tensor_ref<T> const& w, block_ref<T> const& dx, box const& in_box,
                         conv_params const& p) {
  conv_backward_data_check<T> c;
  c.nsp = spatial_dims(op, "dx", dx.ref.rank());
  c.dx = to_block3(op, "dx", dx, c.nsp);
  c.dy = to_block3(op, "dy", dy, c.nsp);
  c.cp = make_conv_problem(op, c.nsp, in_extent, c.dx.c, w, p);
  require_channels(op, "dy", dy.ref.shape, c.cp.cout, "w", w.shape);
  require_same_batch(op, "dy", dy.ref.shape, "dx", dx.ref.shape);
  c.in = to_box3(op, "in_box", in_box, c.nsp);
  require_inside(op, "in_box", c.in, c.cp.w, true);
  require_covers(op, "dx", c.dx, c.in, c.nsp, "in_box");
  c.out_footprint = output_footprint(c.cp.w, c.in);
  require_covers(op, "dy", c.dy, c.out_footprint, c.nsp, "the output footprint of in_box");
  return c;
}

template <class T> conv_backward_weights_check<T>
check_conv_backward_weights(char const* op, const_block_ref<T> const& x, dims const& in_extent,
                            const_block_ref<T> const& dy, tensor_ref<T> const& dw,
                            box const& out_box, conv_params const& p) {
  conv_backward_weights_check<T> c;
  c.nsp = spatial_dims(op, "x", x.ref.rank());
  c.x = to_block3(op, "x", x, c.nsp);
  c.dy = to_block3(op, "dy", dy, c.nsp);
  c.cp = make_conv_problem(op, c.nsp, in_extent, c.x.c, dw, p);
  require_channels(op, "dy", dy.ref.shape, c.cp.cout, "dw", dw.shape);
  require_same_batch(op, "dy", dy.ref.shape, "x", x.ref.shape);
  c.out = check_out_box(op, out_box, c.nsp, c.cp, "dy", c.dy, c.x);
  return c;
}

#define HALOX_CONV_CHECKS(T)                                                                       \
  template conv_forward_check<T> check_conv_forward(                                               \
      char const*, const_block_ref<T> const&, dims const&, const_tensor_ref<T> const&,             \
      block_ref<T> const&, box const&, conv_params const&);                                        \
  template conv_backward_data_check<T> check_conv_backward_data(                                   \
      char const*, const_block_ref<T> const&, dims const&, const_tensor_ref<T> const&,             \
      block_ref<T> const&, box const&, conv_params const&);                                        \
  template conv_backward_weights_check<T> check_conv_backward_weights(                             \
      char const*, const_block_ref<T> const&, dims const&, const_block_ref<T> const&,              \
      tensor_ref<T> const&, box const&, conv_params const&);
HALOX_CONV_CHECKS(float)
HALOX_CONV_CHECKS(double)
#undef HALOX_CONV_CHECKS

} // namespace halox::ops::detail
