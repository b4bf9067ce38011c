// conv_block: halox's distributed CNN operators (halox::ops) used directly from C++.
//
// Shows: one convolution -> batch norm -> ReLU block, forward and backward, in float64, on an
// NCHW tensor whose height and width are split over the ranks. Each operator is built once
// from a tensor_desc; the convolution derives the halos it needs (input_desc) and the layout
// of its output (output_desc), which the batch norm and the ReLU then take. Weights and
// parameters are replicated; their gradients come back summed over the ranks. Every rank also
// runs the serial reference operators on the whole tensor and compares its own block and the
// gradients with them; the program exits with status 1 beyond a 1e-12 relative tolerance.
//
// Run: mpiexec -n 4 build/mpich/examples/gallery/halox-conv-block
#include <halox/halox.hpp>
#include <halox/ops/distributed.hpp>
#include <halox/ops/ops.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace ops = halox::ops;
using halox::index_t;

namespace {

index_t const N = 2, Cin = 3, Cout = 4, H = 12, W = 10;

// Deterministic inputs: any smooth function of the global position will do.
double input(index_t n, index_t c, index_t h, index_t w) {
  return std::sin(0.7 * h + 0.3 * w + c) + 0.1 * n;
}
double grad_out(index_t n, index_t c, index_t h, index_t w) {
  return std::cos(0.5 * h - 0.2 * w + 0.4 * c + n);
}

// Largest |distributed - serial| over this rank's owned block of `v`, against the whole serial
// tensor `ref` (row-major [N, C, H, W]).
double block_error(halox::tensor_view const& v, std::vector<double> const& ref) {
  halox::tensor_desc const& d = *v.desc;
  auto const* p = static_cast<double const*>(v.data);
  halox::box const b = d.owned_box();
  index_t const C = d.shape()[1];
  double err = 0;
  for (index_t n = b.lo[0]; n < b.hi[0]; ++n)
    for (index_t c = 0; c < C; ++c)
      for (index_t h = b.lo[2]; h < b.hi[2]; ++h)
        for (index_t w = b.lo[3]; w < b.hi[3]; ++w)
          err = std::max(
              err, std::abs(p[d.local_offset({n, c, h, w})] - ref[((n * C + c) * H + h) * W + w]));
  return err;
}

double largest(std::vector<double> const& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::abs(v));
  return m;
}

