#include <halox/ops/memory_budget.hpp>

#include "common/agreement.hpp"
#include "common/environment.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

namespace halox::ops {

namespace {

std::string mib(std::size_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

char const* space_name(memory_space s) { return s == memory_space::host ? "host" : "device"; }

} // namespace

std::string budget_fit::describe() const {
  std::ostringstream os;
  os << "needs " << mib(need) << " of " << mib(limit) << " (least " << mib(least)
     << "); reorders kept " << mib(kept_reorders) << ", dropped " << mib(dropped_reorders);
  if (!dropped.empty()) {
    os << " (";
    for (std::size_t i = 0; i < dropped.size(); ++i) os << (i ? ", " : "") << dropped[i];
    os << ")";
  }
  os << "; the most over the ranks " << mib(most_need) << " on rank " << most_rank;
  return os.str();
}

memory_budget::memory_budget(std::size_t bytes, MPI_Comm comm, memory_space space)
    : limit_(bytes), comm_(comm), space_(space) {
  HALOX_REQUIRE(bytes > 0, errc::invalid_argument,
                "memory_budget: a budget of 0 bytes fits nothing; pass the bytes each rank may "
                "use (for example 2 << 30 for 2 GiB)");
  HALOX_REQUIRE(comm != MPI_COMM_NULL, errc::invalid_argument,
                "memory_budget: comm is MPI_COMM_NULL; pass the communicator of the ranks that "
                "call fit together (every rank of the operators' grids)");
}

void memory_budget::add(std::string name, std::function<memory_use()> use,
                        std::function<void(bool)> keep_reorders) {
  HALOX_REQUIRE(static_cast<bool>(use), errc::invalid_argument,
                "memory_budget::add(\"" + name +
                    "\"): the memory function is empty; pass one returning the object's "
                    "memory_use");
  entries_.push_back({std::move(name), std::move(use), std::move(keep_reorders)});
}

std::size_t memory_budget::in_space(memory_use const& m) const noexcept {
  return space_ == memory_space::host ? m.held_host + m.call_host : m.held_device + m.call_device;
}

std::size_t memory_budget::scratch() const noexcept {
  shared_scratch const s = shared_scratch_bytes();
  return space_ == memory_space::host ? s.host : s.device;
}

std::size_t memory_budget::used() const {
  std::size_t u = scratch();
  for (entry const& e : entries_) u += in_space(e.use());
  return u;
}

budget_fit memory_budget::fit(std::size_t caller_bytes) {
  std::size_t const n = entries_.size();
  std::vector<memory_use> uses(n);
  for (std::size_t i = 0; i < n; ++i) uses[i] = entries_[i].use();
  // Kept reorders are host memory, and only an entry that can switch them off can lose them.
  bool const host = space_ == memory_space::host;
  auto droppable = [&](std::size_t i) { return host && static_cast<bool>(entries_[i].keep); };

  budget_fit f;
  f.limit = limit_;
  // What each entry uses keeping no reorder it can drop.
  std::vector<std::size_t> own(n);
  std::size_t ops = 0, largest = 0;
  std::size_t const shared = scratch();
  for (std::size_t i = 0; i < n; ++i) {
    own[i] = in_space(uses[i]) - (droppable(i) ? uses[i].kept_reorders : 0);
    ops += own[i];
    if (own[i] > own[largest]) largest = i;
  }
  f.least = caller_bytes + shared + ops;

  // Largest first into the room left: each kept byte saves about the same reordering time, so
  // the most bytes kept is the fastest choice; ties keep the order the operators were added in.
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < n; ++i)
    if (droppable(i) && uses[i].keepable_reorders) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return uses[a].keepable_reorders > uses[b].keepable_reorders;
  });
  std::size_t room = limit_ > f.least ? limit_ - f.least : 0;
  std::vector<char> keep(n, 0);
  for (std::size_t i : order) {
    if (uses[i].keepable_reorders <= room) {
      keep[i] = 1;
      room -= uses[i].keepable_reorders;
      f.kept_reorders += uses[i].keepable_reorders;
    } else {
      f.dropped_reorders += uses[i].keepable_reorders;
      f.dropped.push_back(entries_[i].name);
    }
  }
  f.need = f.least + f.kept_reorders;

  int rank = 0, size = 1;
  HALOX_MPI_CHECK(MPI_Comm_rank(comm_, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(comm_, &size));
  double const timeout = halox::detail::settings::timeout_seconds().value_or(300.0);
  // Limits may differ between ranks (nodes of different memory): each rank checks its own, and
  // the rank that fails by the most bytes explains.
  unsigned long mine[3] = {f.need, f.least, f.least > limit_ ? f.least - limit_ : 0};
  unsigned long most[3] = {0, 0, 0};
  halox::detail::allreduce_bounded(mine, most, 3, MPI_UNSIGNED_LONG, MPI_MAX, comm_, timeout,
                                   "memory_budget::fit (the largest needs)");
  int who[2] = {mine[0] == most[0] ? rank : INT_MAX, mine[2] == most[2] ? rank : INT_MAX};
  halox::detail::allreduce_bounded(MPI_IN_PLACE, who, 2, MPI_INT, MPI_MIN, comm_, timeout,
                                   "memory_budget::fit (the ranks that need the most)");
  f.most_need = most[0];
  f.most_rank = who[0];

  if (most[2] > 0) {
    std::string text;
    if (rank == who[1]) {
      std::ostringstream os;
      os << "memory_budget of " << limit_ << " bytes (" << mib(limit_) << ") of "
         << space_name(space_) << " memory per rank: rank " << rank << " needs at least " << f.least
         << " bytes (" << mib(f.least) << ") with no reorder kept: the operators " << mib(ops);
      if (n) os << " (the largest, " << entries_[largest].name << ", " << mib(own[largest]) << ")";
      os << ", their shared scratch " << mib(shared) << ", the caller's buffers "
         << mib(caller_bytes) << ". Raise the budget to at least " << f.least
         << " bytes, hold fewer buffers in the caller (recompute activations in backward), or ";
      // Activations, operator buffers and scratch shrink about in proportion as more ranks
      // split the tensors; a rough count, not a promise.
      double const ranks = std::ceil(static_cast<double>(size) * static_cast<double>(f.least) /
                                     static_cast<double>(limit_));
      os << "split the tensors over more ranks (about " << static_cast<long>(ranks)
         << " instead of " << size << ", where everything shrinks with the rank count)";
      text = os.str();
    }
    text = halox::detail::broadcast_text(text, who[1], comm_, timeout,
                                         "memory_budget::fit (the message)");
    throw error(errc::out_of_memory, text);
  }
  // Applied only when everything fits, so that a failed fit changes nothing.
  for (std::size_t i = 0; i < n; ++i)
    if (droppable(i) && (uses[i].keepable_reorders || uses[i].kept_reorders))
      entries_[i].keep(keep[i] != 0);
  return f;
}

