#include "common/scenario.hpp"

#include "exec/cpu/pack.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>

namespace halox::bench {

namespace {

std::vector<std::byte> touched(std::size_t n) {
  std::vector<std::byte> v(n);
  std::memset(v.data(), 0x5a, n); // fault the pages in before anything is timed
  return v;
}

int as_count(std::size_t bytes) {
  HALOX_REQUIRE(bytes <= static_cast<std::size_t>(INT_MAX), errc::unsupported,
                "a message of " + std::to_string(bytes) +
                    " bytes exceeds MPI's int count; lower HALOX_BENCH_SCALE or add ranks");
  return static_cast<int>(bytes);
}

std::size_t copy_bytes(detail::schedule const& s) {
  std::size_t n = 0;
  for (auto const& c : s.copies) n += detail::region_bytes(s, c.src);
  return n;
}

} // namespace

struct scenario::buffers {
  // transport limit
  std::vector<std::byte> tsend, trecv;
  std::vector<std::size_t> soff, roff;
  std::vector<MPI_Request> reqs;
  bool transport = false;
  // copy + transport limit
  std::vector<std::byte> csrc, cdst;
  // memcpy limit
  std::vector<std::byte> msrc, mdst;
  // alltoall limit
  std::vector<std::byte> asend, arecv;
  std::vector<int> scount, sdispl, rcount, rdispl;
  int uniform = -1; // bytes per peer when every count is equal everywhere, else -1
  bool alltoall = false;
  // pack / unpack phases
  std::vector<std::byte> packed;
};

scenario::scenario(MPI_Comm comm, detail::schedule sched, std::vector<void*> slots)
    : comm_(comm), sched_(std::move(sched)), slots_(std::move(slots)) {
  double const sent = static_cast<double>(sched_.send_bytes());
  double runs = 0;
  bool contig = true;
  for (auto const& m : sched_.sends)
    for (auto const& r : m.regions) {
      auto const sr = detail::make_region(r.b, sched_.slots[r.slot].strides.data());
      runs += static_cast<double>(sr.runs());
      contig = contig && sr.nloops == 0;
    }
  bytes_sent_ = max_over(comm_, sent);
  bytes_moved_ = max_over(comm_, sent + static_cast<double>(copy_bytes(sched_)));
  peers_ = static_cast<int>(max_over(comm_, static_cast<double>(sched_.sends.size())));
  run_bytes_ = min_over(comm_, runs > 0 ? sent / runs : 1e300);
  if (run_bytes_ >= 1e300) run_bytes_ = 0;
  contiguous_ = all_ok(comm_, contig);
}

scenario::~scenario() = default;

scenario::buffers& scenario::bufs() {
  if (!buf_) buf_ = std::make_unique<buffers>();
  return *buf_;
}

void scenario::setup_transport() {
  auto& b = bufs();
  if (b.transport) return;
  std::size_t ts = 0, tr = 0;
  for (auto const& m : sched_.sends) {
    b.soff.push_back(ts);
    ts += m.bytes;
  }
  for (auto const& m : sched_.recvs) {
    b.roff.push_back(tr);
    tr += m.bytes;
  }
  b.tsend = touched(ts);
  b.trecv = touched(tr);
  b.reqs.assign(sched_.sends.size() + sched_.recvs.size(), MPI_REQUEST_NULL);
  b.transport = true;
}

void scenario::exchange() {
  auto& x = *buf_;
  std::size_t const nr = sched_.recvs.size();
  for (std::size_t i = 0; i < nr; ++i) {
    auto const& m = sched_.recvs[i];
    MPI_Irecv(x.trecv.data() + x.roff[i], as_count(m.bytes), MPI_BYTE, m.peer, 7, comm_,
              &x.reqs[i]);
  }
  for (std::size_t i = 0; i < sched_.sends.size(); ++i) {
    auto const& m = sched_.sends[i];
    MPI_Isend(x.tsend.data() + x.soff[i], as_count(m.bytes), MPI_BYTE, m.peer, 7, comm_,
              &x.reqs[nr + i]);
  }
  MPI_Waitall(static_cast<int>(x.reqs.size()), x.reqs.data(), MPI_STATUSES_IGNORE);
}

std::function<void()> scenario::transport_op() {
  setup_transport();
  return [this] { exchange(); };
}

std::function<void()> scenario::copy_transport_op() {
  setup_transport();
  auto& b = bufs();
  if (b.csrc.size() != b.tsend.size() || b.csrc.empty()) {
    b.csrc = touched(std::max<std::size_t>(b.tsend.size(), 1));
    b.cdst = touched(std::max<std::size_t>(b.trecv.size(), 1));
  }
  return [this] {
    auto& x = *buf_;
    // Written just before it is sent, like any packed message: on some machines reading
    // freshly written (dirty) cache lines from another core costs far more than the copy.
    std::memcpy(x.tsend.data(), x.csrc.data(), x.tsend.size());
    exchange();
    std::memcpy(x.cdst.data(), x.trecv.data(), x.trecv.size());
  };
}

std::function<void()> scenario::memcpy_op() {
  auto& b = bufs();
  std::size_t const n = sched_.send_bytes() + copy_bytes(sched_);
  if (b.msrc.size() != n || b.msrc.empty()) {
    b.msrc = touched(std::max<std::size_t>(n, 1));
    b.mdst = touched(std::max<std::size_t>(n, 1));
  }
  return [this, n] { std::memcpy(buf_->mdst.data(), buf_->msrc.data(), n); };
}

std::function<void()> scenario::alltoall_op() {
  auto& b = bufs();
  if (!b.alltoall) {
    int p = 1, me = 0;
    MPI_Comm_size(comm_, &p);
    MPI_Comm_rank(comm_, &me);
    std::vector<std::size_t> sc(p, 0), rc(p, 0);
    for (auto const& m : sched_.sends) sc[m.peer] += m.bytes;
    for (auto const& m : sched_.recvs) rc[m.peer] += m.bytes;
    sc[me] += copy_bytes(sched_);
    rc[me] += copy_bytes(sched_);
    b.scount.resize(p);
    b.rcount.resize(p);
    b.sdispl.resize(p);
    b.rdispl.resize(p);
    std::size_t st = 0, rt = 0;
    for (int r = 0; r < p; ++r) {
      b.scount[r] = as_count(sc[r]);
      b.rcount[r] = as_count(rc[r]);
      b.sdispl[r] = as_count(st);
      b.rdispl[r] = as_count(rt);
      st += sc[r];
      rt += rc[r];
    }
    b.asend = touched(std::max<std::size_t>(st, 1));
    b.arecv = touched(std::max<std::size_t>(rt, 1));
    // MPI_Alltoall when every count is the same on every rank (the even redistributions);
    // MPI_Alltoallv of the same bytes otherwise.
    bool uniform = true;
    for (int r = 0; r < p; ++r) uniform = uniform && sc[r] == sc[0] && rc[r] == sc[0];
    double const c0 = static_cast<double>(sc[0]);
    uniform = all_ok(comm_, uniform) && max_over(comm_, c0) == min_over(comm_, c0);
    b.uniform = uniform ? b.scount[0] : -1;
    b.alltoall = true;
  }
  return [this] {
    auto& x = *buf_;
    if (x.uniform >= 0)
      MPI_Alltoall(x.asend.data(), x.uniform, MPI_BYTE, x.arecv.data(), x.uniform, MPI_BYTE, comm_);
    else
      MPI_Alltoallv(x.asend.data(), x.scount.data(), x.sdispl.data(), MPI_BYTE, x.arecv.data(),
                    x.rcount.data(), x.rdispl.data(), MPI_BYTE, comm_);
  };
}

std::function<void()> scenario::pack_op() {
  auto& b = bufs();
  std::size_t const n = std::max(sched_.send_bytes(), sched_.recv_bytes());
  if (b.packed.size() < n) b.packed = touched(n);
  return [this] {
    std::byte* out = buf_->packed.data();
    for (auto const& m : sched_.sends) {
      detail::pack_message(sched_, m, slots_.data(), out);
      out += m.bytes;
    }
  };
}

std::function<void()> scenario::unpack_op() {
  auto& b = bufs();
  std::size_t const n = std::max(sched_.send_bytes(), sched_.recv_bytes());
  if (b.packed.size() < n) b.packed = touched(n);
  return [this] {
    std::byte const* in = buf_->packed.data();
    for (auto const& m : sched_.recvs) {
      detail::unpack_message(sched_, m, slots_.data(), in, detail::combine_op::replace);
      in += m.bytes;
    }
  };
}

// ---- registration --------------------------------------------------------------------------

namespace {

// The scenario whose entries are running (one at a time, to bound memory).
std::string g_key;
std::unique_ptr<scenario> g_current;

// Collective. Returns the scenario of `spec`, building it (and dropping the previous one) when
// needed; nullptr on every rank when building failed on any.
scenario* current(scenario_spec const& spec, benchmark::State& st) {
  if (g_current && g_key == spec.name) return g_current.get();
  g_current.reset();
  g_key.clear();
  std::string err;
  try {
    g_current = spec.make();
  } catch (std::exception const& e) {
    err = e.what();
  }
  if (!all_ok(MPI_COMM_WORLD, err.empty())) {
    g_current.reset();
    st.SkipWithError(err.empty() ? "set-up failed on another rank" : err.c_str());
    return nullptr;
  }
  g_key = spec.name;
  return g_current.get();
}

void describe(benchmark::State& st, scenario const& s) {
  st.counters["bytes_per_rank"] = s.bytes_sent();
  st.counters["peers"] = s.peers();
  st.counters["run_bytes"] = s.run_bytes();
  st.counters["contiguous"] = s.contiguous() ? 1 : 0;
}

// The local limits (memcpy, pack, unpack), measuring inline the ones whose entries were
// filtered out. The transport and alltoall limits are measured interleaved with each backend.
limit_set limits_for(scenario& s, int iterations) {
  auto& l = s.limits();
  MPI_Comm const c = s.comm();
  if (l.memcpy == 0) l.memcpy = measure(c, iterations, s.memcpy_op()).median;
  if (l.pack == 0) l.pack = measure(c, iterations, s.pack_op()).median;
  if (l.unpack == 0) l.unpack = measure(c, iterations, s.unpack_op()).median;
  return l;
}

// Collective. Builds the plan of backend `b` on `s` into `r`; true on every rank when it was
// built on every rank, else false everywhere with this rank's error (if any) in `err`.
bool build_runner(scenario& s, backend b, runner& r, std::string& err) {
  try {
    r = s.make_runner(b);
  } catch (std::exception const& e) {
    err = e.what();
  }
  return all_ok(s.comm(), err.empty());
}

// `auto` and every host backend of the scenario timed in one loop, interleaved round by round:
// the auto / best ratio measured under the same conditions for all of them.
void auto_vs_best(benchmark::State& st, scenario_spec const& spec) {
  scenario* s = current(spec, st);
  if (!s) return;
  MPI_Comm const comm = s->comm();
  std::vector<backend> const bs = bench_backends(); // the explicit ones, then automatic
  std::size_t const n = bs.size();
  std::vector<runner> rs(n);
  std::vector<char> ok(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    std::string err; // a backend this build or MPI lacks is left out
    ok[i] = build_runner(*s, bs[i], rs[i], err) ? 1 : 0;
  }
  if (!ok[n - 1]) {
    st.SkipWithError("the automatic plan could not be built");
    return;
  }
  for (std::size_t i = 0; i < n; ++i)
    if (ok[i]) rs[i].op();
  // One round runs every plan once, in an order shuffled anew each round (the same on every
  // rank: one seed), so that a load change, a machine switching between slow and fast periods,
  // or whatever one plan leaves behind for the next lands on all of them alike. (With a fixed
  // rotation `auto` always ran right after the same backend, and two plans of one backend read
  // 1.14-1.21x apart.)
  std::vector<std::vector<double>> t(n);
  std::vector<std::size_t> order(n);
  std::mt19937 shuffle_rng(12345);
  for (auto _ : st) {
    double auto_t = 0;
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::shuffle(order.begin(), order.end(), shuffle_rng);
    for (std::size_t i : order) {
      if (!ok[i]) continue;
      rs[i].op(); // untimed: each timed run finds its own buffers warm, as in the other entries
      double const x = time_once(comm, rs[i].op);
      t[i].push_back(x);
      if (i == n - 1) auto_t = x;
    }
    st.SetIterationTime(auto_t);
  }
  double best = 0;
  std::size_t best_i = n;
  for (std::size_t i = 0; i + 1 < n; ++i) {
    if (!ok[i] || t[i].empty()) continue;
    double const m = summarize(t[i]).median;
    if (best_i == n || m < best) best = m, best_i = i;
  }
  double const a = summarize(t[n - 1]).median;
  describe(st, *s);
  st.counters["median_us"] = a * 1e6;
  st.counters["auto_us"] = a * 1e6;
  st.counters["best_us"] = best * 1e6;
  st.counters["auto_best"] = best > 0 ? a / best : 0;
  std::string const chosen = rs[n - 1].final_label ? rs[n - 1].final_label() : rs[n - 1].label;
  // Why auto chose what it did, after the loop (its re-check and watch have run by then).
  if (char const* d = std::getenv("HALOX_BENCH_DESCRIBE");
      d && *d && *d != '0' && rs[n - 1].describe) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    if (rank == 0)
      std::fprintf(stderr, "%s: %s\n", spec.name.c_str(), rs[n - 1].describe().c_str());
  }
  st.SetLabel(chosen + " best=" + (best_i < n ? to_string(bs[best_i]) : "none"));
}

} // namespace

