// Pure placement of a process grid on a machine (see include/halox/topology.hpp).
#include <halox/dtype.hpp>
#include <halox/error.hpp>
#include <halox/topology.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <sstream>
#include <utility>

namespace halox {

namespace {

std::string vec_str(std::vector<int> const& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "x" : "") + std::to_string(v[i]);
  return s;
}

// Checks `dims` and returns the number of grid positions.
int grid_size(std::vector<int> const& dims) {
  HALOX_REQUIRE(!dims.empty() && dims.size() <= static_cast<std::size_t>(max_dims),
                errc::invalid_argument,
                "grid rank " + std::to_string(dims.size()) + " is not supported; use 1 to " +
                    std::to_string(max_dims) + " dimensions");
  long long p = 1;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    HALOX_REQUIRE(dims[d] > 0, errc::invalid_argument,
                  "process count " + std::to_string(dims[d]) + " on dim " + std::to_string(d) +
                      " must be positive");
    p *= dims[d];
    HALOX_REQUIRE(p <= max_grid_ranks, errc::invalid_argument,
                  "grid " + vec_str(dims) + " has more than " + std::to_string(max_grid_ranks) +
                      " processes; use at most that many");
  }
  return static_cast<int>(p);
}

void check_weights(std::vector<double> const& face_bytes, std::vector<bool> const& periodic,
                   std::size_t nd) {
  HALOX_REQUIRE(face_bytes.size() == nd, errc::invalid_argument,
                "face_bytes has " + std::to_string(face_bytes.size()) +
                    " entries for a grid of rank " + std::to_string(nd) +
                    "; give one per dimension");
  for (std::size_t d = 0; d < nd; ++d)
    HALOX_REQUIRE(std::isfinite(face_bytes[d]) && face_bytes[d] >= 0, errc::invalid_argument,
                  "face_bytes " + std::to_string(face_bytes[d]) + " on dim " + std::to_string(d) +
                      " must be finite and not negative");
  HALOX_REQUIRE(periodic.empty() || periodic.size() == nd, errc::invalid_argument,
                "periodic has " + std::to_string(periodic.size()) +
                    " entries; give one per dimension or none");
}

// Node and socket labels renumbered 0, 1, ... by first appearance (sockets per node).
struct normal_machine {
  std::vector<int> node, socket; // per process
  int nodes = 0, sockets = 0;    // distinct nodes, distinct (node, socket) pairs
};

normal_machine normalise(std::vector<rank_place> const& machine) {
  normal_machine m;
  std::map<int, int> node_id;
  std::map<std::pair<int, int>, int> socket_id; // (node, socket label) -> index within node
  std::vector<int> sockets_on;                  // per node index
  for (auto const& p : machine) {
    auto n = node_id.emplace(p.node, static_cast<int>(node_id.size())).first->second;
    if (n == static_cast<int>(sockets_on.size())) sockets_on.push_back(0);
    auto s = socket_id.emplace(std::make_pair(n, p.socket), sockets_on[n]);
    if (s.second) ++sockets_on[n];
    m.node.push_back(n);
    m.socket.push_back(s.first->second);
  }
  m.nodes = static_cast<int>(node_id.size());
  m.sockets = static_cast<int>(socket_id.size());
  return m;
}

topology_cost cost_of(normal_machine const& m, std::vector<int> const& dims,
                      std::vector<double> const& w, std::vector<bool> const& periodic,
                      std::vector<int> const& process_of) {
  std::size_t const nd = dims.size();
  std::vector<long long> stride(nd, 1);
  for (std::size_t d = nd - 1; d > 0; --d) stride[d - 1] = stride[d] * dims[d];
  std::vector<int> c(nd, 0);
  topology_cost cost;
  long long const n = static_cast<long long>(process_of.size());
  for (long long pos = 0; pos < n; ++pos) {
    int const a = process_of[pos];
    for (std::size_t d = 0; d < nd; ++d) {
      if (dims[d] < 2 || w[d] == 0) continue;
      long long nb = -1;
      if (c[d] + 1 < dims[d])
        nb = pos + stride[d];
      else if (!periodic.empty() && periodic[d])
        nb = pos - static_cast<long long>(dims[d] - 1) * stride[d];
      if (nb < 0) continue;
      int const b = process_of[nb];
      if (m.node[a] != m.node[b])
        cost.inter_node += w[d];
      else if (m.socket[a] != m.socket[b])
        cost.inter_socket += w[d];
    }
    for (std::size_t d = nd; d-- > 0;) { // advance the row-major coordinates
      if (++c[d] < dims[d]) break;
      c[d] = 0;
    }
  }
  return cost;
}

// a is clearly smaller than b (costs are sums of doubles: ignore rounding noise).
bool less(double a, double b) { return a < b - 1e-9 * std::max(1.0, std::fabs(b)); }
bool better(topology_cost const& a, topology_cost const& b) {
  if (less(a.inter_node, b.inter_node)) return true;
  if (less(b.inter_node, a.inter_node)) return false;
  return less(a.inter_socket, b.inter_socket);
}

