#pragma once
// Reading another run's --log-json file (for --compare-log): the loss of every step it holds.
#include <istream>
#include <map>

namespace trainer {

/// The (step, loss) pairs of a JSON-lines training log. A line without a readable `"step": `
/// and `"loss": ` (a damaged or foreign file) is skipped; a later line for a step wins.
[[nodiscard]] std::map<long, double> read_log_losses(std::istream& in);

} // namespace trainer
