#include "budget.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace trainer {

process_memory read_process_memory() {
  process_memory m;
  std::ifstream f("/proc/self/status");
  std::string key;
  std::size_t kb = 0;
  while (f >> key) {
    if (key == "VmRSS:" && f >> kb) m.rss = kb * 1024;
    if (key == "VmHWM:" && f >> kb) m.peak = kb * 1024;
  }
  return m;
}

bool reset_peak_memory() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  return static_cast<bool>(f.flush());
}

std::string mib(std::size_t bytes) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

template <class T>
memory_budget<T>::memory_budget(options const& o, std::size_t fixed, MPI_Comm world)
    : o_(o), fixed_(fixed), world_(world) {}

template <class T>
std::vector<memory_plan> memory_budget<T>::candidates(network<T> const& net) const {
  std::size_t const all = static_cast<std::size_t>(-1), some = memory_plan::auto_keep;
  std::vector<std::size_t> keeps;
  if (o_.keep_reorders == "on")
    keeps = {all};
  else if (o_.keep_reorders == "off")
    keeps = {0};
  else
    keeps = o_.max_memory ? std::vector<std::size_t>{some, 0} : std::vector<std::size_t>{some};
  std::vector<int> segs;
  if (o_.segments > 0) {
    segs = {o_.segments};
  } else if (o_.max_memory) {
    int const most = std::min<int>(16, static_cast<int>(net.segment_starts().size()) + 1);
    for (int k = 1; k <= most; ++k) segs.push_back(k);
  } else {
    segs = {1};
  }
  // Least recomputation first: the reorders dropped, then the cheap layers recomputed, then
  // segments.
  std::vector<memory_plan> c;
  auto add = [&](memory_plan p, bool cheap) {
    p.recompute_cheap = cheap;
    c.push_back(std::move(p));
  };
  for (int k : segs) {
    if (k == segs.front()) {
      for (std::size_t keep : keeps) add(net.segmented(k, keep), o_.recompute_cheap);
      if (o_.max_memory && !o_.recompute_cheap && k == 1) add(net.segmented(k, keeps.back()), true);
    } else {
      add(net.segmented(k, keeps.back()), o_.recompute_cheap);
    }
  }
  return c;
}

template <class T> memory_plan memory_budget<T>::initial(network<T> const& net) const {
  std::vector<memory_plan> const c = candidates(net);
  if (!o_.max_memory) return c.front();
  // Every rank must run the same schedule (recomputation makes collective calls): the plan of
  // least arena bytes on the rank that needs the most, a tie going to the one that keeps none.
  std::vector<unsigned long> mine(c.size());
  for (std::size_t k = 0; k < c.size(); ++k)
    mine[k] = fixed_ + net.arena_bytes(c[k]) + (c[k].keep_reorders ? 1 : 0);
  std::vector<unsigned long> need(c.size());
  MPI_Allreduce(mine.data(), need.data(), static_cast<int>(need.size()), MPI_UNSIGNED_LONG, MPI_MAX,
                world_);
  std::size_t const best =
      static_cast<std::size_t>(std::min_element(need.begin(), need.end()) - need.begin());
  // Before any step only the parameters and the arena are known; a budget that cannot hold
  // even those fails now, on every rank alike, naming the rank that needs the most.
  if (need[best] > o_.max_memory) {
    int rank = 0;
    MPI_Comm_rank(world_, &rank);
    unsigned long most = mine[best] == need[best] ? static_cast<unsigned long>(rank) : 0;
    MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_UNSIGNED_LONG, MPI_MAX, world_);
    none_fits(need[best], static_cast<int>(most));
  }
  return c[best];
}

template <class T>
memory_plan memory_budget<T>::choose(network<T> const& net, std::size_t grown) const {
  std::vector<memory_plan> const c = candidates(net);
  std::size_t const accounted = fixed_ + net.memory().total();
  overhead_ = grown > accounted ? grown - accounted : 0;
  std::vector<std::size_t> need(c.size());
  std::size_t first = c.size(), least = static_cast<std::size_t>(-1);
  for (std::size_t k = 0; k < c.size(); ++k) {
    need[k] = fixed_ + overhead_ + net.predict(c[k]);
    least = std::min(least, need[k]);
    if (first == c.size() && need[k] <= o_.max_memory) first = k;
  }
  int rank = 0;
  MPI_Comm_rank(world_, &rank);
  // The latest candidate any rank needs; where one fits nowhere, the largest least need.
  unsigned long mine[3] = {first, least, 0}, most[3] = {0, 0, 0};
  MPI_Allreduce(mine, most, 2, MPI_UNSIGNED_LONG, MPI_MAX, world_);
  mine[2] = least == most[1] ? static_cast<unsigned long>(rank) : 0;
  MPI_Allreduce(MPI_IN_PLACE, &mine[2], 1, MPI_UNSIGNED_LONG, MPI_MAX, world_);
  if (most[0] >= c.size()) none_fits(most[1], static_cast<int>(mine[2]));
  predicted_ = need[most[0]];
  return c[most[0]];
}

template <class T> void memory_budget<T>::none_fits(std::size_t need, int rank_needing) const {
  int size = 1;
  MPI_Comm_size(world_, &size);
  std::ostringstream os;
  os << "--max-memory " << o_.max_memory << " (" << mib(o_.max_memory) << "): rank " << rank_needing
     << " needs at least " << need << " bytes (" << mib(need)
     << ") for a training step, with every kept reorder dropped and the segments recomputed "
        "that need the least; the parameters, their gradients and momentum take "
     << mib(fixed_) << " of it";
  if (overhead_) os << ", code and caches of the libraries " << mib(overhead_);
  os << ". ";
  std::size_t const fixed = fixed_ + overhead_;
  if (o_.max_memory > fixed) {
    // Everything but the parameters and the libraries shrinks about in proportion as more ranks
    // split the activations.
    double const scale =
        static_cast<double>(need - fixed) / static_cast<double>(o_.max_memory - fixed);
    long const ranks = static_cast<long>(std::ceil(size * scale));
    os << "About " << ranks << " ranks splitting the activations (spatial or sample) would fit, "
       << "or a batch about " << std::max(1L, static_cast<long>(o_.batch / scale)) << " (--batch "
       << o_.batch << " now); or raise --max-memory to " << need << ".";
  } else {
    os << "The parameters and the libraries alone exceed it: raise --max-memory above " << fixed
       << ".";
  }
  throw halox::error(halox::errc::out_of_memory, os.str());
}

template <class T> std::string memory_budget<T>::describe(memory_plan const& p) const {
  std::ostringstream os;
  os << "memory plan: reorders "
     << (p.keep_reorders == 0 ? "not kept"
         : p.keep_reorders == static_cast<std::size_t>(-1)
             ? "kept"
             : "kept for inputs up to " + mib(p.keep_reorders))
     << ", ";
  if (p.segments.empty()) {
    os << (p.recompute_cheap ? "batch norm, pooling and ReLU outputs recomputed in backward"
                             : "no recomputation");
  } else {
    if (p.recompute_cheap) os << "batch norm, pooling and ReLU outputs recomputed, ";
    os << p.segments.size() + 1 << " segments (forward recomputed in backward from layers 0";
    for (std::size_t a : p.segments) os << ", " << a;
    os << "; the last one is not recomputed)";
  }
  if (o_.max_memory) {
    os << "; budget " << mib(o_.max_memory) << " per rank";
    if (predicted_) os << ", predicted " << mib(predicted_) << " on this rank";
  }
  return os.str();
}

template class memory_budget<float>;
template class memory_budget<double>;

} // namespace trainer
