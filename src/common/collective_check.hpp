#pragma once
// Turns per-rank validation into an agreement: either every rank proceeds or every rank throws.
// In src/common (the bottom layer) because plans and executors both need it.

#include <halox/error.hpp>

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace halox::detail {

/// Runs `validate` locally, then one MPI_Allreduce over `comm` combines "did anyone fail" with a
/// hash of the description (computed by `hash` only when validation passed). If any rank failed,
/// that rank rethrows its own error and the others throw a matching error saying which rank
/// rejected its input; if the hashes differ every rank throws `inconsistent_ranks` naming `what`.
/// Never hangs as long as every rank calls it. When `describe` is given, a mismatch costs two
/// more broadcasts and the error says what differs: the fields of the description ("name=value"
/// items separated by "; ") that differ between rank 0 and the lowest rank that disagrees with it,
/// with both values.
void collective_check(MPI_Comm comm, std::string const& what, std::function<void()> const& validate,
                      std::function<std::uint64_t()> const& hash,
                      std::function<std::string()> const& describe = {});

/// The items of two "name=value; name=value" descriptions that differ, as
/// "name: A here, B there; ..." (pure; exposed for tests).
[[nodiscard]] std::string describe_difference(std::string const& a, std::string const& b,
                                              std::string const& a_name, std::string const& b_name);

} // namespace halox::detail
