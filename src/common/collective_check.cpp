#include "common/collective_check.hpp"

#include <exception>

namespace halox::detail {

void collective_check(MPI_Comm comm, std::string const& what, std::function<void()> const& validate,
                      std::function<std::uint64_t()> const& hash) {
  std::exception_ptr local;
  std::uint64_t h = 0;
  try {
    validate();
    h = hash();
  } catch (...) {
    local = std::current_exception();
  }
  int rank = 0;
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  // in[0]: highest failing rank + 1 (0: none); in[1], in[2]: h and ~h.
  // MAX of h and of ~h equal to (h, ~h) on every rank iff all hashes are equal.
  unsigned long long in[3] = {local ? static_cast<unsigned long long>(rank) + 1ull : 0ull,
                              static_cast<unsigned long long>(h),
                              ~static_cast<unsigned long long>(h)};
  unsigned long long out[3] = {0, 0, 0};
  HALOX_MPI_CHECK(MPI_Allreduce(in, out, 3, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm));
  if (local) std::rethrow_exception(local);
  if (out[0] != 0)
    throw error(errc::invalid_argument,
                what + ": rank " + std::to_string(out[0] - 1) +
                    " (of this communicator) rejected its input; see the error printed there and "
                    "fix the input on that rank");
  if (out[1] != in[1] || out[2] != in[2])
    throw error(errc::inconsistent_ranks,
                what + ": ranks passed different global descriptions (hash " + std::to_string(h) +
                    " here); every rank must pass the same shape, dtype, grid, halos, "
                    "periodicity and part sizes");
}

} // namespace halox::detail
