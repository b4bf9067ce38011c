#include "exec/mpi/collective_executor.hpp"

#include "common/agreement.hpp"
#include "exec/cpu/pack.hpp"
#include "exec/mpi/mpi_types.hpp"

#include <halox/detail/mpi_handle.hpp>
#include <halox/error.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace halox::detail {

namespace {

int comm_size(MPI_Comm c) {
  int n = 0;
  HALOX_MPI_CHECK(MPI_Comm_size(c, &n));
  return n;
}

// Byte offsets of messages laid end to end in one buffer; returns the total. The collectives
// take int displacements, so the whole buffer, not just each message, must fit an int.
std::size_t lay_out(std::vector<message> const& msgs, std::vector<std::size_t>& off) {
  std::size_t total = 0;
  for (auto const& m : msgs) {
    off.push_back(total);
    total += m.bytes;
  }
  mpi_int_count(total, "the bytes of all messages of one collective exchange");
  return total;
}

// Arrays handed to MPI are never empty: some MPIs reject a null array pointer even when no entry
// is read (a rank without peers).
template <class T> std::vector<T> mpi_array(std::size_t n, T v) {
  return std::vector<T>(std::max<std::size_t>(n, 1), v);
}

// mpi_neighbor and alltoallv: every send message packed into one workspace area, one
// collective call, every receive unpacked (and combined) from another.
class packed_collective_executor final : public host_executor {
public:
  packed_collective_executor(backend b, schedule s, exec_config const& cfg)
      : host_executor(std::move(s), cfg, b), kind_(b) {
    bool const neighbor = kind_ == backend::mpi_neighbor;
    std::size_t sbytes = 0, rbytes = 0;
    auto const layout = [&] {
      sbytes = lay_out(sched_.sends, soff_);
      rbytes = lay_out(sched_.recvs, roff_);
    };
    // Creating the graph below is collective: a rank that cannot run its schedule must not leave
    // the others waiting in it, so all ranks agree on the local checks first.
    if (neighbor)
      collective_check(cfg_.comm, "mpi_neighbor executor", layout, [] { return std::uint64_t{0}; });
    else
      layout();
    send_ = reserve(memory_kind::host, sbytes);
    recv_ = reserve(memory_kind::host, rbytes);
    // Neighbour collectives index their arrays by neighbour, alltoallv by rank.
    std::size_t const ns = neighbor ? sched_.sends.size() : comm_size(cfg_.comm);
    std::size_t const nr = neighbor ? sched_.recvs.size() : comm_size(cfg_.comm);
    scounts_ = mpi_array(ns, 0);
    sdispls_ = mpi_array(ns, 0);
    rcounts_ = mpi_array(nr, 0);
    rdispls_ = mpi_array(nr, 0);
    for (std::size_t i = 0; i < sched_.sends.size(); ++i) {
      std::size_t const k = neighbor ? i : static_cast<std::size_t>(sched_.sends[i].peer);
      scounts_[k] = static_cast<int>(sched_.sends[i].bytes);
      sdispls_[k] = static_cast<int>(soff_[i]);
    }
    for (std::size_t i = 0; i < sched_.recvs.size(); ++i) {
      std::size_t const k = neighbor ? i : static_cast<std::size_t>(sched_.recvs[i].peer);
      rcounts_[k] = static_cast<int>(sched_.recvs[i].bytes);
      rdispls_[k] = static_cast<int>(roff_[i]);
    }
    if (neighbor) make_graph();
    reqs_.assign(1, MPI_REQUEST_NULL);
    waits().name_requests({{-1, rbytes, true}});
  }

  [[nodiscard]] backend kind() const noexcept override { return kind_; }

protected:
  void post(void*) override {
    std::byte* const sbuf = ws(memory_kind::host, send_);
    std::byte* const rbuf = ws(memory_kind::host, recv_);
    for (std::size_t i = 0; i < sched_.sends.size(); ++i)
      pack_message(sched_, sched_.sends[i], bufs_, sbuf + soff_[i]);
    if (kind_ == backend::mpi_neighbor)
      HALOX_MPI_CHECK(MPI_Ineighbor_alltoallv(sbuf, scounts_.data(), sdispls_.data(), MPI_BYTE,
                                              rbuf, rcounts_.data(), rdispls_.data(), MPI_BYTE,
                                              graph_.get(), &reqs_[0]));
    else
      HALOX_MPI_CHECK(MPI_Ialltoallv(sbuf, scounts_.data(), sdispls_.data(), MPI_BYTE, rbuf,
                                     rcounts_.data(), rdispls_.data(), MPI_BYTE, cfg_.comm,
                                     &reqs_[0]));
  }