std::string memory_budget::describe() const {
  std::ostringstream os;
  char line[200];
  std::snprintf(line, sizeof line, "%-24s %14s %14s %16s\n", "operator", "held", "call",
                "kept reorders");
  os << line;
  bool const host = space_ == memory_space::host;
  std::size_t total = 0;
  for (entry const& e : entries_) {
    memory_use const m = e.use();
    std::size_t const held = host ? m.held_host : m.held_device;
    std::size_t const call = host ? m.call_host : m.call_device;
    total += held + call;
    std::string kept = "-";
    if (host && (m.kept_reorders || m.keepable_reorders))
      kept = m.kept_reorders ? mib(m.kept_reorders) : "off (" + mib(m.keepable_reorders) + ")";
    std::snprintf(line, sizeof line, "%-24s %14s %14s %16s\n", e.name.c_str(), mib(held).c_str(),
                  mib(call).c_str(), kept.c_str());
    os << line;
  }
  std::size_t const s = scratch();
  std::snprintf(line, sizeof line, "%-24s %14s\n", "shared scratch", mib(s).c_str());
  os << line;
  std::snprintf(line, sizeof line, "%-24s %14s of %s (%s memory)\n", "total",
                mib(total + s).c_str(), mib(limit_).c_str(), space_name(space_));
  os << line;
  return os.str();
}

} // namespace halox::ops
