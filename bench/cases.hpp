#pragma once
// The scenario families of halox-bench; each registers its Google Benchmark entries.

namespace halox::bench {

/// Halo exchanges (halo_cases.cpp).
void register_halo_cases();
/// Redistributions (redist_cases.cpp); registers nothing when halox has no redistribute.hpp.
void register_redist_cases();

} // namespace halox::bench