double array_error(std::vector<double> const& a, std::vector<double> const& b) {
  double err = 0;
  for (std::size_t i = 0; i < a.size(); ++i) err = std::max(err, std::abs(a[i] - b[i]));
  return err;
}

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    // Split H and W (never the channels); halox picks the grid for a 3x3 window's halos.
    std::vector<index_t> const xshape{N, Cin, H, W};
    auto grid = halox::process_grid::create(MPI_COMM_WORLD, {1, 1, 0, 0}, xshape, {0, 0, 1, 1},
                                            {0, 0, 1, 1});
    halox::tensor_desc x_desc(grid, xshape, halox::dtype::float64);

    ops::conv_params const same{{}, {1}, {1}, {}}; // 3x3, stride 1, zero padding 1
    ops::dist_conv<double> conv(x_desc, {Cout, Cin, 3, 3}, same);
    ops::dist_batch_norm<double> bn(conv.output_desc()); // statistics over the whole tensor
    ops::dist_relu<double> relu(conv.output_desc());

    // Replicated parameters: every rank passes the whole arrays.
    std::vector<double> w(Cout * Cin * 9), gamma(Cout), beta(Cout);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::sin(1.3 * i) / 6;
    for (index_t c = 0; c < Cout; ++c) gamma[c] = 1 + 0.2 * c, beta[c] = -0.1 * c;
    ops::const_tensor_ref<double> wref(w.data(), {Cout, Cin, 3, 3});

    // Local buffers: x with the halos the convolution needs; the others need only its blocks.
    auto const& in = conv.input_desc();
    auto const& od = conv.output_desc();
    std::vector<double> x(in.local_elements()), y(od.local_elements()), z(od.local_elements()),
        a(od.local_elements()), da(od.local_elements()), dz(od.local_elements()),
        dy(od.local_elements()), dx(x_desc.local_elements());
    halox::tensor_view xv(in, x), yv(od, y), zv(od, z), av(od, a), dav(od, da), dzv(od, dz),
        dyv(od, dy), dxv(x_desc, dx);
    halox::box const ob = in.owned_box(), yb = od.owned_box();
    for (index_t n = ob.lo[0]; n < ob.hi[0]; ++n)
      for (index_t c = 0; c < Cin; ++c)
        for (index_t h = ob.lo[2]; h < ob.hi[2]; ++h)
          for (index_t v = ob.lo[3]; v < ob.hi[3]; ++v)
            x[in.local_offset({n, c, h, v})] = input(n, c, h, v);
    for (index_t n = yb.lo[0]; n < yb.hi[0]; ++n) // the gradient arriving from the next layer
      for (index_t c = 0; c < Cout; ++c)
        for (index_t h = yb.lo[2]; h < yb.hi[2]; ++h)
          for (index_t v = yb.lo[3]; v < yb.hi[3]; ++v)
            da[od.local_offset({n, c, h, v})] = grad_out(n, c, h, v);

    // Forward: conv (exchanges x's halos), batch norm (gathers statistics), ReLU (local).
    std::vector<double> rmean(Cout, 0.0), rvar(Cout, 1.0);
    // No bias: the batch norm right after subtracts the mean, so a bias would have no effect
    // (and its gradient would be zero up to rounding).
    conv.forward(xv, wref, nullptr, yv);
    bn.forward(yv, zv, gamma.data(), beta.data(), rmean.data(), rvar.data());
    relu.forward(zv, av); // bn.forward_relu would do both in one pass; apart here to show both
    // Backward, in reverse order; dw, dgamma and dbeta come back summed over the ranks.
    std::vector<double> dw(w.size()), dgamma(Cout), dbeta(Cout);
    relu.backward(av, dav, dzv); // the ReLU's output stands in for its input
    bn.backward(yv, dzv, gamma.data(), dyv, dgamma.data(), dbeta.data());
    conv.backward(xv, dyv, wref, dxv, ops::tensor_ref<double>(dw.data(), {Cout, Cin, 3, 3}),
                  nullptr);

    // The serial reference, the same block on the whole tensor.
    using ref = ops::tensor_ref<double>;
    std::vector<double> X(N * Cin * H * W), Y(N * Cout * H * W), Z(Y.size()), A(Y.size()),
        dA(Y.size()), dZ(Y.size()), dY(Y.size()), dX(X.size()), dW(w.size()), dG(Cout), dBeta(Cout),
        rm(Cout, 0.0), rv(Cout, 1.0);
    ops::dims const xs{N, Cin, H, W}, ys{N, Cout, H, W};
    for (index_t n = 0; n < N; ++n)
      for (index_t c = 0; c < Cout; ++c)
        for (index_t h = 0; h < H; ++h)
          for (index_t v = 0; v < W; ++v) {
            if (c < Cin) X[((n * Cin + c) * H + h) * W + v] = input(n, c, h, v);
            dA[((n * Cout + c) * H + h) * W + v] = grad_out(n, c, h, v);
          }
    ops::conv_forward<double>(ref(X.data(), xs), wref, nullptr, ref(Y.data(), ys), same);
    auto const m = ops::batch_norm_forward<double>(ref(Y.data(), ys), gamma.data(), beta.data(),
                                                   rm.data(), rv.data(), ref(Z.data(), ys), {});
    ops::relu_forward<double>(ref(Z.data(), ys), ref(A.data(), ys));
    ops::relu_backward<double>(ref(A.data(), ys), ref(dA.data(), ys), ref(dZ.data(), ys));
    ops::batch_norm_backward<double>(ref(Y.data(), ys), ref(dZ.data(), ys), m, gamma.data(),
                                     ref(dY.data(), ys), dG.data(), dBeta.data(), {});
    ops::conv_backward_data<double>(ref(dY.data(), ys), wref, ref(dX.data(), xs), same);
    ops::conv_backward_weights<double>(ref(X.data(), xs), ref(dY.data(), ys),
                                       ref(dW.data(), {Cout, Cin, 3, 3}), same);

    // Compare: activations and dx on this rank's block; parameter gradients and running
    // statistics whole. Errors are relative to the largest reference value (at least 1).
    struct row {
      char const* name;
      double err, scale;
    } rows[] = {
        {"relu output", block_error(av, A), largest(A)},
        {"dx", block_error(dxv, dX), largest(dX)},
        {"dw", array_error(dw, dW), largest(dW)},
        {"dgamma", array_error(dgamma, dG), largest(dG)},
        {"dbeta", array_error(dbeta, dBeta), largest(dBeta)},
        {"running mean", array_error(rmean, rm), largest(rm)},
        {"running var", array_error(rvar, rv), largest(rv)},
    };
    bool ok = true;
    for (auto& r : rows) {
      double e = 0;
      MPI_Allreduce(&r.err, &e, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      r.err = e / std::max(1.0, r.scale);
      ok = ok && r.err <= 1e-12;
    }
    if (grid.rank() == 0) {
      std::printf("conv_block: x %lldx%lldx%lldx%lld float64 on a %dx%dx%dx%d grid; conv 3x3 "
                  "%lld->%lld, batch norm, ReLU\n",
                  static_cast<long long>(N), static_cast<long long>(Cin), static_cast<long long>(H),
                  static_cast<long long>(W), grid.dims()[0], grid.dims()[1], grid.dims()[2],
                  grid.dims()[3], static_cast<long long>(Cin), static_cast<long long>(Cout));
      for (auto const& r : rows) std::printf("  %-17s relative error %.1e\n", r.name, r.err);
      std::printf("  conv: %zu bytes sent per forward+backward on rank 0  %s\n", conv.bytes_sent(),
                  ok ? "(ok)" : "FAILED");
    }
    rc = ok ? 0 : 1;
  } catch (halox::error const& e) {
    std::fprintf(stderr, "%s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
