#pragma once
// What the fast providers measured, remembered for the process and optionally on disk.
//
// A provider measures its candidates (oneDNN layouts, cuDNN algorithms) the first time it meets
// a problem shape and keeps the winner here under a key that spells the shape out (problem
// kind, dimensions, strides of the caller's views, thread count). The core's plan cache
// (src/tune) is internal to the core and keyed by communication schedules, so the operators keep
// this one of their own. When the environment variable HALOX_OPS_PLAN_CACHE names a file, it is
// read at the first lookup and every new measurement is appended to it, one line per key:
//
//   <provider> <key> -> <choice> <candidate>=<seconds|unavailable> ...
//
// A later line for the same key wins; unreadable lines are ignored.

#include <istream>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace halox::ops::detail {

/// One remembered measurement.
struct measured_choice {
  std::string choice;                                ///< winning candidate's name
  std::vector<std::pair<std::string, double>> costs; ///< seconds per candidate (< 0: unavailable)
  bool from_file = false;                            ///< read from HALOX_OPS_PLAN_CACHE
};

/// The remembered choice for `key` of `provider`, or false.
bool find_choice(std::string const& provider, std::string const& key, measured_choice& out);
/// Remembers a choice (and appends it to the cache file when one is configured).
void store_choice(std::string const& provider, std::string const& key, measured_choice const& c);
/// A cost meaning: not measured, since the candidate's scratch is much larger than its operands
/// where another's is not.
inline constexpr double padded_cost = -2.0;

/// Reads cache lines from `in` into `out` ("<provider> <key>" -> choice); lines that do not
/// parse are skipped (the file is only a hint).
void read_choice_lines(std::istream& in, std::map<std::string, measured_choice>& out);

/// "name=1.23 ms" list of the costs, the chosen one marked with '*'.
std::string format_costs(measured_choice const& c);

} // namespace halox::ops::detail
