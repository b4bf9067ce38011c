#pragma once
// What halox-train prints and logs: the header, a progress line every few steps, the epoch
// summaries with the time breakdown, the JSON log, and the comparison with another run's log.
#include "data.hpp"
#include "layers.hpp"
#include "model.hpp"
#include "options.hpp"
#include "tensor_util.hpp"

#include <mpi.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace trainer {

struct loss_sums;

/// One training step as seen by the calling rank.
struct step_record {
  long step = 0;           ///< 1-based global step
  int epoch = 0;           ///< 1-based epoch
  double loss = 0;         ///< mean cross-entropy over the batch
  double accuracy = 0;     ///< fraction of the batch classified right
  double images_per_s = 0; ///< batch size / step time
  double time = 0;         ///< wall time of the step
  phase_times phases;      ///< this rank's breakdown
  /// With --log-json, rank 0's: the peak resident memory's growth since before the
  /// parameters were made, and what the accounting predicts (bytes).
  std::size_t memory_peak = 0, memory_predicted = 0;
};

/// Sums over an epoch.
struct epoch_stats {
  double samples = 0, loss = 0, correct = 0, time = 0; ///< sample-weighted sums, wall time
  phase_times phases;                                  ///< this rank's breakdown
  long steps = 0;                                      ///< steps in the epoch
  /// Adds a step of `n` samples.
  void add(step_record const& r, double n) {
    samples += n;
    loss += r.loss * n;
    correct += r.accuracy * n;
    time += r.time;
    phases.add(r.phases);
    ++steps;
  }
};

/// Prints on rank 0 (or on every rank with --debug-print) and writes the JSON log.
class reporter {
public:
  reporter(options const& o, int rank, int size);
  /// Writes out whatever is still buffered.
  ~reporter();
  reporter(reporter const&) = delete;
  reporter& operator=(reporter const&) = delete;
  /// The run's description.
  void header(model_spec const& m, std::string const& data, long params, long steps,
              long steps_per_epoch, long first_step);
  /// Records a step; prints a progress line every --print-every steps, logs every step.
  void step(step_record const& r, long total_steps, double eta_s);
  /// Prints an epoch summary; collective (the breakdown is the maximum over the ranks).
  void epoch(int e, epoch_stats const& s, bool have_test, loss_sums const& test, MPI_Comm comm);
  /// Prints the --profile table: each layer's forward and backward time per step, the fastest
  /// and the slowest rank. Collective.
  void profile(layer_clock const& k, std::vector<std::string> const& kinds, MPI_Comm comm);
  /// Prints text as is.
  void text(std::string const& s);
  /// Prints text as is on rank 0 only, also with --debug-print: for long reports, which a
  /// launcher forwarding several ranks' output could cut between lines of another rank.
  void text_root(std::string const& s);
  /// The --describe reports: into the --describe-file on rank 0 when one is named, else as
  /// `text`.
  void report(std::string const& s);
  /// As `report`, on rank 0 only (as `text_root`).
  void report_root(std::string const& s);
  /// At the end, with a --describe-file: the line naming it, so that a run's last lines are its
  /// result and where the report went.
  void report_written();
  /// Called between steps: writes out the lines and log records held back by the rate limit
  /// (see `flush_interval_s`) once the interval has passed. Costs a clock read otherwise.
  void tick();
  /// Writes out everything buffered now (before an abort, at the end).
  void flush();

  /// Output is written out at most once per this many seconds while steps are fast; a line
  /// after a quiet spell goes out at once (with --debug-print, every line at once). Why: the MPI
  /// library may leave stdout unbuffered (MPICH does: two writes per line), and each write wakes
  /// the launcher's forwarding processes, which on a machine with as many ranks as cores run on a
  /// core a rank needs. With 2-step epochs (a short benchmark) rank 0 spent 126 us more than rank 1
  /// on each epoch summary, and rank 1 waited for it in the next step's first halo exchange.
  static constexpr double flush_interval_s = 1.0;
  /// Compares this run's losses with those in a --log-json file (rank 0 reads it); returns the
  /// exit status, the same on every rank. Collective.
  int compare(std::string const& path, double rtol, MPI_Comm comm);

private:
  void line(std::string const& s);
  void line_of(int rank, std::string const& s); // a line about `rank` (its prefix, --debug-print)
  void wrote(); // after buffering output: flushes now, or marks it pending
  options o_;
  int rank_, size_;
  bool prints_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> json_{nullptr, &std::fclose};
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> describe_{nullptr, &std::fclose};
  std::vector<std::pair<long, double>> losses_;
  std::string text_;           // lines not yet written to stdout
  double last_flush_ = -1e300; // MPI_Wtime of the last write-out
  bool pending_ = false;       // output buffered since then
};

} // namespace trainer
