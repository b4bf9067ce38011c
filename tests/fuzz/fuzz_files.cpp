// Bounded mutation fuzzing of every reader of files halox and its tools trust nothing in:
// halox-train's checkpoints, model files, MNIST datasets and --compare-log logs, the plan cache
// and the operators' choice cache. Each target takes the valid
// files of its corpus, damages copies of them (1 to 4 byte flips, deletions, insertions of
// random bytes, duplications of a range) and hands them to the reader, for a bounded time.
// A reader must accept a file or throw halox::error; anything else fails the run: another
// exception, a crash (ASan/UBSan in `./quickstart sanitize`), an input that takes more than
// 10 s (a hang), an allocation over 1 GiB. A checkpoint with a checksum that is accepted must
// hold exactly the values of the file it was made from.
//
//   halox_fuzz_files <target> <seconds> <corpus file or folder>...   (checkpoint, model,
//   plan-cache, choice-cache, log; mnist and cifar10 take one dataset folder;
//   HALOX_FUZZ_SEED=<n> repeats a run)
//   halox_fuzz_files selftest <folder>   the checkpoint format's own checks, in <folder>
//   halox_fuzz_files write-corpus <folder> [mnist|cifar10]   writes a corpus
#include "checkpoint.hpp"
#include "data.hpp"
#include "log_file.hpp"
#include "model.hpp"
#include "ops/providers/choice_cache.hpp"
#include "tune/cache_file.hpp"

#include <halox/error.hpp>

#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <vector>

// The built-in models are not part of this program: model files only.
namespace trainer {
std::vector<std::string> builtin_model_names() { return {}; }
std::string builtin_model_text(std::string const&) { return {}; }
} // namespace trainer

#if defined(__SANITIZE_ADDRESS__)
// ASan's own allocator enforces the bound.
extern "C" char const* __asan_default_options() { return "max_allocation_size_mb=1024"; }
#endif

namespace {

namespace fs = std::filesystem;
constexpr std::size_t max_allocation = std::size_t{1} << 30;
char const* current = "";

[[noreturn]] void die(std::string const& why) {
  std::fprintf(stderr, "halox_fuzz_files: %s\n", why.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

extern "C" void on_alarm(int) {
  char const msg[] = "halox_fuzz_files: an input took more than 10 s (a hang); rerun with the "
                     "printed HALOX_FUZZ_SEED\n";
  (void)!::write(2, msg, sizeof msg - 1);
  std::_Exit(1);
}

// A small model's parameters, in the order the trainer would create them.
trainer::param_store<float> store(float base) {
  trainer::param_store<float> ps;
  auto fill = [&](std::size_t n, float k) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = base + k * static_cast<float>(i);
    return v;
  };
  ps.add("0.conv.weight", {4, 1, 3, 3}, fill(36, 0.25f), true, true);
  ps.add("0.conv.bias", {4}, fill(4, -1.0f), true, false);
  ps.add("1.bn.running_mean", {4}, fill(4, 0.5f), false, false);
  for (auto& p : ps.params)
    for (std::size_t i = 0; i < p.velocity.size(); ++i)
      p.velocity[i] = 0.01f * static_cast<float>(i);
  return ps;
}

std::string read_all(fs::path const& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> corpus(std::vector<std::string> const& where) {
  std::vector<std::string> out;
  for (auto const& w : where) {
    if (fs::is_directory(w)) {
      std::vector<fs::path> files;
      for (auto const& e : fs::directory_iterator(w))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      for (auto const& f : files) out.push_back(read_all(f));
    } else {
      out.push_back(read_all(w));
    }
  }
  if (out.empty()) die("no corpus file found");
  return out;
}

std::string mutate(std::string s, std::mt19937_64& rng) {
  auto pick = [&](std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng() % n); };
  int const ops = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < ops; ++k) {
    std::size_t const at = pick(s.size() + 1);
    std::size_t const len = 1 + pick(rng() % 4 == 0 ? 64 : 8);
    switch (rng() % 4) {
    case 0: // flip bits of a byte
      if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1 + rng() % 255);
      break;
    case 1: // delete a range
      if (at < s.size()) s.erase(at, std::min(len, s.size() - at));
      break;
    case 2: { // insert random bytes (sometimes a large count's worth of 0xFF)
      std::string ins(len, '\0');
      bool const ff = rng() % 3 == 0;
      for (auto& c : ins) c = ff ? '\xFF' : static_cast<char>(rng());
      s.insert(at, ins);
      break;
    }
    default: // duplicate a range
      if (at < s.size()) s.insert(at, s.substr(at, std::min(len, s.size() - at)));
      break;
    }
  }
  return s;
}

