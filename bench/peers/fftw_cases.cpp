// FFTW-MPI's distributed transpose on halox-bench's transpose case (cases.hpp: transpose_of):
//
//   redist/transpose_f64_4096/rows_to_cols/fftw_transpose
//       fftw_mpi_plan_many_transpose of the n x n double matrix (howmany 1, FFTW's default
//       blocks), out of place, planned with FFTW_MEASURE | FFTW_MPI_TRANSPOSED_OUT
//
// FFTW_MPI_TRANSPOSED_OUT leaves the output as n x local_n1, row-major: the rank's block of
// columns of the original matrix, which is exactly the destination layout of halox's
// (P,1) -> (1,P) redistribution. Without it FFTW would also transpose each local block, work
// halox's twin does not do. FFTW's blocks are ceil(n / P) rows (columns), halox's balanced
// blocks give the first n % P parts one more: the bytes are the same when P divides n.
// FFTW_MEASURE times candidate algorithms while planning, overwriting both arrays: the plan is
// built before the check fills the input and before anything is timed. The input is not
// declared destroyable (no FFTW_DESTROY_INPUT), as halox's twin leaves its source intact.
#include "peers/peer.hpp"

#include <fftw3-mpi.h>

#include <stdexcept>
#include <string>

namespace halox::bench::peers {

namespace {

struct transpose {
  fftw_plan plan = nullptr;
  double* in = nullptr;
  double* out = nullptr;
  ptrdiff_t n = 0, local_n0 = 0, start0 = 0, local_n1 = 0, start1 = 0;
  transpose() = default;
  transpose(transpose const&) = delete;
  transpose& operator=(transpose const&) = delete;
  ~transpose() {
    if (plan) fftw_destroy_plan(plan);
    fftw_free(in);
    fftw_free(out);
  }
};

constexpr unsigned planner_flags = FFTW_MEASURE | FFTW_MPI_TRANSPOSED_OUT;

peer_op make_transpose(transpose_case const& c) {
  auto t = std::make_shared<transpose>();
  t->n = static_cast<ptrdiff_t>(c.n);
  ptrdiff_t const alloc = fftw_mpi_local_size_2d_transposed(
      t->n, t->n, MPI_COMM_WORLD, &t->local_n0, &t->start0, &t->local_n1, &t->start1);
  std::size_t const count = static_cast<std::size_t>(alloc > 0 ? alloc : 1);
  t->in = fftw_alloc_real(count);
  t->out = fftw_alloc_real(count);
  if (!t->in || !t->out)
    throw std::runtime_error("fftw_alloc_real of " + std::to_string(count) + " doubles failed");
  for (std::size_t i = 0; i < count; ++i) t->in[i] = t->out[i] = 0;
  t->plan =
      fftw_mpi_plan_many_transpose(t->n, t->n, 1, FFTW_MPI_DEFAULT_BLOCK, FFTW_MPI_DEFAULT_BLOCK,
                                   t->in, t->out, MPI_COMM_WORLD, planner_flags);
  if (!t->plan)
    throw std::runtime_error("fftw_mpi_plan_many_transpose(" + std::to_string(t->n) + ", " +
                             std::to_string(t->n) + ") returned no plan");
  peer_op p;
  p.run = [t] { fftw_execute(t->plan); };
  p.verify = [t] {
    // Row-major input rows [start0, start0 + local_n0) of A(i, j) = i * n + j.
    for (ptrdiff_t i = 0; i < t->local_n0; ++i)
      for (ptrdiff_t j = 0; j < t->n; ++j)
        t->in[i * t->n + j] = static_cast<double>((t->start0 + i) * t->n + j);
    for (ptrdiff_t i = 0; i < t->n * t->local_n1; ++i) t->out[i] = -1;
    fftw_execute(t->plan);
    // Output: n x local_n1, row-major, columns [start1, start1 + local_n1) of A.
    long long wrong = 0;
    std::string first;
    for (ptrdiff_t i = 0; i < t->n; ++i)
      for (ptrdiff_t j = 0; j < t->local_n1; ++j) {
        double const want = static_cast<double>(i * t->n + t->start1 + j);
        double const got = t->out[i * t->local_n1 + j];
        if (got != want && wrong++ == 0)
          first = "element (" + std::to_string(i) + ", " + std::to_string(t->start1 + j) +
                  ") holds " + std::to_string(got) + ", expected " + std::to_string(want);
      }
    return wrong ? std::to_string(wrong) + " wrong value(s); first: " + first : std::string();
  };
  p.label = "FFTW_MEASURE|FFTW_MPI_TRANSPOSED_OUT";
  p.keep = t;
  return p;
}

} // namespace

void register_fftw_cases() {
  if (!has_redistribute()) return; // no halox twin to compare with
  auto const c = transpose_of();
  register_peer(transpose_spec(), "fftw_transpose", [c] { return make_transpose(c); });
}

} // namespace halox::bench::peers
