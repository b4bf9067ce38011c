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

placement place_buffers(std::vector<std::size_t> const& sizes, std::vector<buffer_use> const& uses,
                        std::size_t align) {
  std::size_t const n = sizes.size();
  std::vector<std::vector<buffer_use>> by(n);
  for (buffer_use const& u : uses) by.at(u.buffer).push_back(u);
  std::vector<std::vector<span>> life(n);
  for (std::size_t b = 0; b < n; ++b) {
    std::stable_sort(by[b].begin(), by[b].end(),
                     [](buffer_use const& x, buffer_use const& y) { return x.time < y.time; });
    life[b] = spans_of(by[b]);
  }
  auto rounded = [&](std::size_t v) { return (v + align - 1) / align * align; };
  std::vector<std::size_t> order(n);
  for (std::size_t b = 0; b < n; ++b) order[b] = b;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return sizes[x] > sizes[y]; });
  placement p;
  p.offset.assign(n, 0);
  std::vector<std::size_t> placed;
  std::vector<std::pair<std::size_t, std::size_t>> busy;
  for (std::size_t b : order) {
    p.unplanned += rounded(sizes[b]);
    busy.clear();
    for (std::size_t o : placed)
      if (meet(life[b], life[o])) busy.emplace_back(p.offset[o], p.offset[o] + rounded(sizes[o]));
    std::sort(busy.begin(), busy.end());
    std::size_t at = 0;
    for (auto const& [lo, hi] : busy) {
      if (at + rounded(sizes[b]) <= lo) break;
      at = std::max(at, hi);
    }
    p.offset[b] = at;
    p.bytes = std::max(p.bytes, at + rounded(sizes[b]));
    if (sizes[b] > 0) placed.push_back(b);
  }
  return p;
}

} // namespace trainer
