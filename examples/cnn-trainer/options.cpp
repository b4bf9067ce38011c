#include "options.hpp"

#include <halox/backend.hpp>
#include <halox/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>

namespace trainer {
namespace {

[[noreturn]] void bad(std::string const& msg) {
  throw halox::error(halox::errc::invalid_argument, msg + " (see halox-train --help)");
}

long to_long(std::string const& opt, std::string const& v, long min) {
  char* end = nullptr;
  long const x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < min)
    bad(opt + " " + v + ": expected an integer >= " + std::to_string(min));
  return x;
}

// A byte count with an optional K, M, G or T suffix (powers of 1024).
std::size_t to_bytes(std::string const& opt, std::string const& v) {
  char* end = nullptr;
  double const x = std::strtod(v.c_str(), &end);
  std::string const suf = end ? end : "";
  double mul = 1;
  if (suf == "K" || suf == "KiB")
    mul = 1024.0;
  else if (suf == "M" || suf == "MiB")
    mul = 1024.0 * 1024;
  else if (suf == "G" || suf == "GiB")
    mul = 1024.0 * 1024 * 1024;
  else if (suf == "T" || suf == "TiB")
    mul = 1024.0 * 1024 * 1024 * 1024;
  else if (!suf.empty())
    mul = -1;
  if (v.empty() || end == v.c_str() || mul < 0 || !(x > 0) || x * mul > 1e18)
    bad(opt + " " + v +
        ": expected a positive size in bytes, optionally with K, M, G or T "
        "(e.g. 2G)");
  return static_cast<std::size_t>(x * mul);
}

// A --grad-reduce value.
std::string checked_grad_reduce(std::string const& v) {
  if (v != "auto" && v != "shared" && v != "mpi")
    bad("--grad-reduce " + v + ": use auto, shared or mpi");
  return v;
}

// A backend name that this build can run on host memory ("auto" included).
std::string checked_backend(std::string const& v) {
  if (v == "auto") return v;
  auto const host = halox::host_backends();
  std::string names;
  for (halox::backend b : host)
    names += std::string(names.empty() ? "" : ", ") + halox::to_string(b);
  halox::backend b{};
  try {
    b = halox::backend_from_string(v);
  } catch (halox::error const&) {
    bad("--backend " + v + ": unknown backend; use auto or one of " + names);
  }
  if (std::find(host.begin(), host.end(), b) == host.end())
    bad("--backend " + v + ": not available for host memory in this build; use auto or one of " +
        names);
  return v;
}

double to_double(std::string const& opt, std::string const& v, double min, double max) {
  char* end = nullptr;
  double const x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x) || x < min || x > max)
    bad(opt + " " + v + ": expected a number in [" + std::to_string(min) + ", " +
        std::to_string(max) + "]");
  return x;
}

} // namespace

std::string default_backend() {
  auto const host = halox::host_backends();
  bool const ucx = std::find(host.begin(), host.end(), halox::backend::ucx) != host.end();
  return halox::to_string(ucx ? halox::backend::ucx : halox::backend::mpi_pack);
}