// Every shape whose sides divide `outer`'s (in a fixed order), at most `cap` of them.
std::vector<std::vector<int>> divisor_shapes(std::vector<int> const& outer, std::size_t cap) {
  std::vector<std::vector<int>> per_dim(outer.size());
  for (std::size_t d = 0; d < outer.size(); ++d)
    for (int f = 1; f <= outer[d]; ++f)
      if (outer[d] % f == 0) per_dim[d].push_back(f);
  std::vector<std::vector<int>> out;
  std::vector<std::size_t> at(outer.size(), 0);
  for (;;) {
    std::vector<int> b(outer.size());
    for (std::size_t d = 0; d < outer.size(); ++d) b[d] = per_dim[d][at[d]];
    out.push_back(std::move(b));
    if (out.size() >= cap) break;
    std::size_t d = 0;
    while (d < outer.size() && ++at[d] == per_dim[d].size()) at[d++] = 0;
    if (d == outer.size()) break;
  }
  return out;
}

// Grid positions in blocked order: boxes of shape `b1` row-major over the grid, inside each the
// boxes of shape `b2` (sides dividing b1's) row-major, inside each the cells row-major.
std::vector<int> blocked_order(std::vector<int> const& dims, std::vector<int> const& b1,
                               std::vector<int> const& b2) {
  std::size_t const nd = dims.size();
  long long n = 1, in1 = 1, in2 = 1;
  for (std::size_t d = 0; d < nd; ++d) {
    n *= dims[d];
    in1 *= b1[d] / b2[d];
    in2 *= b2[d];
  }
  std::vector<int> order(static_cast<std::size_t>(n));
  std::vector<int> c(nd, 0);
  for (long long pos = 0; pos < n; ++pos) {
    long long outer = 0, mid = 0, inner = 0;
    for (std::size_t d = 0; d < nd; ++d) {
      outer = outer * (dims[d] / b1[d]) + c[d] / b1[d];
      mid = mid * (b1[d] / b2[d]) + (c[d] % b1[d]) / b2[d];
      inner = inner * b2[d] + c[d] % b2[d];
    }
    order[static_cast<std::size_t>((outer * in1 + mid) * in2 + inner)] = static_cast<int>(pos);
    for (std::size_t d = nd; d-- > 0;) {
      if (++c[d] < dims[d]) break;
      c[d] = 0;
    }
  }
  return order;
}

} // namespace

std::vector<double> halo_face_bytes(std::vector<index_t> const& shape, std::vector<int> const& dims,
                                    std::vector<int> const& halo_lo,
                                    std::vector<int> const& halo_hi, std::size_t element_size) {
  std::size_t const nd = dims.size();
  grid_size(dims);
  HALOX_REQUIRE(shape.size() == nd, errc::invalid_argument,
                "shape has " + std::to_string(shape.size()) + " dimensions but dims has " +
                    std::to_string(nd) + "; they must match");
  auto width = [&](std::vector<int> const& w, std::size_t d, char const* name) {
    HALOX_REQUIRE(w.empty() || w.size() == nd, errc::invalid_argument,
                  std::string(name) + " has " + std::to_string(w.size()) +
                      " entries; give one per dimension or none");
    if (w.empty()) return 0.0;
    HALOX_REQUIRE(w[d] >= 0, errc::invalid_argument,
                  std::string(name) + " width " + std::to_string(w[d]) + " on dim " +
                      std::to_string(d) + " must not be negative");
    return static_cast<double>(w[d]);
  };
  std::vector<double> block(nd);
  for (std::size_t d = 0; d < nd; ++d) {
    HALOX_REQUIRE(shape[d] > 0, errc::invalid_argument,
                  "extent " + std::to_string(shape[d]) + " on dim " + std::to_string(d) +
                      " must be positive");
    block[d] = static_cast<double>((shape[d] + dims[d] - 1) / dims[d]);
  }
  std::vector<double> out(nd, 0.0);
  for (std::size_t d = 0; d < nd; ++d) {
    double const w = width(halo_lo, d, "halo_lo") + width(halo_hi, d, "halo_hi");
    if (dims[d] < 2 || w == 0) continue;
    double cross = static_cast<double>(element_size) * w;
    for (std::size_t e = 0; e < nd; ++e)
      if (e != d) cross *= block[e];
    out[d] = cross;
  }
  return out;
}

std::vector<double> halo_face_bytes(distribution const& dist) {
  std::vector<int> lo(dist.ndim()), hi(dist.ndim());
  for (int d = 0; d < dist.ndim(); ++d) {
    lo[d] = dist.options(d).halo_lo;
    hi[d] = dist.options(d).halo_hi;
  }
  return halo_face_bytes(dist.shape(), dist.parts(), lo, hi, size_of(dist.type()));
}