std::vector<backend> bench_backends() {
  auto v = host_backends();
  v.push_back(backend::automatic);
  return v;
}

void register_scenario(scenario_spec const& spec) {
  struct limit_entry {
    char const* suffix;
    std::function<void()> (scenario::*op)();
    double limit_set::*slot;
  };
  std::vector<limit_entry> limits{
      {"limit_transport", &scenario::transport_op, &limit_set::transport},
      {"limit_copy_transport", &scenario::copy_transport_op, &limit_set::copy_transport},
      {"limit_memcpy", &scenario::memcpy_op, &limit_set::memcpy}};
  if (spec.alltoall)
    limits.push_back({"limit_alltoall", &scenario::alltoall_op, &limit_set::alltoall});
  limits.push_back({"phase_pack", &scenario::pack_op, &limit_set::pack});
  limits.push_back({"phase_unpack", &scenario::unpack_op, &limit_set::unpack});

  for (auto const& e : limits) {
    add(spec.name + "/" + e.suffix, spec.iterations, [spec, e](benchmark::State& st) {
      scenario* s = current(spec, st);
      if (!s) return;
      auto const op = (s->*e.op)();
      double const bytes = e.slot == &limit_set::memcpy || e.slot == &limit_set::alltoall
                               ? s->bytes_moved()
                               : s->bytes_sent();
      stats const r = timed_loop(st, s->comm(), op, bytes);
      s->limits().*e.slot = r.median;
      describe(st, *s);
    });
  }

  for (backend b : bench_backends()) {
    add(spec.name + "/" + to_string(b), spec.iterations, [spec, b](benchmark::State& st) {
      scenario* s = current(spec, st);
      if (!s) return;
      limit_set const l = limits_for(*s, spec.iterations);
      runner r;
      std::string err;
      double const plan_t0 = MPI_Wtime();
      bool const built = build_runner(*s, b, r, err);
      double const plan_seconds = MPI_Wtime() - plan_t0;
      if (!built) {
        st.SkipWithError(err.empty() ? "plan failed on another rank" : err.c_str());
        return;
      }
      if (!r.label.empty()) st.SetLabel(r.label);
      // The limits this entry is compared with run interleaved with it, iteration by iteration.
      auto const transport = s->transport_op();
      auto const copy_transport = s->copy_transport_op();
      std::function<void()> alltoall;
      if (spec.alltoall) alltoall = s->alltoall_op();
      transport();
      copy_transport();
      if (alltoall) alltoall();
      std::vector<double> tt, tc, ta;
      // Each limit runs once untimed before it is timed, so that it finds its own buffers warm
      // (caches, TLB, the MPI library's registration and shared-memory state) as a standalone
      // loop of it would, not the backend's: a cold limit flatters the backend it is compared
      // with (checked against a plain MPI program: bench/alltoall_check.cpp).
      stats const t = timed_loop(st, s->comm(), r.op, s->bytes_sent(), [&] {
        transport();
        tt.push_back(time_once(s->comm(), transport));
        copy_transport();
        tc.push_back(time_once(s->comm(), copy_transport));
        if (alltoall) {
          alltoall();
          ta.push_back(time_once(s->comm(), alltoall));
        }
        // And the backend once untimed, so that its next timed run finds its own buffers warm
        // too, as each limit does: run cold right after the limits, a 2 MiB strided face took
        // three times as long (its pack buffer and faces evicted, the TLB refilled), which
        // compared a cold backend with warm limits.
        r.op();
      });
      double const lt = summarize(tt).median, lc = summarize(tc).median;
      describe(st, *s);
      if (r.final_label) st.SetLabel(r.final_label());
      st.counters["plan_ms"] = plan_seconds * 1e3; // plan construction (tuning, for auto)
      st.counters["transport_us"] = lt * 1e6;
      st.counters["copy_transport_us"] = lc * 1e6;
      st.counters["memcpy_us"] = l.memcpy * 1e6;
      // The phase model of a pack backend: standalone pack + transport limit + standalone unpack.
      st.counters["model_us"] = (l.pack + lt + l.unpack) * 1e6;
      st.counters["eff_transport"] = t.median > 0 ? lt / t.median : 0;
      st.counters["eff_copy_transport"] = t.median > 0 ? lc / t.median : 0;
      if (alltoall) {
        double const la = summarize(ta).median;
        st.counters["alltoall_us"] = la * 1e6;
        st.counters["eff_alltoall"] = t.median > 0 ? la / t.median : 0;
      }
    });
  }

  add(spec.name + "/auto_vs_best", spec.iterations,
      [spec](benchmark::State& st) { auto_vs_best(st, spec); });
}

} // namespace halox::bench
