#pragma once
// Splitting each batch's samples and each split spatial dimension over the ranks by their speed
// (--balance): fixed weights, or weights measured while training. A rank on a slower core (a
// shared or throttled virtual CPU, an older node) otherwise holds every step back to its pace.
#include <halox/box.hpp>
#include <halox/grid.hpp>

#include <string>
#include <vector>

namespace trainer {

/// Splits `batch` samples over ranks in proportion to `weight` (one positive entry per rank):
/// a rank whose share would be below one sample gets one, the shares are rounded down and the
/// samples left go by largest remainder (ties to the lower rank), so every rank computes the
/// same split. Empty `weight`, or fewer samples than ranks:
/// empty (halox's balanced blocks). `out`'s storage is reused.
void split_by_weight(halox::index_t batch, std::vector<double> const& weight,
                     std::vector<halox::index_t>& out);

/// The block sizes of dimension `d` (of extent `extent`) over `grid` when rank r weighs
/// `weight[r]`: a part along d weighs what its ranks weigh together, and gets its share of the
/// extent by `split_by_weight`. Empty `weight`, or fewer elements than parts: empty (balanced
/// blocks).
[[nodiscard]] std::vector<halox::index_t> weighted_blocks(halox::process_grid const& grid, int d,
                                                          halox::index_t extent,
                                                          std::vector<double> const& weight);

/// Chooses the rank weights. Fixed weights never change; measured ones (`auto`) start even and
/// are revised from windows of steps. Each rank reports its busy time per step (compute and
/// data loading, not waiting), the part of it spent in the layers split over the ranks, and its
/// sample count: that part scales with the rank's share (its samples, and its rows where space
/// is split, follow the same weights), the rest does not (data loading, the loss). The split that
/// would end every rank's busy time together is taken when it shortens the slowest rank's by more
/// than `min_gain` in two windows in a row. The inputs are the same on every rank (summed over the
/// ranks), so every rank takes the same decisions.
class balancer {
public:
  /// `spec`: "off", "auto", or comma-separated positive weights, one per rank. Throws
  /// `halox::error` naming the value and the fix.
  balancer(std::string const& spec, int ranks);

  /// Whether the steps report their busy times (`auto`).
  [[nodiscard]] bool measures() const noexcept { return measured_; }
  /// The split of a batch of `batch` samples into `out` (its storage reused; empty: balanced
  /// blocks).
  void split(halox::index_t batch, std::vector<halox::index_t>& out) const;
  /// A full batch ended on a network built with the current weights: rank r was busy `busy[r]`
  /// seconds, `split_busy[r]` of them in the layers split over the ranks, and held `samples[r]`
  /// of the batch's samples in the FC head. Returns true when the weights changed.
  bool step(std::vector<double> const& busy, std::vector<double> const& split_busy,
            std::vector<halox::index_t> const& samples);
  /// The weights in use (empty: even).
  [[nodiscard]] std::vector<double> const& weights() const noexcept { return weight_; }
  /// What the last change was based on, for the log.
  [[nodiscard]] std::string const& reason() const noexcept { return reason_; }

  /// Steps of a newly chosen split that are not measured (plan building, kernel generation).
  static constexpr int warm_up = 3;
  /// Steps per measurement window: at least `window`, and at least `window_s` seconds of rank
  /// 0's busy time (a host's scheduling noise lasts milliseconds: short steps need more of
  /// them), at most `max_window`.
  static constexpr int window = 10;
  static constexpr double window_s = 0.025;
  static constexpr int max_window = 128;
  /// Smallest predicted shortening of the slowest rank's busy time worth a new split (each
  /// new split builds a network: about 0.1-0.2 s for the shipped models).
  static constexpr double min_gain = 0.04;
  /// Windows during which a split's measured time, not the prediction, decides a return to it
  /// (speeds drift: a core slow a minute ago may not be now).
  static constexpr long memory = 50;

private:
  int ranks_;
  bool measured_ = false;
  std::vector<double> weight_;
  int skip_ = warm_up, seen_ = 0;
  double elapsed_ = 0; // rank 0's busy time in the current window
  // The window's steps, rank fastest: busy time outside and inside the sample-split layers.
  std::vector<double> busy_, split_;
  std::vector<double> fixed_, speed_, want_, scratch_; // per rank, reused between windows
  std::vector<halox::index_t> next_;                   // the split this window's measurements give
  std::vector<halox::index_t> proposed_; // the one the previous window gave, if worth it
  struct tried {                         // a split's slowest busy time, and when measured
    std::vector<halox::index_t> split;
    double slowest;
    long window;
  };
  std::vector<tried> tried_;
  long windows_ = 0;
  std::string reason_;
};

} // namespace trainer