  void receive() override {
    wait_all(0, 1);
    std::byte const* const rbuf = ws(memory_kind::host, recv_);
    for (std::size_t i = 0; i < sched_.recvs.size(); ++i)
      unpack_message(sched_, sched_.recvs[i], bufs_, rbuf + roff_[i], op_);
  }

  [[nodiscard]] bool collective_requests() const noexcept override { return true; }

private:
  // Sources are the receive peers and destinations the send peers, in schedule order; without
  // reordering and weights, that order is the order of the counts arrays.
  void make_graph() {
    std::vector<int> src, dst;
    for (auto const& m : sched_.recvs) src.push_back(m.peer);
    for (auto const& m : sched_.sends) dst.push_back(m.peer);
    auto const indeg = static_cast<int>(src.size());
    auto const outdeg = static_cast<int>(dst.size());
    src.resize(std::max(indeg, 1));
    dst.resize(std::max(outdeg, 1));
    HALOX_MPI_CHECK(MPI_Dist_graph_create_adjacent(cfg_.comm, indeg, src.data(), MPI_UNWEIGHTED,
                                                   outdeg, dst.data(), MPI_UNWEIGHTED,
                                                   MPI_INFO_NULL, 0, graph_.out()));
    // The standard promises the neighbour order given here; a library that broke it would
    // silently scramble messages, so check it once.
    std::vector<int> gsrc(src.size()), gdst(dst.size());
    HALOX_MPI_CHECK(MPI_Dist_graph_neighbors(graph_.get(), indeg, gsrc.data(), MPI_UNWEIGHTED,
                                             outdeg, gdst.data(), MPI_UNWEIGHTED));
    HALOX_REQUIRE(std::equal(src.begin(), src.begin() + indeg, gsrc.begin()) &&
                      std::equal(dst.begin(), dst.begin() + outdeg, gdst.begin()),
                  errc::internal,
                  "MPI_Dist_graph_create_adjacent reordered the neighbours of a graph created "
                  "without reordering; use another backend than mpi_neighbor with this MPI");
  }

  backend kind_;
  unique_comm graph_;
  std::size_t send_ = 0, recv_ = 0;
  std::vector<std::size_t> soff_, roff_;
  std::vector<int> scounts_, sdispls_, rcounts_, rdispls_;
};

// alltoallw: the same per-part datatypes as mpi_datatype, wrapped per peer in a struct at the
// buffers' absolute addresses (MPI_BOTTOM), one MPI_Ialltoallw over the whole communicator. A
// combining receive lands contiguously instead (MPI_BYTE counts) and is unpacked with the op.
class alltoallw_executor final : public host_executor {
public:
  alltoallw_executor(schedule s, exec_config const& cfg)
      : host_executor(std::move(s), cfg, backend::alltoallw), send_types_(sched_, sched_.sends),
        recv_types_(sched_, sched_.recvs), send_abs_(sched_.sends.size()),
        recv_abs_(sched_.recvs.size()) {
    landing_ = reserve(memory_kind::host, lay_out(sched_.recvs, roff_));
    std::size_t const n = comm_size(cfg_.comm);
    scounts_ = mpi_array(n, 0);
    sdispls_ = mpi_array(n, 0);
    rcounts_ = mpi_array(n, 0);
    rdispls_ = mpi_array(n, 0);
    stypes_ = mpi_array(n, MPI_Datatype(MPI_BYTE));
    rtypes_ = mpi_array(n, MPI_Datatype(MPI_BYTE));
    reqs_.assign(1, MPI_REQUEST_NULL);
    waits().name_requests({{-1, sched_.recv_bytes(), true}});
    send_bound_.assign(sched_.slots.size(), nullptr);
    recv_bound_.assign(sched_.slots.size(), nullptr);
  }

