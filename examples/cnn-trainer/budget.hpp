#pragma once
// The memory budget of a training run (--max-memory) and the plans that fit it: which
// convolutions keep their reordered inputs and which segments recompute their forward in
// backward. A plan is chosen with the same arithmetic on every rank and agreed collectively,
// so every rank runs the same schedule (recomputation makes collective calls).
#include "network.hpp"
#include "options.hpp"

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

namespace trainer {

/// The process's resident memory now and its high-water mark (Linux /proc/self/status), bytes;
/// zeros where that cannot be read.
struct process_memory {
  std::size_t rss = 0, peak = 0;
  /// The growth of both since `base` was read (0 where they shrank).
  [[nodiscard]] process_memory since(process_memory const& base) const noexcept {
    return {rss > base.rss ? rss - base.rss : 0, peak > base.rss ? peak - base.rss : 0};
  }
};
[[nodiscard]] process_memory read_process_memory();
/// Resets the high-water mark to the resident memory now (Linux: /proc/self/clear_refs), so that
/// a later peak measures what came after; false where the system does not allow it.
bool reset_peak_memory();

/// "12.34 MiB".
[[nodiscard]] std::string mib(std::size_t bytes);

/// Chooses memory plans for the options' budget. `fixed`: what every plan holds on this rank
/// (parameters, their gradients and momentum, the gradient sums' buffers).
template <class T> class memory_budget {
public:
  memory_budget(options const& o, std::size_t fixed, MPI_Comm world);
  /// The plan for the first step. Without a budget: what the options say (reorders kept unless
  /// --keep-reorders off, --segments as given). With one: the candidate of least arena bytes,
  /// since the operators' needs are known only after a step; collective then, and throws
  /// `halox::error` on every rank when even that cannot fit.
  [[nodiscard]] memory_plan initial(network<T> const& net) const;
  /// After a step: the first candidate that fits on every rank, in order of cost (reorders
  /// kept, then dropped; then 2, 3, ... segments). `grown`: the process's resident growth since
  /// before the parameters; what it holds beyond the accounting (code the kernels generated,
  /// library caches) is added to every candidate's need. Collective; throws `halox::error` on
  /// every rank, naming the bytes needed and a rank count that would fit, when none does.
  [[nodiscard]] memory_plan choose(network<T> const& net, std::size_t grown) const;
  /// One line: the plan, and with a budget what it predicts against it.
  [[nodiscard]] std::string describe(memory_plan const& p) const;

private:
  [[nodiscard]] std::vector<memory_plan> candidates(network<T> const& net) const;
  [[noreturn]] void none_fits(std::size_t need, int rank_needing) const;

  options const& o_;
  std::size_t fixed_;
  MPI_Comm world_;
  mutable std::size_t predicted_ = 0; // of the last plan chosen
  mutable std::size_t overhead_ = 0;  // measured beyond the accounting after the first step
};

} // namespace trainer