std::string usage() {
  return R"(usage: mpiexec -n P halox-train [options]

Trains a CNN whose activations are split over samples and space by halox (docs/trainer.md).

  --model NAME|FILE     built-in model (--list-models) or model file   [resnet-hybrid]
  --list-models         print the built-in models and exit
  --describe            print every layer's process grid and the redistributions; after
                        training, what each layer's operator measured and chose
  --describe-file FILE  --describe, its reports written to FILE (rank 0) instead of stdout;
                        the run's last line names the file
  --profile             at the end, each layer's forward and backward time per step (the
                        fastest and slowest rank; the first 5 steps are not counted)
  --dataset D           synthetic | synthetic3d | mnist:DIR | cifar10:DIR
                        [synthetic for 2-D models, synthetic3d for 3-D ones]
  --train-size N        training samples (synthetic: how many; files: a limit)  [2048]
  --test-size N         held-out samples evaluated at each epoch end          [512]
  --no-eval             skip the evaluation
  --batch N             global mini-batch (split over the ranks)              [32]
  --epochs N            passes over the training samples                      [1]
  --steps N             stop after N steps in all (overrides --epochs)
  --lr X                learning rate                                         [0.05]
  --momentum X          SGD momentum                                          [0.9]
  --weight-decay X      L2 penalty on conv and fc weights                     [5e-4]
  --seed N              initialisation, data order and dropout                [1]
  --deterministic       one OpenMP thread per rank (unless --threads); results follow the
                        1-rank trajectory up to floating-point rounding
  --dtype T             float32 | float64 (default: the model's)
  --threads N           OpenMP threads per rank
  --log-json FILE       one JSON object per step (rank 0)
  --checkpoint FILE     save parameters and optimizer state at each epoch end and at the end
  --resume FILE         start from a checkpoint (any rank count or strategy)
  --print-every N       progress line every N steps                           [10]
  --bucket-kb N|auto    sum the gradients over the ranks in buckets of N KiB, each started
                        as soon as backward has filled it (0: one bucket after backward;
                        auto: 16 under MPICH, 0 under other MPIs; MPI path)   [auto]
  --grad-reduce auto|shared|mpi
                        sum the gradients in shared memory (every rank on one node) or by
                        MPI all-reductions; auto: shared memory when the ranks share a
                        node                                                  [auto]
  --balance off|auto|W,W,...
                        split each batch's samples over the ranks evenly (off), by the
                        speed measured while training (auto: a rank on a slower core gets
                        fewer), or by a weight per rank (1,1.5: rank 1 gets 1.5 times as many
                        as rank 0); auto not with --deterministic               [off]
  --debug-print         every rank prints, lines prefixed with [rank/size]
  --compare-log FILE    after training, compare the losses with another run's --log-json
  --rtol X              relative tolerance of --compare-log                   [1e-4]
  --expect-accuracy X   exit with status 1 unless the last test accuracy is >= X (0 to 1)
  --backend NAME        how halo exchanges and redistributions move data: a host backend
                        (mpi_pack, mpi_persistent, ucx, cma, ..., auto: measure at build
                        time)                                   [ucx if built with UCX, else mpi_pack]
  --max-memory BYTES    what each rank may use for training (parameters, gradients, momentum,
                        activations, operator buffers; K, M, G suffixes): kept reorders are
                        dropped and segments recomputed in backward until the step fits; an
                        error on every rank when nothing fits                [no budget]
  --segments N          recompute the forward of all but the last of N segments during
                        backward (activation checkpointing); 1: none     [as --max-memory says]
  --recompute-cheap     drop the outputs of batch norm, pooling and ReLU layers after forward
                        and compute them again in backward (no convolution runs twice)
  --keep-reorders auto|on|off
                        convolutions keep their reordered inputs from forward to backward
                        (faster backward, one more copy of each input)           [auto: on]
  --help                this text
)";
}

