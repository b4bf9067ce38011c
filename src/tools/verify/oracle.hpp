#pragma once
// The correctness oracle shared by halox-verify and the MPI tests: random cases that every rank
// generates identically from a seed, buffers filled with a function of the global index, and a
// brute-force check of every cell against the serial definition. Uses the public API only.

#include <halox/halox.hpp>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace halox::verify {

/// One randomized halo-exchange case (all ranks build the same one from the same generator).
struct halo_case {
  std::vector<index_t> shape;
  std::vector<int> dims;
  std::vector<dim_options> options;
  std::vector<dtype> types; ///< one per tensor in the plan (several tensors, one round)
  std::vector<int> padding; ///< extra elements per row of the local buffer, per tensor
  bool fill = false;        ///< boundary_fill::constant
  reduce_op op = reduce_op::sum;
  /// One-line description for failure reports.
  [[nodiscard]] std::string str() const;
};

/// Draws a case for `nprocs` processes: 1-5 dimensions, uneven and empty blocks, widths 0,
/// small, or wider than a neighbour's block, periodicity, all dtypes, 1-3 tensors, padded rows.
/// At most `max_elements` global elements per tensor.
[[nodiscard]] halo_case random_halo_case(std::mt19937_64& rng, int nprocs,
                                         index_t max_elements = 1500);

/// Result of running one case on one rank (mismatch counts are local to the rank).
struct case_result {
  std::size_t checked = 0;
  std::size_t mismatches = 0;
  std::string first_error; ///< description of the first mismatch on this rank
};

/// Verdicts of one halo case.
struct halo_result {
  case_result forward; ///< every halo cell after two forward exchanges
  case_result reverse; ///< every owned cell after one reverse exchange (c.op)
};

/// Builds one plan for `c` with backend `b` over `comm` and runs it forward (twice: plans are
/// reused) and then in reverse. Forward: every halo cell must equal the owner's value at the
/// (periodically wrapped) global index, boundary cells the fill value or their old value.
/// Reverse: every owned cell must equal its own value combined with every halo copy of it on
/// every rank (brute force over all ranks' allocated boxes). Collective.
[[nodiscard]] halo_result run_halo_case(halo_case const& c, backend b, MPI_Comm comm);

/// Deterministic element bytes for (tensor id, rank, global index): used as owned values in
/// forward mode (any bit pattern) and, with `small`, as exactly-summable small integers.
void element_value(dtype t, std::uint64_t seed, bool small, std::byte* out);

/// Calls f(global index, local element offset) for every allocated cell of this rank.
void for_each_allocated(tensor_desc const& d, std::vector<index_t>& g,
                        std::function<void(std::vector<index_t> const&, index_t)> const& f);

} // namespace halox::verify
