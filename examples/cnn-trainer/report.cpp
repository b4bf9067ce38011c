#include "report.hpp"
#include "log_file.hpp"
#include "threads.hpp"

#include "network.hpp"

#include <halox/error.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <tuple>

namespace trainer {
namespace {

// printf-style formatting.
template <class... A> std::string fmt(char const* f, A... a) {
  char buf[512];
  std::snprintf(buf, sizeof buf, f, a...);
  return buf;
}

} // namespace

reporter::reporter(options const& o, int rank, int size)
    : o_(o), rank_(rank), size_(size), prints_(rank == 0 || o.debug_print) {
  if (rank == 0 && !o.log_json.empty()) {
    json_.reset(std::fopen(o.log_json.c_str(), "w"));
    HALOX_REQUIRE(json_ != nullptr, halox::errc::invalid_argument,
                  "cannot write --log-json " + o.log_json + "; check that its folder exists");
  }
  if (rank == 0 && !o.describe_file.empty())
    describe_.reset(std::fopen(o.describe_file.c_str(), "w"));
  // Every rank must agree on the failures above, or rank 0 would stop alone.
  int ok[2] = {rank != 0 || o.log_json.empty() || json_ != nullptr,
               rank != 0 || o.describe_file.empty() || describe_ != nullptr};
  MPI_Bcast(ok, 2, MPI_INT, 0, MPI_COMM_WORLD);
  HALOX_REQUIRE(ok[0], halox::errc::invalid_argument,
                "cannot write --log-json " + o.log_json + "; check that its folder exists");
  HALOX_REQUIRE(ok[1], halox::errc::invalid_argument,
                "cannot write --describe-file " + o.describe_file +
                    "; check that its folder exists");
}

reporter::~reporter() { flush(); }

void reporter::flush() {
  if (!text_.empty()) { // one write, whatever buffering the MPI library gave stdout
    std::fwrite(text_.data(), 1, text_.size(), stdout);
    text_.clear();
  }
  if (prints_) std::fflush(stdout);
  if (json_) std::fflush(json_.get());
  last_flush_ = MPI_Wtime();
  pending_ = false;
}

void reporter::wrote() {
  // With --debug-print every rank prints: one write per line, as a launcher forwarding several
  // ranks' output may cut a longer write between lines of another rank.
  if (o_.debug_print || MPI_Wtime() - last_flush_ >= flush_interval_s)
    flush();
  else
    pending_ = true;
}

void reporter::tick() {
  if (pending_ && MPI_Wtime() - last_flush_ >= flush_interval_s) flush();
}

void reporter::line(std::string const& s) { line_of(rank_, s); }

void reporter::line_of(int rank, std::string const& s) {
  if (!prints_) return;
  if (o_.debug_print) text_ += fmt("[%d/%d] ", rank, size_);
  text_ += s;
  text_ += '\n';
  wrote();
}

void reporter::text(std::string const& s) {
  if (!prints_) return;
  std::size_t b = 0;
  while (b < s.size()) {
    std::size_t e = s.find('\n', b);
    if (e == std::string::npos) e = s.size();
    line(s.substr(b, e - b));
    b = e + 1;
  }
}

void reporter::text_root(std::string const& s) {
  if (rank_ == 0) text(s);
}

void reporter::report(std::string const& s) {
  if (!describe_) return text(s);
  std::fwrite(s.data(), 1, s.size(), describe_.get());
}

void reporter::report_root(std::string const& s) {
  if (rank_ == 0) report(s);
}

void reporter::report_written() {
  if (describe_ && std::fflush(describe_.get()) == 0)
    line("layer report (grids, redistributions, what each operator chose, memory): " +
         o_.describe_file);
}

void reporter::header(model_spec const& m, std::string const& data, long params, long steps,
                      long steps_per_epoch, long first_step) {
  losses_.reserve(static_cast<std::size_t>(steps)); // steps then record without allocating
  std::string in;
  for (auto e : m.input) in += (in.empty() ? "" : "x") + std::to_string(e);
  line("halox-train: model " + m.name + " (" + m.source + ", " + std::to_string(m.layers.size()) +
       " layers, input " + in + ", " + std::to_string(params) + " parameters, default strategy " +
       m.strategy + ") on " + std::to_string(size_) + " ranks, " + threads_text());
  line("data: " + data);
  line("batch " + std::to_string(o_.batch) + ", " + std::to_string(steps) + " steps (" +
       std::to_string(steps_per_epoch) + " per epoch)" +
       (first_step ? ", resuming after step " + std::to_string(first_step) : std::string()) +
       fmt(", lr %g, momentum %g, weight decay %g", o_.lr, o_.momentum, o_.weight_decay) +
       ", exchanges by " + o_.backend);
}

void reporter::step(step_record const& r, long total_steps, double eta_s) {
  losses_.emplace_back(r.step, r.loss);
  if (json_) {
    auto const& p = r.phases;
    std::fprintf(json_.get(),
                 "{\"step\": %ld, \"epoch\": %d, \"loss\": %.17g, \"accuracy\": %.6g, "
                 "\"images_per_s\": %.6g, \"time_s\": %.6g, \"compute_s\": %.6g, \"halo_s\": %.6g, "
                 "\"shuffle_s\": %.6g, \"allreduce_s\": %.6g, \"memory_peak_bytes\": %zu, "
                 "\"memory_predicted_bytes\": %zu}\n",
                 r.step, r.epoch, r.loss, r.accuracy, r.images_per_s, r.time, p.compute, p.halo,
                 p.shuffle, p.allreduce, r.memory_peak, r.memory_predicted);
    wrote();
  }
  if (r.step % o_.print_every == 0 || r.step == total_steps)
    line("epoch " + std::to_string(r.epoch) + " step " + std::to_string(r.step) + "/" +
         std::to_string(total_steps) +
         fmt("  loss %.4f  acc %5.1f%%  %7.1f img/s  ETA %.0f s", r.loss, 100 * r.accuracy,
             r.images_per_s, eta_s));
}

void reporter::epoch(int e, epoch_stats const& s, bool have_test, loss_sums const& test,
                     MPI_Comm comm) {
  double v[5] = {s.time, s.phases.compute, s.phases.halo, s.phases.shuffle, s.phases.allreduce};
  double mx[5];
  MPI_Allreduce(v, mx, 5, MPI_DOUBLE, MPI_MAX, comm);
  std::string l =
      "epoch " + std::to_string(e) +
      fmt(" done: train loss %.4f acc %.1f%%", s.loss / s.samples, 100 * s.correct / s.samples);
  if (have_test) l += fmt(", test loss %.4f acc %.1f%%", test.loss, 100 * test.correct);
  line(l);
  line(fmt("  time %.2f s over %.0f steps (%.1f img/s); max over ranks: compute %.2f s, ", mx[0],
           static_cast<double>(s.steps), s.samples / mx[0], mx[1]) +
       fmt("halo %.2f s, shuffle %.2f s, allreduce %.2f s", mx[2], mx[3], mx[4]));
  if (o_.debug_print)
    line(fmt("  this rank: compute %.2f s, halo %.2f s, shuffle %.2f s, allreduce %.2f s", v[1],
             v[2], v[3], v[4]));
}

void reporter::profile(layer_clock const& k, std::vector<std::string> const& kinds, MPI_Comm comm) {
  if (k.steps == 0) { // the same on every rank: no collective to skip
    text("profile: no step was timed (the first 5 steps are not)\n");
    return;
  }
  // Per rank: wall and communication time of each layer's forward and backward, then the step.
  std::size_t const n = kinds.size();
  std::vector<double> mine(4 * n + 1, 0.0);
  auto const at = [](std::vector<double> const& v, std::size_t i) {
    return i < v.size() ? v[i] : 0.0;
  };
  double const per = 1e3 / static_cast<double>(k.steps); // s -> ms per step
  for (std::size_t i = 0; i < n; ++i) {
    mine[4 * i] = at(k.fwd, i) * per;
    mine[4 * i + 1] = at(k.fwd_comm, i) * per;
    mine[4 * i + 2] = at(k.bwd, i) * per;
    mine[4 * i + 3] = at(k.bwd_comm, i) * per;
  }
  mine[4 * n] = k.step * per;
  std::vector<double> all(rank_ == 0 ? mine.size() * static_cast<std::size_t>(size_) : 0);
  MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
             static_cast<int>(mine.size()), MPI_DOUBLE, 0, comm);
  if (rank_ != 0) return;
  if (o_.debug_print) {
    // Every rank's own times, prefixed with that rank. Rank 0 prints them all from the gather:
    // written by their own ranks, a launcher's forwarding could cut a row (Open MPI, rarely).
    for (int r = 0; r < size_; ++r) {
      double const* m = all.data() + static_cast<std::size_t>(r) * mine.size();
      auto const own = [&](std::string const& s) { line_of(r, s); };
      own("this rank, ms per step: layer, forward (of it communication), backward (of it "
          "communication)");
      for (std::size_t i = 0; i < n; ++i)
        own(fmt("%-4zu %-9s %8.3f (%.3f) %8.3f (%.3f)", i, kinds[i].c_str(), m[4 * i], m[4 * i + 1],
                m[4 * i + 2], m[4 * i + 3]));
      own(fmt("step %.3f", m[4 * n]));
    }
  }
  // min, max, the rank of the max, and the communication time of that rank.
  auto const stats = [&](std::size_t j) {
    double lo = all[j], hi = all[j];
    int arg = 0;
    for (int r = 1; r < size_; ++r) {
      double const v = all[static_cast<std::size_t>(r) * mine.size() + j];
      lo = std::min(lo, v);
      if (v > hi) hi = v, arg = r;
    }
    return std::tuple<double, double, int>(lo, hi, arg);
  };
  auto const cell = [&](std::size_t j) {
    auto const [lo, hi, arg] = stats(j);
    double const comm_of_max = all[static_cast<std::size_t>(arg) * mine.size() + j + 1];
    return fmt("%8.3f %8.3f %4d %7.3f", lo, hi, arg, comm_of_max);
  };
  std::string t = fmt("profile: ms per step over %ld steps; per layer the fastest and slowest "
                      "rank, that rank, and its communication time\n",
                      k.steps);
  t += fmt("%-4s %-9s %8s %8s %4s %7s   %8s %8s %4s %7s\n", "#", "layer", "fwd min", "fwd max",
           "rank", "comm", "bwd min", "bwd max", "rank", "comm");
  double fsum = 0, bsum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    t += fmt("%-4zu %-9s ", i, kinds[i].c_str()) + cell(4 * i) + "   " + cell(4 * i + 2) + "\n";
    fsum += std::get<1>(stats(4 * i));
    bsum += std::get<1>(stats(4 * i + 2));
  }
  auto const [slo, shi, sarg] = stats(4 * n);
  t += fmt("sum of the slowest ranks: forward %.3f, backward %.3f; whole step %.3f to %.3f "
           "(rank %d); the rest is data, loss, optimizer and the last gradient wait\n",
           fsum, bsum, slo, shi, sarg);
  text(t);
}

int reporter::compare(std::string const& path, double rtol, MPI_Comm comm) {
  int status = 0;
  if (rank_ == 0) {
    std::ifstream f(path);
    // A line without a step and a loss is skipped: its step then counts as missing below.
    std::map<long, double> const ref = read_log_losses(f);
    double worst = 0;
    long n = 0;
    for (auto const& [step, loss] : losses_) {
      auto it = ref.find(step);
      if (it == ref.end()) continue;
      ++n;
      worst = std::max(worst, std::abs(loss - it->second) / std::max(std::abs(it->second), 1e-30));
    }
    flush(); // the lines held back by the rate limit come first
    if (n == 0 || n != static_cast<long>(losses_.size())) {
      std::printf("compare: %s has %ld of this run's %zu steps; FAILED\n", path.c_str(), n,
                  losses_.size());
      status = 1;
    } else {
      status = worst <= rtol ? 0 : 1;
      std::printf("compare: %ld steps, max relative loss difference %.3g (rtol %.3g): %s\n", n,
                  worst, rtol, status ? "FAILED" : "ok");
    }
    flush();
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, comm);
  return status;
}

} // namespace trainer
