#pragma once
/// \file topology.hpp
/// Topology-aware placement of a process grid: which process takes which grid position so that
/// the blocks held on one node (then one socket) form compact sub-blocks of the grid, and fewer
/// halo bytes cross nodes. The mapping functions here are pure (no MPI); `process_grid` uses
/// them when `grid_options::reorder` asks for it. The choice of each rank's CUDA device
/// (`choose_device`, `closest_device`) is in device.hpp, included here.

#include <halox/box.hpp>
#include <halox/device.hpp>
#include <halox/distribution.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace halox {

/// Where one process runs: its node and its socket (package) on that node. Any integers serve as
/// labels; processes with equal `node` share a node, and with equal `node` and `socket` a socket.
struct rank_place {
  int node = 0;   ///< label of the process's node
  int socket = 0; ///< label of its socket on that node
};

/// Halo bytes of one exchange over the whole grid, split by what the bytes cross.
struct topology_cost {
  double inter_node = 0;   ///< between processes on different nodes
  double inter_socket = 0; ///< between different sockets of the same node
};

/// Whether `process_grid` reorders its ranks to follow the machine.
enum class topology_reorder {
  none, ///< ranks keep the caller's order (the default)
  nodes ///< grid positions are given to processes so that nodes, then sockets, hold compact
        ///< sub-blocks of the grid; kept only when that moves fewer bytes between nodes (then
        ///< sockets) than the caller's order
};

/// Result of `map_grid`: the placement chosen and its cost against the caller's order.
struct topology_mapping {
  /// `process_of[g]` is the process (index into the machine description, i.e. its rank in the
  /// caller's communicator) placed at grid position `g` (the row-major grid rank).
  std::vector<int> process_of;
  bool reordered = false; ///< false: `process_of` is the identity
  topology_cost before;   ///< with the identity (process g at grid position g)
  topology_cost after;    ///< with `process_of`
  int nodes = 1;          ///< distinct nodes in the machine description
  int sockets = 1;        ///< distinct (node, socket) pairs
};

/// Bytes that one halo exchange moves across one face between two neighbouring blocks, per grid
/// dimension: (halo_lo + halo_hi) x the cross-section of a block (the product of the largest
/// balanced block extent over the other dimensions) x `element_size`. Zero along a dimension that
/// is not split or has no halo. Pure; throws `halox::error` on invalid input.
[[nodiscard]] std::vector<double> halo_face_bytes(std::vector<index_t> const& shape,
                                                  std::vector<int> const& dims,
                                                  std::vector<int> const& halo_lo,
                                                  std::vector<int> const& halo_hi,
                                                  std::size_t element_size);
/// `halo_face_bytes` for a distribution (its shape, parts, halo widths and element size).
[[nodiscard]] std::vector<double> halo_face_bytes(distribution const& dist);

/// Halo bytes crossing nodes and sockets when grid position `g` (row-major over `dims`) is held by
/// process `process_of[g]` placed at `machine[process_of[g]]`. Neighbours are the face neighbours
/// along each dimension (and across the boundary of a `periodic` one: empty means none periodic);
/// each face costs `face_bytes[d]`. Pure; throws `halox::error` on invalid input.
[[nodiscard]] topology_cost mapping_cost(std::vector<rank_place> const& machine,
                                         std::vector<int> const& dims,
                                         std::vector<double> const& face_bytes,
                                         std::vector<bool> const& periodic,
                                         std::vector<int> const& process_of);

/// Chooses which process holds which grid position so that the bytes crossing nodes, then
/// sockets, are smallest (`mapping_cost`). The grid is cut into sub-boxes (every shape whose
/// sides divide the grid's is tried), visited box by box with a second level of boxes for the
/// sockets inside them, and the processes, grouped by node and socket, fill that order; nodes of
/// unequal sizes take consecutive runs of it. The result is never worse than the identity: when
/// no candidate moves fewer inter-node bytes (or as many, and fewer inter-socket bytes), the
/// identity is returned with `reordered == false`. Deterministic: equal inputs give equal
/// results on every rank. Pure; throws `halox::error` on invalid input (the machine must
/// describe exactly prod(dims) processes).
[[nodiscard]] topology_mapping map_grid(std::vector<rank_place> const& machine,
                                        std::vector<int> const& dims,
                                        std::vector<double> const& face_bytes,
                                        std::vector<bool> const& periodic = {});

/// Options of `process_grid` beyond its dims.
struct grid_options {
  /// Reorder the ranks to follow the machine (off by default).
  topology_reorder reorder = topology_reorder::none;
  /// With reordering: emulate this many nodes, each a run of consecutive ranks (balanced; the
  /// first ones one rank larger), instead of asking MPI which ranks share memory. 0: use the
  /// environment variable HALOX_FAKE_NODES if set, else the real nodes.
  int fake_nodes = 0;
  /// Bytes per face per dimension (see `halo_face_bytes`). Empty: `process_grid::create` derives
  /// them from its shape and halos; the constructor weighs every face 1.
  std::vector<double> face_bytes;
  /// Periodic dimensions (one flag per dimension, or empty: none) for the constructor;
  /// `process_grid::create` uses its own `periodic` argument.
  std::vector<bool> periodic;
  /// Bytes per element when `process_grid::create` derives `face_bytes` (the report is then in
  /// bytes; the choice does not depend on it).
  std::size_t element_size = 1;
};

/// What a `process_grid` did about the machine: empty (`requested == false`) unless it was built
/// with `topology_reorder::nodes`.
struct topology_report {
  bool requested = false;   ///< whether the grid was built with `topology_reorder::nodes`
  topology_mapping mapping; ///< the placement chosen and its cost before and after
  /// One line: nodes, sockets, and the inter-node (inter-socket) bytes before and after.
  [[nodiscard]] std::string str() const;
};

} // namespace halox
