#include "common/agreement.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <exception>
#include <map>
#include <vector>

namespace halox::detail {

namespace {

// Splits "name=value; name=value" into ordered (name, value) pairs; an item without '=' is its
// own name with an empty value.
std::vector<std::pair<std::string, std::string>> items(std::string const& s) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t at = 0;
  while (at <= s.size()) {
    std::size_t const end = std::min(s.find("; ", at), s.size());
    std::string const item = s.substr(at, end - at);
    if (!item.empty()) {
      std::size_t const eq = item.find('=');
      if (eq == std::string::npos)
        out.emplace_back(item, "");
      else
        out.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    }
    at = end + 2;
  }
  return out;
}

// `text` from rank `root` to every rank of `comm`.
std::string broadcast(std::string text, int root, MPI_Comm comm) {
  long long n = static_cast<long long>(text.size());
  HALOX_MPI_CHECK(MPI_Bcast(&n, 1, MPI_LONG_LONG, root, comm));
  text.resize(static_cast<std::size_t>(n));
  if (n > 0) HALOX_MPI_CHECK(MPI_Bcast(text.data(), static_cast<int>(n), MPI_CHAR, root, comm));
  return text;
}

} // namespace

std::string describe_difference(std::string const& a, std::string const& b,
                                std::string const& a_name, std::string const& b_name) {
  auto const ia = items(a), ib = items(b);
  std::map<std::string, std::string> mb(ib.begin(), ib.end());
  std::string out;
  auto add = [&](std::string const& name, std::string const& va, std::string const& vb) {
    out += (out.empty() ? "" : "; ") + name + ": " + va + " on " + a_name + ", " + vb + " on " +
           b_name;
  };
  for (auto const& [name, va] : ia) {
    auto it = mb.find(name);
    std::string const vb = it == mb.end() ? "(absent)" : it->second;
    if (vb != va) add(name, va, vb);
    if (it != mb.end()) mb.erase(it);
  }
  for (auto const& [name, vb] : ib)
    if (mb.count(name)) add(name, "(absent)", vb);
  return out.empty() ? a + " on " + a_name + " vs " + b + " on " + b_name : out;
}

void collective_check(MPI_Comm comm, std::string const& what, std::function<void()> const& validate,
                      std::function<std::uint64_t()> const& hash,
                      std::function<std::string()> const& describe) {
  std::exception_ptr local;
  std::uint64_t h = 0;
  try {
    validate();
    h = hash();
  } catch (...) {
    local = std::current_exception();
  }
  int rank = 0;
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  // in[0]: highest failing rank + 1 (0: none); in[1], in[2]: h and ~h.
  // MAX of h and of ~h equal to (h, ~h) on every rank iff all hashes are equal.
  unsigned long long in[3] = {local ? static_cast<unsigned long long>(rank) + 1ull : 0ull,
                              static_cast<unsigned long long>(h),
                              ~static_cast<unsigned long long>(h)};
  unsigned long long out[3] = {0, 0, 0};
  HALOX_MPI_CHECK(MPI_Allreduce(in, out, 3, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm));
  if (local) std::rethrow_exception(local);
  if (out[0] != 0)
    throw error(errc::invalid_argument,
                what + ": rank " + std::to_string(out[0] - 1) +
                    " (of this communicator) rejected its input; see the error printed there and "
                    "fix the input on that rank");
  if (out[1] == in[1] && out[2] == in[2]) return;
  if (!describe)
    throw error(errc::inconsistent_ranks,
                what + ": ranks passed different global descriptions (hash " + std::to_string(h) +
                    " here); every rank must pass the same shape, dtype, grid, halos, "
                    "periodicity and part sizes");
  // Which rank disagrees with rank 0 first, and both descriptions, for every rank to report.
  unsigned long long h0 = h;
  HALOX_MPI_CHECK(MPI_Bcast(&h0, 1, MPI_UNSIGNED_LONG_LONG, 0, comm));
  int const mine = h == h0 ? INT_MAX : rank;
  int first = INT_MAX;
  HALOX_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  std::string const text = describe();
  std::string const d0 = broadcast(rank == 0 ? text : std::string(), 0, comm);
  std::string const dr = broadcast(rank == first ? text : std::string(), first, comm);
  throw error(errc::inconsistent_ranks,
              what + ": ranks passed different global descriptions; " +
                  describe_difference(d0, dr, "rank 0", "rank " + std::to_string(first)) +
                  ". Pass the same values on every rank");
}

void wait_bounded(MPI_Request& req, double timeout, char const* what) {
  if (timeout <= 0) {
    HALOX_MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    return;
  }
  auto const until = deadline_after(timeout);
  for (;;) {
    int done = 0;
    HALOX_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (clock_type::now() > until) {
      std::string const msg =
          std::string(what) + " did not complete within " + std::to_string(timeout) +
          " s: a rank of the communicator has not reached the same call (it failed, or builds "
          "plans in another order); raise HALOX_TIMEOUT if the ranks are only slow";
      std::fprintf(stderr, "halox: %s\n", msg.c_str());
      throw error(errc::timeout, msg);
    }
  }
}

void allreduce_bounded(void const* in, void* out, int n, MPI_Datatype type, MPI_Op op,
                       MPI_Comm comm, double timeout, char const* what) {
  MPI_Request req = MPI_REQUEST_NULL;
  HALOX_MPI_CHECK(MPI_Iallreduce(in, out, n, type, op, comm, &req));
  wait_bounded(req, timeout, what);
}

std::string broadcast_text(std::string const& text, int root, MPI_Comm comm, double timeout,
                           char const* what) {
  int rank = 0;
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  // Clamped, not checked: a rank that threw here would leave the others in the broadcast.
  int n = rank == root ? static_cast<int>(std::min<std::size_t>(text.size(), INT_MAX)) : 0;
  MPI_Request req = MPI_REQUEST_NULL;
  HALOX_MPI_CHECK(MPI_Ibcast(&n, 1, MPI_INT, root, comm, &req));
  wait_bounded(req, timeout, what);
  std::string out = rank == root ? text.substr(0, static_cast<std::size_t>(n))
                                 : std::string(static_cast<std::size_t>(n), '\0');
  HALOX_MPI_CHECK(MPI_Ibcast(out.data(), n, MPI_CHAR, root, comm, &req));
  wait_bounded(req, timeout, what);
  return out;
}

std::pair<int, std::string> lowest_problem(std::string const& problem, MPI_Comm comm,
                                           double timeout, char const* what) {
  int rank = 0, size = 1;
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  int const mine = problem.empty() ? size : rank;
  int first = size;
  allreduce_bounded(&mine, &first, 1, MPI_INT, MPI_MIN, comm, timeout, what);
  if (first == size) return {-1, std::string()};
  return {first, broadcast_text(problem, first, comm, timeout, what)};
}

} // namespace halox::detail
