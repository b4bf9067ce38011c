#pragma once
// A schedule's local copies (this rank's part of a move that needs no message), run on the host.
// Declared here, outside the backend folders, for the plans that run them without an executor (a
// redistribution whose every move is local); defined with the host packing in cpu/pack.cpp.

#include "exec/combine.hpp"
#include "plan/schedule.hpp"

#include <cstddef>

namespace halox::detail {

/// Runs the schedule's local copies (src -> dst, combining with `op`) through `scratch`, which
/// must hold `max_copy_bytes(s)` bytes (allocated once, at plan time).
void run_local_copies(schedule const& s, void* const* bufs, combine_op op, std::byte* scratch);
/// Largest local copy of the schedule, in bytes.
[[nodiscard]] std::size_t max_copy_bytes(schedule const& s);

} // namespace halox::detail
