#pragma once
// Sums the layers' partial parameter gradients over the ranks while backward still runs.

#include "layers.hpp"

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

/// How the step's gradients are summed over the ranks (--grad-reduce).
enum class reduce_path {
  automatic, ///< shared memory when every rank runs on one node, else MPI
  shared,    ///< shared memory (every rank must run on one node)
  mpi        ///< MPI non-blocking all-reductions in buckets
};

/// The step's gradient all-reduction. Layers `add` their partial sums in backward order, the
/// same on every rank; `wait` ends the step's reduction. Two ways to sum:
///
/// - **MPI**, in buckets that start while backward runs (as PyTorch's DistributedDataParallel
///   does): each member is copied into the current bucket, and a bucket's non-blocking
///   all-reduce starts as soon as it holds `bucket_bytes`. `progress` between layers lets the
///   MPI library move the started ones; `wait` starts the last, partly filled buckets, waits for
///   all and copies the sums back into the members. Which size is best depends on the MPI
///   library (AlexNet on 2 ranks of one node): with MPICH over UCX, 16 KiB buckets started
///   during backward beat one 62 KiB bucket after it by 0.7-3 % of the step (each goes eagerly
///   through shared memory, and most are summed before backward ends); with Open MPI, whose
///   non-blocking collectives cost more per call, one bucket is 4 % faster. `auto_bucket` takes
///   that per library. (Timing the sizes in the first training steps was tried: a size reaches
///   its steady speed only after tens of steps, so short trials chose wrongly.)
/// - **Shared memory**, when every rank runs on one node: the members are copied into this
///   rank's slot of an MPI shared-memory window. At `wait`, on 2 ranks, each rank sums both
///   slots straight into its members (slot 0 + slot 1, so every rank gets the same bits); on
///   more, rank r sums part r of the values over every rank's slot (in rank order, so the sums
///   are the same whichever rank computes them), and each rank then reads every part's sums
///   into its members. Flags per rank (slot filled, part summed, sums read) order the steps;
///   no MPI call is made. Each bucket of the MPI path costs a non-blocking collective's set-up
///   and tests (about 3 us each with MPICH), and the last one's latency after backward: on
///   AlexNet (2 ranks, sample split) summing in shared memory makes the step 3-4 % shorter.
///   Summing everything on each of 2 ranks reads the same bytes as summing halves and copying
///   them back, with one synchronisation and one pass fewer; on more ranks each would read
///   every slot, so they split the work.
///
/// A few values in double travel beside the gradients (`side`: the step's loss sums), so that
/// one wait ends the step's communication; in shared memory they need no MPI call at all.
class grad_reducer {
public:
  /// `bucket_bytes` that asks for the library's default (see the class comment): 16 KiB
  /// under MPICH, else 0 (one bucket).
  static constexpr std::size_t auto_bucket = ~std::size_t(0);

  /// Sums over `comm` (duplicated: the reducer's messages never meet the caller's) members of
  /// MPI type `t` (`t_size` bytes each; at most `t_values` per step), of double (at most
  /// `f64_values`) and `side_values` doubles passed to `wait`. `bucket_bytes` (MPI path): 0 for one
  /// bucket per element type, started after backward; `auto_bucket`: the library's default. On one
  /// rank there is nothing to sum: `add` ignores the members. Collective over `comm`;
  /// `reduce_path::shared` on ranks of several nodes throws `halox::error` on every rank.
  grad_reducer(MPI_Comm comm, MPI_Datatype t, std::size_t t_size, std::size_t t_values,
               std::size_t f64_values, std::size_t side_values, std::size_t bucket_bytes,
               reduce_path path = reduce_path::automatic);
  grad_reducer(grad_reducer const&) = delete;
  grad_reducer& operator=(grad_reducer const&) = delete;
  /// Collective over the communicator (frees the shared window).
  ~grad_reducer();

  /// Lists a member: a partial sum this rank holds after its layer's backward.
  void add(grad_part const& g);
  /// Drives the all-reductions started since the last call (between layers). One test per
  /// newly started bucket: with MPICH over UCX a test costs 1-2 us, so testing after every
  /// layer cost more than the overlap gained; the test after a start is what moves that
  /// bucket's first messages (most MPIs progress only inside MPI calls). The time of that
  /// test is added to `seconds`; the calls that have nothing to test cost no clock reads.
  /// Nothing to do on the shared-memory path.
  void progress(double& seconds);
  /// Ends the step's reduction: the members hold the sums over the ranks, and so do the
  /// `side_values` doubles at `side` (this rank's values on entry).
  void wait(double* side);

  /// True when the sums are made in shared memory.
  [[nodiscard]] bool shared() const noexcept { return win_ != MPI_WIN_NULL; }
  /// One line for --describe: the path and the bucket size in use.
  [[nodiscard]] std::string describe() const;
  /// Bytes it holds on this rank: the packed values, or this rank's share of the shared window.
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

private:
  struct stream { // the members of one element type, packed one after another
    MPI_Datatype type = MPI_DATATYPE_NULL;
    std::size_t size = 0;         // bytes per value
    std::size_t total = 0;        // values per step at most
    std::vector<double> own;      // MPI path: the packed values (double: aligned for either type)
    char* data = nullptr;         // where this rank packs: own's storage or its shared slot
    std::vector<char*> slot;      // shared path: every rank's slot of this stream
    std::size_t filled = 0;       // values packed this step
    std::size_t started = 0;      // values whose all-reduce has started (MPI path)
    std::vector<grad_part> parts; // this step's members, for the copy back
  };
  struct alignas(64) flag { // one per cache line: a rank's flags are written by it alone
    std::atomic<std::uint64_t> v;
  };
  struct flags {               // at the start of each rank's shared segment
    flag filled, summed, read; // the number of the last reduction that reached each step
  };
  std::size_t bytes_ = 0;
  void start(stream& s, std::size_t n); // the all-reduce of s's next n packed values
  stream& of(bool in_double) { return in_double ? f64_ : t_; }
  void open_shared(); // the window, the slots and the flags
  void wait_shared(double* side);
  // Sums both ranks' slots into the members (2 ranks).
  void sum_all();
  // Sums this rank's part into its slot, then reads every part into the members (reduction k).
  void sum_parts(std::uint64_t k);
  // Waits until every rank's flag `which` has reached `k`.
  void await(flag flags::*which, std::uint64_t k) const;
  // The first of the values that part q of a stream with n values holds (n for q = ranks_):
  // part q is [part_lo(n, q), part_lo(n, q + 1)).
  [[nodiscard]] std::size_t part_lo(std::size_t n, int q) const;
  // Before this rank packs into its slot: waits until every rank has read the last sums.
  void claim_slot();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int ranks_ = 1, rank_ = 0;
  std::size_t bucket_bytes_;
  std::size_t side_ = 0; // side values per step
  stream t_, f64_;
  std::vector<char*> side_at_; // shared path: every rank's side values in the window
  std::vector<MPI_Request> pending_;
  bool kicked_ = true; // progress() has run since the last start
  MPI_Win win_ = MPI_WIN_NULL;
  std::vector<flags*> flags_; // every rank's
  std::uint64_t done_ = 0;    // reductions this rank has completed
  bool packing_ = false;      // a member of the current reduction was added
  int spins_ = 64;            // flag tests before an await gives its core away
};

} // namespace trainer
