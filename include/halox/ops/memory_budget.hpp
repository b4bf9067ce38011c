#pragma once
/// \file memory_budget.hpp
/// A per-rank memory budget over the distributed operators a caller owns: what they hold
/// between calls and need during one, plus the caller's own buffers, fitted under a limit by
/// choosing which convolutions keep their reordered inputs, with one clear error on every rank
/// when even the leanest choice does not fit. See docs/dist_ops.md (Memory).

#include <halox/backend.hpp>
#include <halox/ops/provider.hpp>

#include <mpi.h>

#include <cstddef>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace halox::ops {

/// What `memory_budget::fit` decided and counted on the calling rank.
struct budget_fit {
  /// The budget, bytes per rank.
  std::size_t limit = 0;
  /// What this rank uses with the reorders `fit` keeps: the operators (held and call scratch,
  /// with each kept reorder at the size it keeps), the shared scratch and the caller's bytes.
  /// Reorders switched on by this fit are counted at their size although they are allocated
  /// only by the next forward call.
  std::size_t need = 0;
  /// What this rank would use keeping no reorder: the least the counted operators allow.
  std::size_t least = 0;
  /// Bytes of reordered inputs kept from forward to backward after the fit.
  std::size_t kept_reorders = 0;
  /// Bytes of reordered inputs that could be kept but are not, because they do not fit.
  std::size_t dropped_reorders = 0;
  /// Names of the operators that keep no reorder because of the budget, largest first.
  std::vector<std::string> dropped;
  /// Over every rank of the budget's communicator: the largest `need`, and the lowest rank that
  /// has it (the same on every rank).
  std::size_t most_need = 0;
  int most_rank = 0; ///< see `most_need`

  /// One line: "needs 84.2 MiB of 96.0 MiB (least 71.0 MiB); reorders kept 13.2 MiB, dropped
  /// 9.4 MiB (conv3, conv1); the most over the ranks 88.0 MiB on rank 1".
  [[nodiscard]] std::string describe() const;
};

/// A memory limit per rank for the distributed operators of one owner (a framework's network,
/// a training loop), in host or device memory.
///
/// The owner adds its operators (and anything else that reports a `memory_use`), runs one
/// forward and one backward so that the providers have sized their buffers, and calls `fit`
/// with the bytes of its own buffers (activations, parameters, gradients). `fit` keeps as many
/// bytes of reordered inputs as the budget leaves room for, largest first (a kept reorder
/// saves reordering x again in backward; results are bitwise equal either way), and switches
/// the others off, which frees them at once. When the operators, the shared scratch and the
/// caller's bytes exceed the limit on some rank even with no reorder kept, every rank throws
/// `halox::error` (`errc::out_of_memory`) naming that rank, the bytes it needs, what takes
/// them, and the fixes: a larger budget, more ranks splitting the tensors, or fewer buffers
/// held by the caller (recomputing activations in backward, as halox-train's `--max-memory`
/// does). Dropping kept reorders is all the operators can do on their own; what to recompute
/// is the owner's choice.
///
/// Kept reorders are host memory (the oneDNN provider's); a device budget counts the cuDNN
/// provider's buffers and plan buffers in device memory, and its `fit` only reports and checks.
///
/// Not thread-safe. The counted objects must outlive every call of the budget.
class memory_budget {
public:
  /// `bytes`: what may be used on this rank in memory `space` (usually the same on every rank;
  /// ranks on nodes of different memory may pass different limits); `comm`: the ranks
  /// that call `fit` together (every rank of the operators' grids, or a superset). `comm` is
  /// used, not duplicated: it must stay valid. Not collective; throws `halox::error` when
  /// `bytes` is 0 or `comm` is MPI_COMM_NULL.
  memory_budget(std::size_t bytes, MPI_Comm comm, memory_space space = memory_space::host);

  /// Counts operator `op` under `name` (`dist_conv`, `dist_pool`, `dist_batch_norm`,
  /// `dist_relu`, `dist_lrn`, or any type with `memory_use memory() const`; where it also has
  /// `keep_reorders(bool)`, `fit` chooses whether it keeps its reorders).
  template <class Op> void add(std::string name, Op& op) {
    std::function<void(bool)> keep;
    if constexpr (has_keep_reorders<Op>::value) keep = [&op](bool k) { op.keep_reorders(k); };
    add(
        std::move(name), [&op] { return op.memory(); }, std::move(keep));
  }
  /// Counts whatever `use` reports under `name`; `keep_reorders`, when given, switches its kept
  /// reorders on or off (as `dist_conv::keep_reorders`).
  void add(std::string name, std::function<memory_use()> use,
           std::function<void(bool)> keep_reorders = {});

  /// Chooses which counted operators keep their reorders so that everything fits, on each rank
  /// (the choice changes no result and no communication, so ranks may choose differently), and
  /// checks the limit on every rank. `caller_bytes`: what the owner holds itself on this rank
  /// in the budget's memory space. Collective over the communicator (two small all-reduces,
  /// and a broadcast of the message when something does not fit); throws `halox::error`
  /// (`errc::out_of_memory`) on every rank when some rank's `least` exceeds its limit (the
  /// message is that of the rank over by the most bytes); nothing is switched then.
  budget_fit fit(std::size_t caller_bytes = 0);

  /// The limit, bytes per rank.
  [[nodiscard]] std::size_t limit() const noexcept { return limit_; }
  /// The memory space the limit applies to.
  [[nodiscard]] memory_space space() const noexcept { return space_; }
  /// What the counted operators and the shared scratch use on this rank now, in the budget's
  /// memory space (no collective, nothing changed; the caller's bytes not included).
  [[nodiscard]] std::size_t used() const;
  /// A table, one line per counted operator: its name, held and call bytes in the budget's
  /// space, and its kept (or keepable) reorders; then the shared scratch and the total.
  [[nodiscard]] std::string describe() const;

private:
  template <class Op, class = void> struct has_keep_reorders : std::false_type {};
  template <class Op>
  struct has_keep_reorders<Op, std::void_t<decltype(std::declval<Op&>().keep_reorders(true))>>
      : std::true_type {};

  struct entry {
    std::string name;
    std::function<memory_use()> use;
    std::function<void(bool)> keep;
  };
  [[nodiscard]] std::size_t in_space(memory_use const& m) const noexcept;
  [[nodiscard]] std::size_t scratch() const noexcept;

  std::size_t limit_;
  MPI_Comm comm_;
  memory_space space_;
  std::vector<entry> entries_;
};

} // namespace halox::ops
