#include "peers/peer.hpp"

#include <halox/backend.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

namespace halox::bench::peers {

namespace {

bool g_failed = false;

// Runs `f`; returns "" or the message of what it threw.
template <class F> std::string attempt(F&& f) {
  try {
    f();
    return {};
  } catch (std::exception const& e) {
    return e.what();
  }
}

// Collective: true when `err` is empty on every rank; otherwise skips the entry with this rank's
// message (or says that another rank failed).
bool agreed(benchmark::State& st, std::string const& err, char const* what) {
  if (all_ok(MPI_COMM_WORLD, err.empty())) return true;
  std::string const msg = err.empty() ? std::string(what) + " failed on another rank" : err;
  st.SkipWithError(msg.c_str());
  return false;
}

std::vector<std::byte> touched(double bytes) {
  std::vector<std::byte> v(static_cast<std::size_t>(bytes));
  std::memset(v.data(), 0x5a, v.size());
  return v;
}

} // namespace

bool all_verified() noexcept { return !g_failed; }

void register_peer(scenario_spec const& twin, std::string const& suffix,
                   std::function<peer_op()> make) {
  std::string const name = twin.name + "/" + suffix;
  add(name, twin.iterations, [twin, make, name](benchmark::State& st) {
    std::unique_ptr<scenario> s;
    peer_op p;
    if (!agreed(st, attempt([&] { p = make(); }), "the peer's set-up")) return;

    // Checked before halox's twin is built: a peer that gives wrong results is not timed.
    std::string bad;
    std::string err = attempt([&] { bad = p.verify(); });
    if (err.empty()) err = bad;
    if (!all_ok(MPI_COMM_WORLD, err.empty())) {
      g_failed = true;
      if (!err.empty())
        std::fprintf(stderr, "halox-bench-peers: %s: rank %d: %s\n", name.c_str(), world_rank(),
                     err.c_str());
      st.SkipWithError(("result check failed: " + (err.empty() ? "on another rank" : err)).c_str());
      return;
    }

    if (!agreed(st, attempt([&] { s = twin.make(); }), "halox's twin set-up")) return;
    runner h;
    if (!agreed(st, attempt([&] { h = s->make_runner(backend::automatic); }), "halox's plan"))
      return;
    MPI_Comm const comm = s->comm();

    auto const transport = s->transport_op();
    std::function<void()> alltoall;
    if (twin.alltoall) alltoall = s->alltoall_op();

    double owned_copy = 0;
    if (p.owned_copy_bytes > 0) {
      auto src = touched(p.owned_copy_bytes), dst = touched(p.owned_copy_bytes);
      // A reference, not a contender: a few dozen copies give its median.
      owned_copy = measure(comm, std::min(twin.iterations, 50), [&] {
                     std::memcpy(dst.data(), src.data(), src.size());
                   }).median;
    }

    // halox's twin is warmed until steady, as timed_loop warms the peer.
    (void)warm_up(comm, h.op);
    transport();
    if (alltoall) alltoall();
    std::vector<double> th, tt, ta;
    std::size_t turn = 0;
    stats const t = timed_loop(st, comm, p.run, s->bytes_sent(), [&] {
      // On a loaded machine the call right after a long one (PETSc's copies the whole owned
      // block) is the likeliest to lose its core to the scheduler: halox and the limits take
      // turns in that place.
      auto const halox = [&] { th.push_back(time_once(comm, h.op)); };
      auto const limits = [&] {
        tt.push_back(time_once(comm, transport));
        if (alltoall) ta.push_back(time_once(comm, alltoall));
      };
      if (turn++ % 2 == 0) {
        halox();
        limits();
      } else {
        limits();
        halox();
      }
    });
    stats const sh = summarize(th), stt = summarize(tt);
    double const lh = sh.median, lt = stt.median;
    std::string label = "halox " + h.label;
    if (!p.label.empty()) label += "; " + p.label;
    st.SetLabel(label);
    st.counters["bytes_per_rank"] = s->bytes_sent();
    st.counters["peers"] = s->peers();
    st.counters["run_bytes"] = s->run_bytes();
    st.counters["contiguous"] = s->contiguous() ? 1 : 0;
    st.counters["halox_us"] = lh * 1e6;
    st.counters["transport_us"] = lt * 1e6;
    st.counters["ratio_halox"] = t.median > 0 ? lh / t.median : 0;
    // The fastest iterations, for a machine whose load makes the medians move: the best case
    // of each is the least disturbed by the scheduler.
    st.counters["halox_min_us"] = sh.min * 1e6;
    st.counters["transport_min_us"] = stt.min * 1e6;
    st.counters["ratio_halox_min"] = t.min > 0 ? sh.min / t.min : 0;
    st.counters["eff_transport"] = t.median > 0 ? lt / t.median : 0;
    st.counters["halox_eff_transport"] = lh > 0 ? lt / lh : 0;
    if (p.owned_copy_bytes > 0) st.counters["owned_copy_us"] = owned_copy * 1e6;
    if (alltoall) {
      double const la = summarize(ta).median;
      st.counters["alltoall_us"] = la * 1e6;
      st.counters["eff_alltoall"] = t.median > 0 ? la / t.median : 0;
      st.counters["halox_eff_alltoall"] = lh > 0 ? la / lh : 0;
    }
  });
}

} // namespace halox::bench::peers
