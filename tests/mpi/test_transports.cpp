// The backends built as a packing strategy over a transport (mpi_pack, mpi_persistent,
// mpi_pipeline, mpi_datatype, ucx, ucx_iov, cma): buffers that alternate between executions and
// buffers rewritten in place give what alltoallv (a collective executor of its own) gives,
// forward and reverse, and describe() names the two axes of the backend in use.
#include "support/backend_tests.hpp"

#include "exec/backend_table.hpp"

#include <halox/halox.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

namespace {

using namespace halox;
using halox::test::numbered;
using halox::test::offered;
using halox::test::periodic_2d_tensor;

constexpr backend composed[] = {
    backend::mpi_pack, backend::mpi_persistent, backend::mpi_pipeline, backend::mpi_datatype,
    backend::ucx,      backend::ucx_iov,        backend::cma};

void expect_alternating_buffers_match(context const& ctx, tensor_desc const& t, halo_plan& pr) {
  for (backend b : composed) {
    if (!offered(b)) continue;
    halo_options o;
    o.method = b;
    halo_plan p(ctx, t, o);
    ASSERT_EQ(p.selected_backend(), b);
    std::vector<double> a = numbered<double>(t, 1), c = numbered<double>(t, 2);
    for (int round = 0; round < 8; ++round) {
      std::vector<double>& x = round / 2 % 2 == 0 ? a : c;
      // New values in the same buffer.
      for (double& v : x) v += 0.5;
      std::vector<double> xr = x;
      p.execute(tensor_view(t, x));
      pr.execute(tensor_view(t, xr));
      EXPECT_EQ(x, xr) << to_string(b) << " round " << round;
      p.execute_reverse(tensor_view(t, x), reduce_op::sum);
      pr.execute_reverse(tensor_view(t, xr), reduce_op::sum);
      EXPECT_EQ(x, xr) << to_string(b) << " reverse, round " << round;
    }
  }
}

// Two tensors alternate as the buffers of one plan, A A B B A A ..., with new values each time: a
// transport that keeps what it learnt of the last buffers (cma keeps the peers' address lists)
// must notice every change, and keep working when nothing changed.
TEST(Transports, AlternatingBuffersMatchACollective) {
  context ctx(MPI_COMM_WORLD);
  int const n = halox::test::world_size();
  // Short rows on a near-square grid (runs of a few elements, packed on both sides by cma) and
  // long rows split by rows only (runs of 1.6 KiB: iov lists on both sides, and the rows'
  // halo-free faces contiguous, sent in place).
  process_grid rows(MPI_COMM_WORLD, {n, 1});
  std::vector<tensor_desc> const tensors = {
      periodic_2d_tensor(dtype::float64, {14, 9}, 2),
      tensor_desc(rows, {4 * n, 200}, dtype::float64,
                  {dim_options::halo(2, true), dim_options::halo(2, true)}),
      tensor_desc(rows, {3 * n, 300}, dtype::float64, {dim_options::halo(1, true), {}})};
  for (tensor_desc const& t : tensors) {
    halo_options ref;
    ref.method = backend::alltoallv;
    halo_plan pr(ctx, t, ref);
    expect_alternating_buffers_match(ctx, t, pr);
  }
}

TEST(Transports, DescribeNamesTheTransportAndThePacking) {
  tensor_desc const t = periodic_2d_tensor(dtype::float32, {10, 8}, 1);
  for (backend b : host_backends()) {
    halo_options o;
    o.method = b;
    halo_plan p(t, o);
    std::string const d = p.describe();
    std::string const axes = detail::backend_axes(b);
    ASSERT_FALSE(axes.empty()) << to_string(b);
    EXPECT_NE(d.find(axes), std::string::npos) << to_string(b) << ": " << d;
  }
}

} // namespace