  [[nodiscard]] backend kind() const noexcept override { return backend::alltoallw; }

protected:
  void post(void*) override {
    bool const landing = op_ != combine_op::replace;
    // Each side's struct types are valid for the addresses they were made for; the receive
    // side is skipped by combining exchanges, so each side keeps its own record.
    bool const moved = !std::equal(send_bound_.begin(), send_bound_.end(), bufs_);
    void const* sbuf = side(send_types_, sched_.sends, send_abs_, moved, scounts_, stypes_);
    if (moved) std::copy(bufs_, bufs_ + send_bound_.size(), send_bound_.begin());
    void* rbuf = MPI_BOTTOM;
    if (landing) {
      rbuf = ws(memory_kind::host, landing_);
      for (std::size_t i = 0; i < sched_.recvs.size(); ++i) {
        int const p = sched_.recvs[i].peer;
        rtypes_[p] = MPI_BYTE;
        rcounts_[p] = static_cast<int>(sched_.recvs[i].bytes);
        rdispls_[p] = static_cast<int>(roff_[i]);
      }
    } else {
      for (std::size_t i = 0; i < sched_.recvs.size(); ++i) rdispls_[sched_.recvs[i].peer] = 0;
      bool const rmoved = !std::equal(recv_bound_.begin(), recv_bound_.end(), bufs_);
      rbuf =
          const_cast<void*>(side(recv_types_, sched_.recvs, recv_abs_, rmoved, rcounts_, rtypes_));
      if (rmoved) std::copy(bufs_, bufs_ + recv_bound_.size(), recv_bound_.begin());
    }
    HALOX_MPI_CHECK(MPI_Ialltoallw(sbuf, scounts_.data(), sdispls_.data(), stypes_.data(), rbuf,
                                   rcounts_.data(), rdispls_.data(), rtypes_.data(), cfg_.comm,
                                   &reqs_[0]));
  }

  void receive() override {
    wait_all(0, 1);
    if (op_ != combine_op::replace)
      for (std::size_t i = 0; i < sched_.recvs.size(); ++i)
        unpack_message(sched_, sched_.recvs[i], bufs_, ws(memory_kind::host, landing_) + roff_[i],
                       op_);
  }

  [[nodiscard]] bool collective_requests() const noexcept override { return true; }

private:
  // Fills one direction's counts and types; returns the buffer argument for MPI_Ialltoallw.
  // Always absolute addresses with MPI_BOTTOM: Open MPI's libnbc mishandles per-peer types
  // relative to a real buffer argument (it takes equal send and receive buffers for
  // MPI_IN_PLACE, and fails with truncation errors otherwise), so the per-peer struct types
  // are rebuilt when a buffer address changes (only then: the part types are built once).
  void const* side(message_types const& t, std::vector<message> const& msgs,
                   std::vector<unique_datatype>& abs, bool moved, std::vector<int>& counts,
                   std::vector<MPI_Datatype>& types) {
    for (std::size_t i = 0; i < msgs.size(); ++i) {
      int const p = msgs[i].peer;
      auto const& parts = t.parts(i);
      counts[p] = parts.empty() ? 0 : 1;
      if (parts.empty()) {
        types[p] = MPI_BYTE;
      } else {
        if (moved || !abs[i]) abs[i] = absolute(parts);
        types[p] = abs[i].get();
      }
    }
    return MPI_BOTTOM;
  }

  // The parts of one message at their buffers' absolute addresses.
  unique_datatype absolute(std::vector<typed_part> const& parts) {
    std::vector<int> lens(parts.size(), 1);
    std::vector<MPI_Aint> displs(parts.size());
    std::vector<MPI_Datatype> types(parts.size());
    for (std::size_t j = 0; j < parts.size(); ++j) {
      HALOX_MPI_CHECK(MPI_Get_address(bufs_[parts[j].slot], &displs[j]));
      types[j] = parts[j].type.get();
    }
    unique_datatype t;
    HALOX_MPI_CHECK(MPI_Type_create_struct(static_cast<int>(parts.size()), lens.data(),
                                           displs.data(), types.data(), t.out()));
    commit(t);
    return t;
  }

  message_types send_types_, recv_types_;
  std::vector<unique_datatype> send_abs_, recv_abs_; // messages spanning several buffers
  std::vector<void*> send_bound_, recv_bound_;       // addresses the absolute types were made for
  std::size_t landing_ = 0;
  std::vector<std::size_t> roff_;
  std::vector<int> scounts_, sdispls_, rcounts_, rdispls_;
  std::vector<MPI_Datatype> stypes_, rtypes_; // borrowed from the message types
};

} // namespace

std::unique_ptr<executor> make_collective_executor(backend b, schedule const& s,
                                                   exec_config const& cfg) {
  switch (b) {
  case backend::mpi_neighbor:
  case backend::alltoallv: return std::make_unique<packed_collective_executor>(b, s, cfg);
  case backend::alltoallw: return std::make_unique<alltoallw_executor>(s, cfg);
  default: break;
  }
  throw error(errc::internal,
              std::string("make_collective_executor called for backend ") + to_string(b));
}

} // namespace halox::detail
