#pragma once
// Command-line options of halox-train. Parsing is pure and runs identically on every rank, so
// a bad option makes every rank stop with the same message.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

/// ucx where halox was built with UCX (halox's own UCP messages: on one node about twice as fast
/// as MPI for the 1-50 KiB halos of these models), otherwise mpi_pack.
[[nodiscard]] std::string default_backend();

/// Everything the command line sets.
struct options {
  std::string model = "resnet-hybrid"; ///< built-in name or model file
  std::string dataset;         ///< synthetic, synthetic3d, mnist:DIR, cifar10:DIR (empty: by model)
  long batch = 32;             ///< global mini-batch
  int epochs = 1;              ///< passes over the training split
  long steps = 0;              ///< stop after this many steps in all (0: epochs decide)
  double lr = 0.05;            ///< learning rate
  double momentum = 0.9;       ///< SGD momentum
  double weight_decay = 5e-4;  ///< L2 penalty on weights
  std::uint64_t seed = 1;      ///< initialisation, data order, dropout
  bool deterministic = false;  ///< one thread per rank, fixed backends
  std::string log_json;        ///< one JSON object per step (rank 0)
  std::string checkpoint;      ///< written at every epoch end and at the end
  std::string resume;          ///< checkpoint to start from
  int threads = 0;             ///< OpenMP threads per rank (0: leave as is)
  std::string dtype;           ///< float32 or float64 (empty: the model's)
  bool debug_print = false;    ///< every rank prints, prefixed with [rank/size]
  long print_every = 10;       ///< progress line every this many steps
  long train_size = 2048;      ///< training samples (synthetic size, or a limit)
  long test_size = 512;        ///< held-out samples
  bool eval = true;            ///< evaluate on the test split at each epoch end
  std::string compare_log;     ///< a --log-json file whose losses this run must match
  double expect_accuracy = -1; ///< fail unless the last test accuracy reaches this
  double rtol = 1e-4;          ///< relative tolerance of that comparison
  /// Gradient all-reduce buckets of this many KiB, started during backward (0: one bucket
  /// after backward; -1: the MPI library's default, grad_reducer::default_bucket_bytes).
  long bucket_kb = -1;
  /// How the gradients are summed over the ranks: auto (shared memory when every rank runs on
  /// one node, else MPI), shared or mpi.
  std::string grad_reduce = "auto";
  /// How each batch's samples are split over the ranks: off (even), auto (by measured speed), or
  /// one weight per rank (balancer).
  std::string balance = "off";
  bool describe = false; ///< print the layers, grids and moves
  /// --describe-file: the --describe reports go to this file (rank 0) instead of stdout.
  std::string describe_file;
  bool profile = false; ///< print each layer's time per step at the end
  /// How halo exchanges, gathers and redistributions move data: a host backend's name, checked
  /// to be available in this build (default: ucx where halox was built with UCX, else mpi_pack).
  std::string backend = default_backend();
  /// Bytes each rank may use for training (parameters, their gradients and momentum, the
  /// step's activations and gradients, the operators' buffers and scratch); 0: no budget. The
  /// trainer then drops kept reorders and recomputes checkpointed segments as needed.
  std::size_t max_memory = 0;
  /// Split the network into this many segments, all but the last recomputed in backward (1:
  /// none); 0: as --max-memory decides.
  int segments = 0;
  /// Convolutions keep their reordered inputs from forward to backward: on, off, or auto (on
  /// unless --max-memory needs the bytes).
  std::string keep_reorders = "auto";
  /// Drop the outputs of batch norm, pooling and ReLU layers after forward and compute them
  /// again in backward (memory_plan::recompute_cheap); --max-memory may choose it too.
  bool recompute_cheap = false;
  bool help = false;        ///< print usage
  bool list_models = false; ///< print the built-in models
};

/// Parses argv (without argv[0]); throws `halox::error` naming the bad option and the fix.
[[nodiscard]] options parse_options(std::vector<std::string> const& args);

/// The --help text.
[[nodiscard]] std::string usage();

} // namespace trainer
