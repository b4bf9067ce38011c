#pragma once
// Helpers of the tests of single backends (ucx, cma): whether this build offers a backend, and
// periodic 2-D tensors whose messages have several strided regions, filled with values that
// differ per rank, per cell and per fill.

#include "support/mpi_helpers.hpp"

#include <halox/halox.hpp>

#include <algorithm>
#include <vector>

namespace halox::test {

/// True when `b` is one of this build's host backends.
inline bool offered(backend b) {
  auto const v = host_backends();
  return std::find(v.begin(), v.end(), b) != v.end();
}

/// The most square 2-D grid of `p` processes.
inline std::vector<int> near_square(int p) {
  int a = 1;
  for (int k = 1; k * k <= p; ++k)
    if (p % k == 0) a = k;
  return {a, p / a};
}

/// A 2-D tensor on a near-square grid of MPI_COMM_WORLD, halos of width `halo`, periodic in both
/// dimensions.
inline tensor_desc periodic_2d_tensor(dtype type, std::vector<index_t> shape, index_t halo) {
  process_grid g(MPI_COMM_WORLD, near_square(world_size()));
  return tensor_desc(g, shape, type,
                     {dim_options::halo(halo, true), dim_options::halo(halo, true)});
}

/// The local buffer of `t` with a value per rank, cell and `salt`.
template <class T> std::vector<T> numbered(tensor_desc const& t, int salt) {
  std::vector<T> x(t.local_elements());
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<T>((world_rank() + 1) * 1000 + salt * 100000 + static_cast<int>(i % 997));
  return x;
}

/// A 37x29 double matrix moved from rows to columns over MPI_COMM_WORLD with `b` and with
/// mpi_pack, plans of `ctx`: the results agree, and `b`'s inverse brings the rows back. Each
/// rank's message is a strided block on the sending side and a contiguous one on the receiving
/// side.
inline void expect_transpose_matches_mpi_pack(context const& ctx, backend b) {
  int const n = world_size();
  process_grid rows(MPI_COMM_WORLD, {n, 1}), cols(MPI_COMM_WORLD, {1, n});
  tensor_desc const a(rows, {37, 29}, dtype::float64), c(cols, {37, 29}, dtype::float64);
  redistribute_options ro, rr;
  ro.method = b;
  rr.method = backend::mpi_pack;
  redistribute_plan rp(ctx, a, c, ro), rpr(ctx, a, c, rr);
  auto src = numbered<double>(a, 3);
  std::vector<double> dst(c.local_elements(), -1.0), dstr = dst;
  rp.execute(tensor_view(a, src), tensor_view(c, dst));
  rpr.execute(tensor_view(a, src), tensor_view(c, dstr));
  EXPECT_EQ(dst, dstr) << to_string(b);
  std::vector<double> back(a.local_elements(), -2.0);
  rp.execute_inverse(tensor_view(c, dst), tensor_view(a, back));
  EXPECT_EQ(back, src) << to_string(b) << " inverse";
}

/// Expects asking for `b` (a backend missing from this build) to be an `unsupported` error on
/// every rank.
inline void expect_not_available(backend b) {
  tensor_desc const t = periodic_2d_tensor(dtype::float64, {8, 8}, 1);
  halo_options o;
  o.method = b;
  expect_error_everywhere([&] { halo_plan p(t, o); }, errc::unsupported, "not available");
}

} // namespace halox::test
