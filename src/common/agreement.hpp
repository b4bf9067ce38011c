#pragma once
// Agreement between ranks without hangs: the collective check (either every rank proceeds or
// every rank throws) and the bounded collectives plan construction is made of (each completes
// within the plan's timeout or throws errc::timeout). In src/common, the bottom layer: the
// vocabulary, the executors, the plans and the tuner all use them.

#include <halox/error.hpp>

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

namespace halox::detail {

/// The clock of the watchdog's deadlines.
using clock_type = std::chrono::steady_clock;

/// The time point `seconds` from now.
inline clock_type::time_point deadline_after(double seconds) {
  return clock_type::now() +
         std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
}

/// Waits for `req` for at most `timeout` seconds (0: unbounded, a plain MPI_Wait); on expiry
/// throws `halox::error` (errc::timeout) with `what()` + " did not complete". For the collective
/// rounds of plan construction (autotuning), which post nonblocking collectives.
void wait_bounded(MPI_Request& req, double timeout, char const* what);
/// MPI_Allreduce as a nonblocking all-reduce completed by `wait_bounded` (`in` may be
/// MPI_IN_PLACE).
void allreduce_bounded(void const* in, void* out, int n, MPI_Datatype type, MPI_Op op,
                       MPI_Comm comm, double timeout, char const* what);

/// Rank `root`'s `text` on every rank of `comm` (its length, then its characters), each broadcast
/// completed by `wait_bounded`.
[[nodiscard]] std::string broadcast_text(std::string const& text, int root, MPI_Comm comm,
                                         double timeout, char const* what);
/// The lowest rank of `comm` whose `problem` is not empty, and that problem, on every rank
/// ({-1, ""} when no rank has one): one bounded all-reduce, plus `broadcast_text` when a rank
/// has a problem. For "every rank fails with the first failing rank's reason".
[[nodiscard]] std::pair<int, std::string> lowest_problem(std::string const& problem, MPI_Comm comm,
                                                         double timeout, char const* what);

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