struct tally {
  long tried = 0, accepted = 0, rejected = 0;
};

// A check of nothing, for readers whose accepted inputs promise nothing more.
auto const accept_any = [](auto const&, auto const&) {};

// Every input of `corpus` must be accepted by `reader`; then, for `seconds`, `reader` gets
// copies of them that `damage(input, rng)` made, and `accept(original, damaged)` checks each
// one it took. Input: a file's bytes, or a set of files.
template <class Input, class Damage, class Reader, class Accept>
void fuzz(char const* target, double seconds, std::vector<Input> const& corpus, Damage damage,
          Reader reader, Accept accept) {
  std::uint64_t seed = std::random_device{}();
  if (char const* s = std::getenv("HALOX_FUZZ_SEED")) seed = std::strtoull(s, nullptr, 10);
  std::printf("%s: HALOX_FUZZ_SEED=%llu, %zu corpus input(s), %.0f s\n", target,
              static_cast<unsigned long long>(seed), corpus.size(), seconds);
  std::fflush(stdout);
  for (auto const& f : corpus) {
    try {
      reader(f);
    } catch (halox::error const& e) {
      die(std::string(target) + ": a corpus input is rejected: " + e.what());
    }
  }
  std::mt19937_64 rng(seed);
  tally t;
  auto const until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  current = target;
  while (std::chrono::steady_clock::now() < until) {
    auto const& orig = corpus[rng() % corpus.size()];
    Input const bad = damage(orig, rng);
    ::alarm(10);
    try {
      reader(bad);
      ++t.accepted;
      accept(orig, bad);
    } catch (halox::error const&) {
      ++t.rejected;
    } catch (std::exception const& e) {
      die(std::string(target) + ": input " + std::to_string(t.tried) + " threw " +
          typeid(e).name() + " (" + e.what() + ") instead of halox::error");
    }
    ::alarm(0);
    ++t.tried;
  }
  std::printf("%s: %ld damaged inputs, %ld rejected with halox::error, %ld accepted\n", target,
              t.tried, t.rejected, t.accepted);
}

// The same for single files, each damaged by `mutate`.
template <class Reader, class Accept = decltype(accept_any)>
void fuzz_files(char const* target, double seconds, std::vector<std::string> const& files,
                Reader reader, Accept accept = accept_any) {
  fuzz(target, seconds, files, mutate, reader, accept);
}

void checkpoint_target(double seconds, std::vector<std::string> const& files) {
  fuzz_files(
      "checkpoint", seconds, files,
      [](std::string const& bytes) {
        auto ps = store(0.0f);
        (void)trainer::parse_checkpoint(bytes, "fuzz.ckpt", "fuzz", ps);
      },
      [](std::string const& orig, std::string const& bad) {
        // Format 2 carries a checksum: an accepted file holds the original's values.
        if (orig.compare(0, 8, std::string("HXTRAIN\0", 8)) != 0) return;
        auto a = store(0.0f), b = store(0.0f);
        (void)trainer::parse_checkpoint(orig, "orig.ckpt", "fuzz", a);
        (void)trainer::parse_checkpoint(bad, "fuzz.ckpt", "fuzz", b);
        for (std::size_t i = 0; i < a.params.size(); ++i)
          if (a.params[i].value != b.params[i].value ||
              a.params[i].velocity != b.params[i].velocity)
            die("checkpoint: a damaged file was accepted with other values than its original");
      });
}

