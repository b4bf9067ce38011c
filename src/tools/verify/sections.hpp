#pragma once
// The sections of halox-verify: each runs N random cases of one kind for one backend.

#include "common/strided_region.hpp"
#include <halox/backend.hpp>

#include <cstdint>
#include <vector>

namespace halox::verify {

/// Pass/fail counts (identical on every rank: each case's verdict is all-reduced).
struct totals {
  long passed = 0;
  long failed = 0;
};

/// One section: a name and the function that runs `cases` random cases with backend `b`.
struct section {
  char const* name;
  totals (*run)(backend b, std::uint64_t seed, long cases, index_t max_elements, bool quiet);
};

/// All sections, in the order they run.
[[nodiscard]] std::vector<section> const& sections();

/// Halo exchange: forward and reverse, each a check.
totals run_halo_section(backend b, std::uint64_t seed, long cases, index_t max_elements,
                        bool quiet);

/// Redistribution: forward (every destination cell) and round trip, each a check.
totals run_redistribute_section(backend b, std::uint64_t seed, long cases, index_t max_elements,
                                bool quiet);

} // namespace halox::verify