options parse_options(std::vector<std::string> const& args) {
  options o;
  std::map<std::string, std::function<void(std::string const&)>> const with_value{
      {"--model", [&](auto const& v) { o.model = v; }},
      {"--dataset", [&](auto const& v) { o.dataset = v; }},
      {"--train-size", [&](auto const& v) { o.train_size = to_long("--train-size", v, 1); }},
      {"--test-size", [&](auto const& v) { o.test_size = to_long("--test-size", v, 1); }},
      {"--batch", [&](auto const& v) { o.batch = to_long("--batch", v, 1); }},
      {"--epochs", [&](auto const& v) { o.epochs = static_cast<int>(to_long("--epochs", v, 1)); }},
      {"--steps", [&](auto const& v) { o.steps = to_long("--steps", v, 1); }},
      {"--lr", [&](auto const& v) { o.lr = to_double("--lr", v, 0, 100); }},
      {"--momentum", [&](auto const& v) { o.momentum = to_double("--momentum", v, 0, 0.9999); }},
      {"--weight-decay",
       [&](auto const& v) { o.weight_decay = to_double("--weight-decay", v, 0, 1); }},
      {"--seed",
       [&](auto const& v) { o.seed = static_cast<std::uint64_t>(to_long("--seed", v, 0)); }},
      {"--dtype",
       [&](auto const& v) {
         if (v != "float32" && v != "float64") bad("--dtype " + v + ": use float32 or float64");
         o.dtype = v;
       }},
      {"--threads",
       [&](auto const& v) { o.threads = static_cast<int>(to_long("--threads", v, 1)); }},
      {"--log-json", [&](auto const& v) { o.log_json = v; }},
      {"--checkpoint", [&](auto const& v) { o.checkpoint = v; }},
      {"--resume", [&](auto const& v) { o.resume = v; }},
      {"--print-every", [&](auto const& v) { o.print_every = to_long("--print-every", v, 1); }},
      {"--bucket-kb",
       [&](auto const& v) {
         char* end = nullptr;
         long const kb = v == "auto" ? -1 : std::strtol(v.c_str(), &end, 10);
         if (v != "auto" && (v.empty() || *end != '\0' || kb < 0 || kb > (1L << 20)))
           bad("--bucket-kb " + v + ": expected auto or a size in KiB from 0 (one bucket) to " +
               "1048576 (1 GiB)");
         o.bucket_kb = kb;
       }},
      {"--grad-reduce", [&](auto const& v) { o.grad_reduce = checked_grad_reduce(v); }},
      {"--balance", [&](auto const& v) { o.balance = v; }},
      {"--compare-log", [&](auto const& v) { o.compare_log = v; }},
      {"--describe-file", [&](auto const& v) { o.describe_file = v; }},
      {"--expect-accuracy",
       [&](auto const& v) { o.expect_accuracy = to_double("--expect-accuracy", v, 0, 1); }},
      {"--rtol", [&](auto const& v) { o.rtol = to_double("--rtol", v, 0, 1); }},
      {"--backend", [&](auto const& v) { o.backend = checked_backend(v); }},
      {"--max-memory", [&](auto const& v) { o.max_memory = to_bytes("--max-memory", v); }},
      {"--segments",
       [&](auto const& v) { o.segments = static_cast<int>(to_long("--segments", v, 1)); }},
      {"--keep-reorders", [&](auto const& v) {
         if (v != "auto" && v != "on" && v != "off")
           bad("--keep-reorders " + v + ": use auto, on or off");
         o.keep_reorders = v;
       }}};
  std::map<std::string, bool*> const flags{{"--deterministic", &o.deterministic},
                                           {"--debug-print", &o.debug_print},
                                           {"--describe", &o.describe},
                                           {"--profile", &o.profile},
                                           {"--recompute-cheap", &o.recompute_cheap},
                                           {"--help", &o.help},
                                           {"-h", &o.help},
                                           {"--list-models", &o.list_models}};
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], v;
    bool has_inline = false;
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_inline = true;
    }
    if (auto f = flags.find(a); f != flags.end() && !has_inline) {
      *f->second = true;
    } else if (a == "--no-eval" && !has_inline) {
      o.eval = false;
    } else if (auto w = with_value.find(a); w != with_value.end()) {
      if (!has_inline) {
        if (i + 1 >= args.size()) bad("option " + a + " needs a value");
        v = args[++i];
      }
      w->second(v);
    } else {
      bad("unknown option '" + args[i] + "'");
    }
  }
  if (!o.describe_file.empty()) o.describe = true;
  if (o.deterministic && o.balance == "auto")
    bad("--balance auto with --deterministic: a split that follows measured speeds differs from "
        "run to run; pass fixed weights (--balance 1,1.5) or drop one of them");
  return o;
}

} // namespace trainer