void model_target(double seconds, std::vector<std::string> const& files) {
  fuzz_files("model", seconds, files,
             [](std::string const& text) { (void)trainer::parse_model(text, "fuzz.model"); });
}

void plan_cache_target(double seconds, std::vector<std::string> const& files) {
  // The header of each file names the MPI library and halox version it was written with; the
  // parse is given the first file's, so that its entries are read too.
  std::string mpi, version;
  {
    std::istringstream is(files.front());
    for (std::string line; std::getline(is, line);) {
      if (line.compare(0, 4, "mpi ") == 0) mpi = line.substr(4);
      if (line.compare(0, 6, "halox ") == 0) version = line.substr(6);
    }
  }
  fuzz_files("plan-cache", seconds, files, [&](std::string const& text) {
    auto const c = halox::detail::parse_cache_file(text, mpi, version);
    using v = halox::detail::cache_file_contents::verdict;
    if (c.status != v::ok && c.status != v::empty)
      throw halox::error(halox::errc::invalid_argument, c.problem);
  });
}

void choice_cache_target(double seconds, std::vector<std::string> const& files) {
  // A hint: the reader skips what it cannot parse and never refuses.
  fuzz_files("choice-cache", seconds, files, [](std::string const& text) {
    std::istringstream in(text);
    std::map<std::string, halox::ops::detail::measured_choice> out;
    halox::ops::detail::read_choice_lines(in, out);
  });
}

void log_target(double seconds, std::vector<std::string> const& files) {
  fuzz_files("log", seconds, files, [](std::string const& text) {
    std::istringstream in(text);
    (void)trainer::read_log_losses(in);
  });
}

