#include "train.hpp"

#include "budget.hpp"

#include "balance.hpp"
#include "checkpoint.hpp"
#include "data.hpp"
#include "grad_reducer.hpp"
#include "network.hpp"
#include "optimizer.hpp"
#include "report.hpp"

#include <halox/error.hpp>
#include <halox/ops/provider.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <thread>

namespace trainer {
using halox::index_t;

namespace {

// The model's family: its name without the strategy suffix, so that a checkpoint of
// resnet-hybrid resumes as resnet-spatial.
std::string family(std::string const& name) {
  for (char const* s : {"-sample", "-spatial", "-hybrid"}) {
    std::string const suf = s;
    if (name.size() > suf.size() && name.compare(name.size() - suf.size(), suf.size(), suf) == 0)
      return name.substr(0, name.size() - suf.size());
  }
  return name;
}

template <class T> MPI_Datatype mpi_type() { return sizeof(T) == 4 ? MPI_FLOAT : MPI_DOUBLE; }

// Networks are built per batch size (the last mini-batch and the test batches may be
// smaller) and per sample split (--balance); building is collective, and every rank meets the
// same sizes and splits in the same order. A few are kept (a split may come back); past that
// the least recently used goes, on every rank alike.
template <class T> class network_cache {
public:
  // `keep`: networks kept at most (a budget keeps one: each holds its step's buffers).
  network_cache(model_spec const& m, param_store<T>& ps, std::vector<layer_params> const& lp,
                grid_cache& g, build_options const& bo, balancer const& bal, std::size_t keep)
      : m_(m), ps_(ps), lp_(lp), g_(g), bo_(bo), bal_(bal), kept_(keep) {}
  // Every network, and those built later, hold their step's memory as `p` says.
  void set_plan(memory_plan const& p) {
    plan_ = p;
    for (auto& e : nets_) e.net->set_plan(p);
    fit_arena(true);
  }
  // What the networks kept hold on this rank (the shared scratch once); `peak`: with the
  // shared scratch at the most it has held.
  [[nodiscard]] std::size_t bytes(bool peak = false) const {
    std::size_t b = arena_.size() * sizeof(T), shared = 0;
    for (auto const& e : nets_) {
      step_memory const m = e.net->memory();
      b += m.total() - m.shared - m.arena;
      shared = peak ? m.shared_peak : m.shared;
    }
    return b + shared;
  }
  network<T>& get(index_t n) {
    ++clock_;
    std::vector<double> const& w = bal_.weights();
    entry* hit = nullptr;
    for (auto& e : nets_)
      if (e.batch == n && e.weight == w) hit = &e;
    if (!hit) {
      if (nets_.size() >= kept_) { // the least recently used goes
        auto lru = std::min_element(nets_.begin(), nets_.end(),
                                    [](entry const& a, entry const& b) { return a.used < b.used; });
        if (bound_ == lru->net.get()) bound_ = nullptr;
        nets_.erase(lru);
      }
      nets_.push_back(
          {n, w, 0, std::make_unique<network<T>>(m_, n, ps_, lp_, g_, bo_, w, plan_, false)});
      hit = &nets_.back();
      fit_arena(false);
    }
    if (hit->net->scratch_ready()) {
      // Its first step recorded the operators' scratch per call: placed in the arena from
      // now on, and their own buffers go.
      hit->net->set_plan(hit->net->plan());
      fit_arena(false);
      halox::ops::release_shared_scratch();
    }
    if (bound_ != hit->net.get()) { // the arena holds nothing between steps: lend it on
      hit->net->bind(arena_.data());
      bound_ = hit->net.get();
    }
    hit->used = clock_;
    return *hit->net;
  }

private:
  struct entry {
    index_t batch;
    std::vector<double> weight;
    unsigned long used;
    std::unique_ptr<network<T>> net;
  };
  model_spec const& m_;
  param_store<T>& ps_;
  std::vector<layer_params> const& lp_;
  grid_cache& g_;
  build_options bo_;
  balancer const& bal_;
  // One arena for all the networks: only one runs at a time, and a step leaves nothing in it
  // that the next needs. Sized for the largest; `shrink`: also smaller when that is less.
  void fit_arena(bool shrink) {
    std::size_t need = 0;
    for (auto const& e : nets_) need = std::max(need, e.net->arena_need());
    std::size_t const have = arena_.size() * sizeof(T);
    if (need > have || (shrink && need < have)) {
      arena_.clear();
      arena_.shrink_to_fit(); // the old one goes before the new one comes
      arena_.assign(need / sizeof(T), T(0));
    }
    bound_ = nullptr; // every network is bound again when `get` hands it out
  }
  std::size_t kept_;
  memory_plan plan_;
  std::vector<entry> nets_;
  std::vector<T> arena_;
  network<T> const* bound_ = nullptr; // the network bound to the arena last
  unsigned long clock_ = 0;
};

// Runs a batch forward (and backward when training); returns this rank's loss sums.
template <class T> loss_sums run_batch(network<T>& net, dataset& data, split s,
                                       std::vector<index_t> const& ids, step_context const& c) {
  double const t0 = now();
  fill_batch(data, s, ids, net.input_desc(), net.input());
  halox::box const own = net.logits_desc().owned_box();
  thread_local std::vector<int> labels; // reused from step to step
  labels.clear();
  if (!own.empty()) batch_labels(data, s, ids, own.lo[0], own.hi[0], labels);
  c.times->compute += now() - t0; // data loading counts as local work
  net.forward(c);
  loss_sums const l = net.loss(labels, c);
  if (c.training) net.backward(c);
  return l;
}

template <class T> loss_sums evaluate(network_cache<T>& nets, dataset& data, long batch,
                                      step_context c, MPI_Comm comm) {
  c.training = false;
  loss_sums total;
  index_t const n = data.size(split::test);
  for (index_t first = 0; first < n; first += batch) {
    std::vector<index_t> ids;
    for (index_t i = first; i < std::min<index_t>(n, first + batch); ++i) ids.push_back(i);
    loss_sums const l =
        run_batch(nets.get(static_cast<index_t>(ids.size())), data, split::test, ids, c);
    total.loss += l.loss;
    total.correct += l.correct;
  }
  double v[2] = {total.loss, total.correct};
  MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_SUM, comm);
  return {v[0] / static_cast<double>(n), v[1] / static_cast<double>(n)};
}

} // namespace

