#pragma once
/// \file collective.hpp
/// Collective argument checking for code built on halox (the operators use it): a local check
/// that every rank of a communicator agrees on, so a bad argument on one rank makes every rank
/// throw instead of leaving the others waiting in the next collective call.

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>

namespace halox {

/// Runs `validate` on this rank, then combines the outcome over `comm` in one collective call:
/// either every rank returns or every rank throws `halox::error`. A rank whose `validate` threw
/// rethrows its own error; the others throw `invalid_argument` naming the rank that failed.
/// When every rank passed, `description_hash` (if given) is compared across ranks and a mismatch
/// throws `inconsistent_ranks` on every rank: hash the replicated arguments (shapes, options)
/// that every rank must pass alike. `what` names the call in messages. When `describe` is given
/// too, it returns the same arguments as text, "name=value" items separated by "; ", and a
/// mismatch error names every item that differs, with both ranks' values.
///
/// Collective over `comm`: every rank must call it, in the same order as its other collectives.
void check_collectively(MPI_Comm comm, std::string const& what,
                        std::function<void()> const& validate,
                        std::function<std::uint64_t()> const& description_hash = {},
                        std::function<std::string()> const& describe = {});

} // namespace halox