// A dataset folder: MNIST's four idx files, or CIFAR-10's data_batch_1.bin and
// test_batch.bin; each input damages one of them.
char const* const mnist_files[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                   "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
char const* const cifar_files[] = {"data_batch_1.bin", "test_batch.bin"};

void dataset_target(std::string const& kind, double seconds, std::string const& dir,
                    std::string const& scratch) {
  bool const mnist = kind == "mnist";
  std::vector<std::string> names;
  if (mnist)
    names.assign(std::begin(mnist_files), std::end(mnist_files));
  else
    names.assign(std::begin(cifar_files), std::end(cifar_files));
  std::vector<halox::index_t> const shape =
      mnist ? std::vector<halox::index_t>{1, 4, 4} : std::vector<halox::index_t>{3, 32, 32};
  std::vector<std::string> good;
  for (auto const& f : names) good.push_back(read_all(fs::path(dir) / f));
  fs::create_directories(scratch);
  auto reader = [&](std::vector<std::string> const& set) {
    for (std::size_t i = 0; i < set.size(); ++i)
      std::ofstream(fs::path(scratch) / names[i], std::ios::binary | std::ios::trunc) << set[i];
    auto d = trainer::open_dataset(kind + ":" + scratch, shape, 10, 1, 1);
    halox::box whole;
    whole.nd = 3;
    for (int k = 0; k < 3; ++k) whole.hi[k] = shape[static_cast<std::size_t>(k)];
    std::vector<float> px(static_cast<std::size_t>(whole.volume()));
    for (auto sp : {trainer::split::train, trainer::split::test})
      for (halox::index_t id = 0; id < d->size(sp); ++id) {
        d->read(sp, id, whole, px.data());
        (void)d->label(sp, id);
      }
  };
  std::vector<std::vector<std::string>> const corpus{good};
  auto damage_one = [](std::vector<std::string> set, std::mt19937_64& rng) {
    auto& victim = set[rng() % set.size()];
    victim = mutate(victim, rng);
    return set;
  };
  fuzz(mnist ? "mnist" : "cifar10", seconds, corpus, damage_one, reader, accept_any);
}

// Four tiny idx files: 3 training and 2 test images of 4x4, labels 0 to 4.
void write_mnist(std::string const& dir) {
  auto be32 = [](std::string& s, std::uint32_t v) {
    for (int k = 3; k >= 0; --k) s += static_cast<char>((v >> (8 * k)) & 0xFF);
  };
  for (int test = 0; test < 2; ++test) {
    std::uint32_t const n = test ? 2 : 3;
    std::string im, lb;
    be32(im, 0x803);
    be32(im, n);
    be32(im, 4);
    be32(im, 4);
    for (std::uint32_t i = 0; i < n * 16; ++i) im += static_cast<char>((i * 37) & 0xFF);
    be32(lb, 0x801);
    be32(lb, n);
    for (std::uint32_t i = 0; i < n; ++i) lb += static_cast<char>(i + 2 * test);
    std::ofstream(fs::path(dir) / mnist_files[2 * test], std::ios::binary) << im;
    std::ofstream(fs::path(dir) / mnist_files[2 * test + 1], std::ios::binary) << lb;
  }
}

// Two CIFAR-10 records in the training batch and one in the test batch (label byte, then
// 3x32x32 pixels).
void write_cifar(std::string const& dir) {
  auto records = [](int n, int first_label) {
    std::string s;
    for (int r = 0; r < n; ++r) {
      s += static_cast<char>(first_label + r);
      for (int i = 0; i < 3072; ++i) s += static_cast<char>((i * 7 + r) & 0xFF);
    }
    return s;
  };
  std::ofstream(fs::path(dir) / cifar_files[0], std::ios::binary) << records(2, 0);
  std::ofstream(fs::path(dir) / cifar_files[1], std::ios::binary) << records(1, 5);
}

// The checkpoint format's promises, on files in `dir`.
int selftest(std::string const& dir) {
  int fails = 0;
  auto expect = [&](bool ok, std::string const& what) {
    if (!ok) {
      std::fprintf(stderr, "selftest: %s\n", what.c_str());
      ++fails;
    }
  };
  auto rejects = [&](std::string const& bytes, std::string const& needle, std::string const& what) {
    auto ps = store(0.0f);
    try {
      (void)trainer::parse_checkpoint(bytes, dir + "/x.ckpt", "fuzz", ps);
      expect(false, what + ": accepted");
    } catch (halox::error const& e) {
      expect(std::string(e.what()).find(needle) != std::string::npos,
             what + ": '" + e.what() + "' does not say '" + needle + "'");
      // A rejected file leaves the parameters as they were.
      expect(ps.params[0].value == store(0.0f).params[0].value, what + ": parameters changed");
    }
  };
  auto const good = trainer::checkpoint_bytes("fuzz", store(1.0f), trainer::train_position{7});
  {
    auto ps = store(0.0f);
    auto const pos = trainer::parse_checkpoint(good, "x", "fuzz", ps);
    expect(pos.step == 7 && ps.params[0].value == store(1.0f).params[0].value &&
               ps.params[1].velocity == store(1.0f).params[1].velocity,
           "round trip");
  }
  std::string flipped = good;
  flipped[good.size() - 10] ^= 0x01;
  rejects(flipped, "checksum does not match", "a flipped value bit");
  rejects(good.substr(0, good.size() - 3), "truncated", "a truncated file");
  rejects(good + "xyz", "bytes follow its payload", "trailing bytes");
  std::string version = good;
  version[8] = 9;
  rejects(version, "format version 9", "another version");
  rejects("not a checkpoint", "not a halox-train checkpoint", "another file");
  // A format-1 file whose parameter rank is 3,120,562,176: refused before any allocation.
  std::string v1("HXTRAIN1", 8);
  auto put32 = [&](std::uint32_t v) { v1.append(reinterpret_cast<char const*>(&v), 4); };
  put32(4);
  v1 += "fuzz";
  put32(4);
  std::int64_t const step = 0;
  v1.append(reinterpret_cast<char const*>(&step), 8);
  put32(3);
  put32(13);
  v1 += "0.conv.weight";
  put32(3120562176u);
  rejects(v1, "dimensions (at most 8)", "a huge rank");
  // Saving keeps the previous checkpoint as .prev; a damaged file names it in the fix.
  std::string const path = dir + "/ck.bin";
  fs::remove(path);
  fs::remove(path + ".prev");
  trainer::save_checkpoint(path, "fuzz", store(1.0f), trainer::train_position{1}, MPI_COMM_SELF);
  expect(!fs::exists(path + ".prev"), "no .prev after the first save");
  trainer::save_checkpoint(path, "fuzz", store(2.0f), trainer::train_position{2}, MPI_COMM_SELF);
  expect(fs::exists(path + ".prev") && !fs::exists(path + ".tmp"), ".prev kept, .tmp gone");
  {
    auto ps = store(0.0f);
    auto const pos = trainer::load_checkpoint(path + ".prev", "fuzz", ps, MPI_COMM_SELF);
    expect(pos.step == 1 && ps.params[0].value == store(1.0f).params[0].value,
           ".prev is the first");
    auto const now = trainer::load_checkpoint(path, "fuzz", ps, MPI_COMM_SELF);
    expect(now.step == 2 && ps.params[0].value == store(2.0f).params[0].value,
           "path is the second");
  }
  std::string bytes = read_all(path);
  bytes[bytes.size() / 2] ^= 0x40;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  try {
    auto ps = store(0.0f);
    (void)trainer::load_checkpoint(path, "fuzz", ps, MPI_COMM_SELF);
    expect(false, "a damaged file on disk was accepted");
  } catch (halox::error const& e) {
    expect(std::string(e.what()).find("resume from " + path + ".prev") != std::string::npos,
           std::string("the fix names .prev: ") + e.what());
  }
  std::printf("selftest: %s\n", fails ? "FAILED" : "passed");
  return fails ? 1 : 0;
}

} // namespace

