#include "memory_plan.hpp"

#include <algorithm>
#include <utility>

namespace trainer {

namespace {
struct span {
  long first, last;
};

// The spans of one buffer from its uses sorted by time.
std::vector<span> spans_of(std::vector<buffer_use> const& u) {
  std::vector<span> s;
  for (std::size_t k = 0; k < u.size();) {
    long const t = u[k].time;
    bool writes = true; // every use at time t writes: the content before t is dead
    for (; k < u.size() && u[k].time == t; ++k) writes = writes && u[k].writes;
    if (writes || s.empty())
      s.push_back({t, t});
    else
      s.back().last = t;
  }
  return s;
}

bool meet(std::vector<span> const& a, std::vector<span> const& b) {
  for (span const& x : a)
    for (span const& y : b)
      if (x.first <= y.last && y.first <= x.last) return true;
  return false;
}
} // namespace

namespace {
// One greedy placement: buffers in `order`, each at the lowest offset clear of the placed
// buffers it meets (`tightest`: in the smallest gap that holds it).
placement greedy(std::vector<std::size_t> const& sizes, std::vector<std::vector<span>> const& life,
                 std::vector<std::size_t> const& order, std::size_t align, bool tightest) {
  auto rounded = [&](std::size_t v) { return (v + align - 1) / align * align; };
  placement p;
  p.offset.assign(sizes.size(), 0);
  std::vector<std::size_t> placed;
  std::vector<std::pair<std::size_t, std::size_t>> busy;
  for (std::size_t b : order) {
    std::size_t const need = rounded(sizes[b]);
    p.unplanned += need;
    busy.clear();
    for (std::size_t o : placed)
      if (meet(life[b], life[o])) busy.emplace_back(p.offset[o], p.offset[o] + rounded(sizes[o]));
    std::sort(busy.begin(), busy.end());
    std::size_t at = 0, best = static_cast<std::size_t>(-1),
                best_gap = static_cast<std::size_t>(-1);
    for (auto const& [lo, hi] : busy) {
      if (at + need <= lo) {
        if (!tightest) break;
        if (lo - at < best_gap) best_gap = lo - at, best = at;
      }
      at = std::max(at, hi);
    }
    if (tightest && best != static_cast<std::size_t>(-1)) at = best;
    p.offset[b] = at;
    p.bytes = std::max(p.bytes, at + need);
    if (sizes[b] > 0) placed.push_back(b);
  }
  return p;
}
} // namespace

placement place_buffers(std::vector<std::size_t> const& sizes, std::vector<buffer_use> const& uses,
                        std::size_t align) {
  std::size_t const n = sizes.size();
  std::vector<std::vector<buffer_use>> by(n);
  for (buffer_use const& u : uses) by.at(u.buffer).push_back(u);
  std::vector<std::vector<span>> life(n);
  long t_end = 0;
  for (std::size_t b = 0; b < n; ++b) {
    std::stable_sort(by[b].begin(), by[b].end(),
                     [](buffer_use const& x, buffer_use const& y) { return x.time < y.time; });
    life[b] = spans_of(by[b]);
    for (span const& s : life[b]) t_end = std::max(t_end, s.last);
  }
  auto rounded = [&](std::size_t v) { return (v + align - 1) / align * align; };
  // The lower bound: the bytes live at the busiest time.
  std::size_t live_peak = 0;
  for (long t = 0; t <= t_end; ++t) {
    std::size_t live = 0;
    for (std::size_t b = 0; b < n; ++b)
      for (span const& s : life[b])
        if (s.first <= t && t <= s.last) {
          live += rounded(sizes[b]);
          break;
        }
    live_peak = std::max(live_peak, live);
  }
  auto duration = [&](std::size_t b) {
    long d = 0;
    for (span const& s : life[b]) d += s.last - s.first + 1;
    return d;
  };
  auto first = [&](std::size_t b) { return life[b].empty() ? 0L : life[b].front().first; };
  std::vector<std::size_t> base(n);
  for (std::size_t b = 0; b < n; ++b) base[b] = b;
  std::vector<std::vector<std::size_t>> orders;
  auto sorted = [&](auto key) {
    std::vector<std::size_t> o = base;
    std::stable_sort(o.begin(), o.end(), key);
    orders.push_back(o);
  };
  sorted([&](std::size_t x, std::size_t y) { return sizes[x] > sizes[y]; });
  sorted([&](std::size_t x, std::size_t y) {
    return static_cast<double>(sizes[x]) * duration(x) >
           static_cast<double>(sizes[y]) * duration(y);
  });
  sorted([&](std::size_t x, std::size_t y) { return duration(x) > duration(y); });
  sorted([&](std::size_t x, std::size_t y) {
    return first(x) < first(y) || (first(x) == first(y) && sizes[x] > sizes[y]);
  });
  placement best;
  bool have = false;
  for (auto const& o : orders)
    for (bool tight : {false, true}) {
      placement p = greedy(sizes, life, o, align, tight);
      if (!have || p.bytes < best.bytes) best = std::move(p), have = true;
    }
  best.live_peak = live_peak;
  return best;
}

} // namespace trainer
