// The public face of the collective check that plans run on their arguments.
#include "common/agreement.hpp"
#include "model/view_check.hpp"

#include <halox/collective.hpp>
#include <halox/tensor_view.hpp>

namespace halox {

void check_collectively(MPI_Comm comm, std::string const& what,
                        std::function<void()> const& validate,
                        std::function<std::uint64_t()> const& description_hash,
                        std::function<std::string()> const& describe) {
  HALOX_REQUIRE(comm != MPI_COMM_NULL, errc::invalid_argument,
                what + ": check_collectively was given MPI_COMM_NULL; pass the communicator "
                       "every participating rank shares (a grid's comm())");
  detail::collective_check(
      comm, what, validate ? validate : [] {},
      [&] { return description_hash ? description_hash() : 0u; }, describe);
}

void validate_view(tensor_view const& v, tensor_desc const& expected, std::string const& what) {
  detail::check_view(v, expected, what);
}

} // namespace halox