#if !defined(__SANITIZE_ADDRESS__)
// Without ASan, this program's own allocations are bounded here.
void* operator new(std::size_t n) {
  if (n > max_allocation)
    die(std::string(current) + ": an allocation of " + std::to_string(n) + " bytes");
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#endif

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s checkpoint|model|plan-cache <seconds> <corpus>... | selftest "
                 "<folder> | write-corpus <folder>\n",
                 argv[0]);
    return 2;
  }
  std::signal(SIGALRM, on_alarm);
  std::string const what = argv[1];
  if (what == "selftest" || what == "write-corpus") {
    MPI_Init(&argc, &argv);
    int rc = 0;
    if (what == "selftest") {
      rc = selftest(argv[2]);
    } else if (argc > 3 && std::string(argv[3]) == "mnist") {
      write_mnist(argv[2]);
    } else if (argc > 3 && std::string(argv[3]) == "cifar10") {
      write_cifar(argv[2]);
    } else {
      auto const v2 = trainer::checkpoint_bytes("fuzz", store(1.0f), trainer::train_position{3});
      std::ofstream(std::string(argv[2]) + "/small.ckpt", std::ios::binary) << v2;
      // Format 1: the same payload after the old magic, no header.
      std::ofstream(std::string(argv[2]) + "/small-format1.ckpt", std::ios::binary)
          << "HXTRAIN1" << v2.substr(24);
    }
    MPI_Finalize();
    return rc;
  }
  if (argc < 4) die("give the seconds and at least one corpus file or folder");
  double const seconds = std::atof(argv[2]);
  if (what == "mnist" || what == "cifar10") {
    std::string const scratch = argc > 4 ? argv[4] : "halox-fuzz-" + what;
    dataset_target(what, seconds, argv[3], scratch);
    return 0;
  }
  std::vector<std::string> const where(argv + 3, argv + argc);
  auto const files = corpus(where);
  if (what == "checkpoint")
    checkpoint_target(seconds, files);
  else if (what == "model")
    model_target(seconds, files);
  else if (what == "plan-cache")
    plan_cache_target(seconds, files);
  else if (what == "choice-cache")
    choice_cache_target(seconds, files);
  else if (what == "log")
    log_target(seconds, files);
  else
    die("unknown target '" + what + "'");
  return 0;
}