template <class T> int train(options const& o, model_spec const& m, MPI_Comm world) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  reporter out(o, rank, size);

  std::string const dataset_spec = !o.dataset.empty()      ? o.dataset
                                   : m.spatial_dims() == 3 ? "synthetic3d"
                                                           : "synthetic";
  auto data = open_dataset(dataset_spec, m.input, m.classes, o.train_size, o.test_size);
  // What training allocates from here on is what --max-memory and the reported peak count.
  reset_peak_memory(); // the peak from here on: not MPI's or the loader's start-up
  process_memory const base = read_process_memory();
  param_store<T> ps;
  std::vector<layer_params> const lp = make_params(m, o.seed, ps);
  // Every rank initialised the same values from the seed; broadcasting rank 0's makes that a
  // guarantee rather than an assumption (and is what a framework with random init needs).
  for (auto& p : ps.params)
    MPI_Bcast(p.value.data(), static_cast<int>(p.value.size()), mpi_type<T>(), 0, world);
  train_position pos;
  if (!o.resume.empty()) pos = load_checkpoint(o.resume, family(m.name), ps, world);

  grid_cache grids(world);
  build_options bo;
  bo.deterministic = o.deterministic;
  bo.exchange = halox::backend_from_string(o.backend);
  balancer bal(o.balance, size); // throws on every rank alike for a bad --balance
  network_cache<T> nets(m, ps, lp, grids, bo, bal, o.max_memory ? 1 : 8);
  sgd const opt{o.lr, o.momentum, o.weight_decay};

  index_t const ntrain = data->size(split::train);
  long const steps_per_epoch = static_cast<long>((ntrain + o.batch - 1) / o.batch);
  long const total_steps = o.steps > 0 ? o.steps : steps_per_epoch * o.epochs;
  long trainable = 0;
  for (auto const& p : ps.params)
    if (p.trainable) trainable += static_cast<long>(p.value.size());
  out.header(m, data->describe(), trainable, total_steps, steps_per_epoch, pos.step);
  // Build the first network now: a strategy that does not fit the rank count fails here, on
  // every rank alike, rather than inside the training loop.
  network<T>& first = nets.get(std::min<index_t>(o.batch, ntrain));
  if (o.describe) out.report(first.describe());
  std::vector<std::string> const kinds = first.kinds(); // `first` may be dropped (--balance)

  // The layers' partial gradients: in T, or with --deterministic (exact_grads) partial sums
  // in double; a member of the other type is an internal error. Made out here: its destructor
  // frees a communicator, which only a clean end of the loop may do.
  std::size_t const nt = static_cast<std::size_t>(trainable);
  std::size_t const bucket =
      o.bucket_kb >= 0 ? static_cast<std::size_t>(o.bucket_kb) * 1024 : grad_reducer::auto_bucket;
  // The loss sums, then with --balance auto every rank's busy time and the part of it inside
  // the layers (its own slots set, the others 0: the sum gathers them); they travel beside
  // the gradients, so that one wait ends the step's communication.
  std::size_t const P = bal.measures() ? static_cast<std::size_t>(size) : 0;
  std::vector<double> v(2 + 2 * P);
  grad_reducer grads(world, mpi_type<T>(), sizeof(T), o.deterministic ? 0 : nt,
                     o.deterministic ? nt : 0, v.size(), bucket,
                     o.grad_reduce == "shared" ? reduce_path::shared
                     : o.grad_reduce == "mpi"  ? reduce_path::mpi
                                               : reduce_path::automatic);
  if (o.describe) out.report(grads.describe() + "\n");
  // Parameters, their gradients and momentum, and the reducer's buffers: what every plan holds.
  std::size_t fixed = grads.bytes();
  for (auto const& p : ps.params)
    fixed += (p.value.capacity() + p.grad.capacity() + p.velocity.capacity()) * sizeof(T);
  memory_budget<T> const budget(o, fixed, world);
  // The first step runs leaner than the rest (its calls measure layouts and grow the
  // operators' scratch before it can be placed): without a budget it recomputes the cheap
  // layers, where the options leave that open, and the plan the options ask for follows.
  memory_plan const steady = budget.initial(first);
  bool const lean_first = !o.max_memory && !o.recompute_cheap && first.has_cheap_layers();
  memory_plan lean = steady;
  lean.recompute_cheap = lean.recompute_cheap || lean_first;
  nets.set_plan(lean);
  if (o.describe && (o.max_memory || !first.plan().segments.empty()))
    out.report(budget.describe(first.plan()) + "\n");

  int status = 0;
  try {
    std::vector<index_t> order, ids;
    int order_epoch = -1;
    // Reused from step to step (cleared, not reallocated).
    std::vector<std::function<void()>> finish;
    epoch_stats ep;
    // --profile: the steps after the first few (kernel generation, first touches, measured
    // overlap) are timed layer by layer.
    layer_clock clock;
    // Every rank's busy time and the part of it inside the layers, and the sample counts each
    // rank held (--balance auto).
    std::vector<double> busy(P), split_busy(P);
    std::vector<index_t> held(P);
    long const profile_from = pos.step + 5;
    index_t last_batch = std::min<index_t>(o.batch, ntrain); // of the last training step
    double const t_start = now();
    double last_test_accuracy = -1;
    long const first_step = pos.step;
    for (long s = pos.step; s < total_steps; ++s) {
      // A training step is the region between MPI_Pcontrol(1) and MPI_Pcontrol(0), for
      // profiling tools (MPI's hook for them; a no-op otherwise). The trainer.step_allocations
      // tests count the allocations made there.
      MPI_Pcontrol(1);
      int const epoch = static_cast<int>(s / steps_per_epoch);
      long const b = s % steps_per_epoch;
      if (epoch != order_epoch) {
        epoch_order(ntrain, o.seed, epoch, order);
        order_epoch = epoch;
      }
      ids.assign(order.begin() + b * o.batch,
                 order.begin() + std::min<index_t>(ntrain, (b + 1) * o.batch));
      phase_times t;
      finish.clear();
      step_context c{true,    o.seed,         static_cast<std::uint64_t>(s), &t, &grads,
                     &finish, o.deterministic};
      if (o.profile && s >= profile_from) c.clock = &clock;
      double const t0 = now();
      network<T>& net = nets.get(static_cast<index_t>(ids.size()));
      last_batch = static_cast<index_t>(ids.size());
      loss_sums l = run_batch(net, *data, split::train, ids, c);
      // After the first step the operators' buffers are known: the budget picks the plan that
      // needs the least recomputation and fits on every rank (collective), used from the next.
      bool const replan = o.max_memory && s == first_step;
      double const tw = now();
      std::fill(v.begin(), v.end(), 0.0);
      v[0] = l.loss;
      v[1] = l.correct;
      if (P) {
        v[2 + static_cast<std::size_t>(rank)] = t.compute;
        v[2 + P + static_cast<std::size_t>(rank)] = t.split;
      }
      grads.wait(v.data());
      for (auto& f : finish) f();
      t.allreduce += now() - tw;
      // Full batches only: a short last batch would mix another split into the window.
      if (P && static_cast<long>(ids.size()) == o.batch) {
        halox::distribution const& ld = net.logits_desc().dist();
        for (std::size_t r = 0; r < P; ++r) {
          busy[r] = v[2 + r];
          split_busy[r] = v[2 + P + r];
          // The logits are sample-parallel over all the ranks (grid P x 1): rank r holds part r.
          held[r] = ld.part_size(0, static_cast<int>(r));
        }
        if (bal.step(busy, split_busy, held)) out.text(bal.reason() + "\n");
      }
      double const to = now();
      opt.step(ps);
      t.compute += now() - to;
      if (lean_first && s == first_step) nets.set_plan(steady);
      if (replan) {
        process_memory const pm = read_process_memory();
        memory_plan const p = budget.choose(net, pm.since(base).rss);
        nets.set_plan(p);
        out.text(budget.describe(p) + "\n");
      }
      double const dt = now() - t0;
      if (c.clock) clock.step += dt, ++clock.steps;
      step_record r{s + 1,
                    epoch + 1,
                    v[0] / static_cast<double>(ids.size()),
                    v[1] / static_cast<double>(ids.size()),
                    static_cast<double>(ids.size()) / dt,
                    dt,
                    t};
      ep.add(r, static_cast<double>(ids.size()));
      double const avg = (now() - t_start) / static_cast<double>(s + 1 - first_step);
      MPI_Pcontrol(0); // the step's record and progress line are output, not the step
      if (!o.log_json.empty() && rank == 0) { // this rank's memory, no collective
        r.memory_peak = read_process_memory().since(base).peak;
        r.memory_predicted = fixed + nets.bytes(true);
      }
      out.step(r, total_steps, avg * static_cast<double>(total_steps - s - 1));
      bool const epoch_end = b == steps_per_epoch - 1 || s + 1 == total_steps;
      if (epoch_end) {
        loss_sums test{};
        if (o.eval) {
          phase_times et;
          step_context ec{false, o.seed, 0, &et, nullptr, nullptr, false};
          test = evaluate(nets, *data, o.batch, ec, world);
          last_test_accuracy = test.correct;
        }
        out.epoch(epoch + 1, ep, o.eval, test, world);
        ep = epoch_stats{};
        if (!o.checkpoint.empty()) {
          save_checkpoint(o.checkpoint, family(m.name), ps, train_position{s + 1}, world);
          out.text("checkpoint " + o.checkpoint + " written at step " + std::to_string(s + 1) +
                   "\n");
        }
      }
      out.tick(); // what the rate limit held back, once its interval has passed
    }
    if (o.profile) out.profile(clock, kinds, world);
    // What the operators measured and chose, once they have. Rank 0's: the overlap modes are
    // the same on every rank. Collective (a network not kept any more is built again).
    if (o.describe) {
      network<T>& last = nets.get(last_batch);
      out.report_root(last.describe_tuned());
      // This rank's memory as accounted, and the process's peak growth since before training.
      process_memory const grown = read_process_memory().since(base);
      std::size_t const predicted = fixed + nets.bytes(true), measured = grown.peak;
      unsigned long most[2] = {predicted, measured};
      MPI_Allreduce(MPI_IN_PLACE, most, 2, MPI_UNSIGNED_LONG, MPI_MAX, world);
      out.report_root("memory on rank 0:\n" + last.describe_memory() +
                      "  parameters, gradients, momentum and gradient sums " + mib(fixed) +
                      "\n  predicted peak " + mib(predicted) + ", measured peak " + mib(measured) +
                      ", resident now " + mib(grown.rss) +
                      " (growth since before the parameters)\n  over the ranks: predicted peak at "
                      "most " +
                      mib(most[0]) + ", measured peak at most " + mib(most[1]) + "\n");
      out.report_written();
    }
    if (o.expect_accuracy >= 0 && last_test_accuracy < o.expect_accuracy) {
      out.text("expected a test accuracy of at least " + std::to_string(100 * o.expect_accuracy) +
               "% but reached " + std::to_string(100 * last_test_accuracy) + "%: FAILED\n");
      status = 1;
    }
  } catch (std::exception const& e) {
    // Past set-up an error may strike one rank only (a short read, a full disk, a bad buffer):
    // its halo peers raise peer_failed at once, but the others would wait for it in the next
    // collective, so stop the whole job, after a moment in which the peers report theirs.
    out.flush(); // the lines held back by the rate limit come before the error
    std::fprintf(stderr, "[%d/%d] halox-train: error: %s\n", rank, size, e.what());
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    MPI_Abort(world, 3);
  }
  if (!o.compare_log.empty()) status = std::max(status, out.compare(o.compare_log, o.rtol, world));
  return status;
}

template int train<float>(options const&, model_spec const&, MPI_Comm);
template int train<double>(options const&, model_spec const&, MPI_Comm);

} // namespace trainer
