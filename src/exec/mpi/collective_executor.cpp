#include "exec/mpi/collective_executor.hpp"

#include "common/collective_check.hpp"
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

// mpi_neighbor and alltoallv: every send message packed into one buffer, one collective call,
// every receive unpacked (and combined) from one buffer.
class packed_collective_executor final : public executor {
public:
  packed_collective_executor(backend b, schedule s, exec_config const& cfg)
      : executor(std::move(s), cfg), kind_(b) {
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
    sendbuf_.resize(std::max<std::size_t>(sbytes, 1));
    recvbuf_.resize(std::max<std::size_t>(rbytes, 1));
    scratch_.resize(max_copy_bytes(sched_));
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
  }

  void start(void* const* bufs, combine_op op, void*) override {
    bufs_ = bufs;
    op_ = op;
    for (std::size_t i = 0; i < sched_.sends.size(); ++i)
      pack_message(sched_, sched_.sends[i], bufs, sendbuf_.data() + soff_[i]);
    if (kind_ == backend::mpi_neighbor)
      HALOX_MPI_CHECK(MPI_Ineighbor_alltoallv(sendbuf_.data(), scounts_.data(), sdispls_.data(),
                                              MPI_BYTE, recvbuf_.data(), rcounts_.data(),
                                              rdispls_.data(), MPI_BYTE, graph_.get(), &req_));
    else
      HALOX_MPI_CHECK(MPI_Ialltoallv(sendbuf_.data(), scounts_.data(), sdispls_.data(), MPI_BYTE,
                                     recvbuf_.data(), rcounts_.data(), rdispls_.data(), MPI_BYTE,
                                     cfg_.comm, &req_));
  }

  void wait(void*) override {
    run_local_copies(sched_, bufs_, op_, scratch_.data());
    HALOX_MPI_CHECK(MPI_Wait(&req_, MPI_STATUS_IGNORE));
    for (std::size_t i = 0; i < sched_.recvs.size(); ++i)
      unpack_message(sched_, sched_.recvs[i], bufs_, recvbuf_.data() + roff_[i], op_);
    run_fills(sched_, bufs_, cfg_.fill_value);
  }

  [[nodiscard]] backend kind() const noexcept override { return kind_; }

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
  std::vector<std::byte> sendbuf_, recvbuf_, scratch_;
  std::vector<std::size_t> soff_, roff_;
  std::vector<int> scounts_, sdispls_, rcounts_, rdispls_;
  MPI_Request req_ = MPI_REQUEST_NULL;
  void* const* bufs_ = nullptr;
  combine_op op_ = combine_op::replace;
};

// alltoallw: the same per-peer struct datatypes as mpi_datatype, one MPI_Ialltoallw over the
// whole communicator with MPI_BOTTOM buffers. A combining receive lands contiguously instead
// (MPI_BYTE counts into the landing buffer) and is unpacked with the op.
class alltoallw_executor final : public executor {
public:
  alltoallw_executor(schedule s, exec_config const& cfg)
      : executor(std::move(s), cfg), send_types_(sched_, sched_.sends),
        recv_types_(sched_, sched_.recvs) {
    landing_.resize(std::max<std::size_t>(lay_out(sched_.recvs, roff_), 1));
    scratch_.resize(max_copy_bytes(sched_));
    std::size_t const n = comm_size(cfg_.comm);
    scounts_ = mpi_array(n, 0);
    sdispls_ = mpi_array(n, 0);
    rcounts_ = mpi_array(n, 0);
    rdispls_ = mpi_array(n, 0);
    stypes_ = mpi_array(n, MPI_Datatype(MPI_BYTE));
    rtypes_ = mpi_array(n, MPI_Datatype(MPI_BYTE));
  }

  void start(void* const* bufs, combine_op op, void*) override {
    bufs_ = bufs;
    op_ = op;
    send_types_.bind(bufs);
    for (std::size_t i = 0; i < sched_.sends.size(); ++i) {
      int const p = sched_.sends[i].peer;
      stypes_[p] = send_types_.type(i);
      scounts_[p] = send_types_.count(i);
    }
    bool const landing = op != combine_op::replace;
    if (!landing) recv_types_.bind(bufs);
    for (std::size_t i = 0; i < sched_.recvs.size(); ++i) {
      int const p = sched_.recvs[i].peer;
      rtypes_[p] = landing ? MPI_Datatype(MPI_BYTE) : recv_types_.type(i);
      rcounts_[p] = landing ? static_cast<int>(sched_.recvs[i].bytes) : recv_types_.count(i);
      rdispls_[p] = landing ? static_cast<int>(roff_[i]) : 0;
    }
    void* rbuf = landing ? static_cast<void*>(landing_.data()) : MPI_BOTTOM;
    HALOX_MPI_CHECK(MPI_Ialltoallw(MPI_BOTTOM, scounts_.data(), sdispls_.data(), stypes_.data(),
                                   rbuf, rcounts_.data(), rdispls_.data(), rtypes_.data(),
                                   cfg_.comm, &req_));
  }

  void wait(void*) override {
    run_local_copies(sched_, bufs_, op_, scratch_.data());
    HALOX_MPI_CHECK(MPI_Wait(&req_, MPI_STATUS_IGNORE));
    if (op_ != combine_op::replace)
      for (std::size_t i = 0; i < sched_.recvs.size(); ++i)
        unpack_message(sched_, sched_.recvs[i], bufs_, landing_.data() + roff_[i], op_);
    run_fills(sched_, bufs_, cfg_.fill_value);
  }

  [[nodiscard]] backend kind() const noexcept override { return backend::alltoallw; }

private:
  message_types send_types_, recv_types_;
  std::vector<std::byte> landing_, scratch_;
  std::vector<std::size_t> roff_;
  std::vector<int> scounts_, sdispls_, rcounts_, rdispls_;
  std::vector<MPI_Datatype> stypes_, rtypes_; // borrowed from send_types_ / recv_types_
  MPI_Request req_ = MPI_REQUEST_NULL;
  void* const* bufs_ = nullptr;
  combine_op op_ = combine_op::replace;
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