topology_cost mapping_cost(std::vector<rank_place> const& machine, std::vector<int> const& dims,
                           std::vector<double> const& face_bytes, std::vector<bool> const& periodic,
                           std::vector<int> const& process_of) {
  int const n = grid_size(dims);
  check_weights(face_bytes, periodic, dims.size());
  HALOX_REQUIRE(static_cast<int>(machine.size()) == n, errc::invalid_argument,
                "the machine describes " + std::to_string(machine.size()) + " processes but grid " +
                    vec_str(dims) + " has " + std::to_string(n) +
                    "; describe one place per process");
  HALOX_REQUIRE(static_cast<int>(process_of.size()) == n, errc::invalid_argument,
                "process_of has " + std::to_string(process_of.size()) + " entries but grid " +
                    vec_str(dims) + " has " + std::to_string(n) + " positions; give one each");
  std::vector<char> seen(n, 0);
  for (int p : process_of) {
    HALOX_REQUIRE(p >= 0 && p < n && !seen[p], errc::invalid_argument,
                  "process_of is not a permutation of 0.." + std::to_string(n - 1) + ": process " +
                      std::to_string(p) + " is out of range or repeated");
    seen[p] = 1;
  }
  return cost_of(normalise(machine), dims, face_bytes, periodic, process_of);
}

topology_mapping map_grid(std::vector<rank_place> const& machine, std::vector<int> const& dims,
                          std::vector<double> const& face_bytes,
                          std::vector<bool> const& periodic) {
  int const n = grid_size(dims);
  check_weights(face_bytes, periodic, dims.size());
  HALOX_REQUIRE(static_cast<int>(machine.size()) == n, errc::invalid_argument,
                "the machine describes " + std::to_string(machine.size()) + " processes but grid " +
                    vec_str(dims) + " has " + std::to_string(n) +
                    "; describe one place per process");
  normal_machine const m = normalise(machine);
  topology_mapping out;
  out.nodes = m.nodes;
  out.sockets = m.sockets;
  out.process_of.resize(n);
  std::iota(out.process_of.begin(), out.process_of.end(), 0);
  out.before = out.after = cost_of(m, dims, face_bytes, periodic, out.process_of);
  if (m.sockets < 2) return out; // one socket on one node: nothing to gain

  // The processes grouped by node, then socket (each in order of first appearance).
  std::vector<int> procs(n);
  std::iota(procs.begin(), procs.end(), 0);
  std::stable_sort(procs.begin(), procs.end(), [&](int a, int b) {
    return std::make_pair(m.node[a], m.socket[a]) < std::make_pair(m.node[b], m.socket[b]);
  });
  auto assign = [&](std::vector<int> const& b1, std::vector<int> const& b2) {
    auto const order = blocked_order(dims, b1, b2);
    std::vector<int> process_of(n);
    for (int i = 0; i < n; ++i) process_of[order[i]] = procs[i];
    return process_of;
  };

  // Level 1: the node boxes, cells inside each in row-major order. Kept: those with the fewest
  // inter-node bytes (at most 32, fewest inter-socket bytes first). Fewer shapes on huge grids.
  std::size_t const cap = static_cast<std::size_t>(std::clamp<long long>(
      (1LL << 26) / (static_cast<long long>(n) * static_cast<long long>(dims.size())), 64, 4096));
  std::vector<std::pair<topology_cost, std::vector<int>>> level1;
  for (auto const& b1 : divisor_shapes(dims, cap))
    level1.emplace_back(cost_of(m, dims, face_bytes, periodic, assign(b1, b1)), b1);
  std::stable_sort(level1.begin(), level1.end(), [](auto const& a, auto const& b) {
    return std::make_pair(a.first.inter_node, a.first.inter_socket) <
           std::make_pair(b.first.inter_node, b.first.inter_socket);
  });
  std::vector<std::vector<int>> best_b1;
  for (auto const& [c, b1] : level1) {
    if (best_b1.size() == 32 || less(level1.front().first.inter_node, c.inter_node)) break;
    best_b1.push_back(b1);
  }
  // Level 2: socket boxes inside the best node boxes.
  std::vector<int> best;
  topology_cost best_cost{};
  for (auto const& b1 : best_b1) {
    for (auto const& b2 : divisor_shapes(b1, cap)) {
      auto p = assign(b1, b2);
      auto const c = cost_of(m, dims, face_bytes, periodic, p);
      if (best.empty() || better(c, best_cost)) {
        best = std::move(p);
        best_cost = c;
      }
    }
  }
  if (!best.empty() && better(best_cost, out.before)) {
    out.process_of = std::move(best);
    out.after = best_cost;
    out.reordered = true;
  }
  return out;
}

std::string topology_report::str() const {
  if (!requested) return "topology: not reordered (not requested)";
  std::ostringstream os;
  os << "topology: " << mapping.nodes << " node(s), " << mapping.sockets << " socket(s); "
     << (mapping.reordered ? "reordered" : "kept the caller's order") << "; inter-node bytes "
     << mapping.before.inter_node << " -> " << mapping.after.inter_node << ", inter-socket bytes "
     << mapping.before.inter_socket << " -> " << mapping.after.inter_socket;
  return os.str();
}

} // namespace halox
