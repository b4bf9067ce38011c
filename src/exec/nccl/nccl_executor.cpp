// nccl: pack kernel, ncclSend/ncclRecv of every message in one group, unpack kernel, all on the
// caller's stream. The host never waits for the device: start and wait only enqueue.
//
// The NCCL communicator belongs to the plan's context: the first nccl executor of a context
// makes it (at plan time: rank 0 creates the unique id, MPI_Bcast shares it, every rank joins
// with ncclCommInitRank on its current device) and every later plan of the context shares it.
// NCCL does not allow two ranks of one communicator on the same GPU.

#include "exec/nccl/nccl_executor.hpp"

#include "exec/cuda/device_executor.hpp"

#include "exec/cuda/cuda_handle.hpp"
#include <halox/error.hpp>

namespace halox::detail {

namespace {

unique_nccl_comm make_nccl_comm(MPI_Comm comm) {
  int rank = 0, size = 1;
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  // Rank 0's failure travels with the id, so no rank is left waiting in the broadcast.
  struct {
    ncclUniqueId id;
    int ok;
  } msg{};
  ncclResult_t rc = ncclSuccess;
  if (rank == 0) {
    rc = ncclGetUniqueId(&msg.id);
    msg.ok = rc == ncclSuccess;
  }
  HALOX_MPI_CHECK(MPI_Bcast(&msg, sizeof msg, MPI_BYTE, 0, comm));
  if (rank == 0 && rc != ncclSuccess) throw_nccl_error(rc, "ncclGetUniqueId", __FILE__, __LINE__);
  HALOX_REQUIRE(msg.ok, errc::nccl_error,
                "rank 0 of the plan could not create the NCCL unique id (see its error)");
  unique_nccl_comm c;
  HALOX_NCCL_CHECK(ncclCommInitRank(c.out(), size, msg.id, rank));
  return c;
}

// The context's NCCL communicator, made on first use. Every rank builds the same executors in
// the same order (plans are built collectively), so all reach the creation together.
struct nccl_resources final : transport_resources {
  explicit nccl_resources(unique_nccl_comm c) : comm(std::move(c)) {}
  unique_nccl_comm comm;
};

ncclComm_t context_nccl_comm(context_state& ctx) {
  auto r = ctx.transports.find<nccl_resources>("nccl");
  if (!r) {
    r = std::make_shared<nccl_resources>(make_nccl_comm(ctx.comm.get()));
    ctx.transports.keep("nccl", r);
  }
  return r->comm.get();
}

class nccl_executor final : public device_executor {
public:
  nccl_executor(schedule s, exec_config const& cfg)
      : device_executor(std::move(s), cfg, {true, true, cfg.fill_value}),
        comm_(context_nccl_comm(*cfg_.ctx)) {}

  [[nodiscard]] backend kind() const noexcept override { return backend::nccl; }

protected:
  void post(void* stream) override {
    auto const st = static_cast<cudaStream_t>(stream);
    // The previous unpack may run on another stream; receive only after it has read the area.
    order_.after_previous_unpack(st, false);
    pack_.pack(bufs_, st);
    if (!sched_.sends.empty() || !sched_.recvs.empty()) {
      auto const& l = pack_.layout();
      HALOX_NCCL_CHECK(ncclGroupStart());
      for (std::size_t i = 0; i < sched_.recvs.size(); ++i) {
        auto const& m = sched_.recvs[i];
        HALOX_NCCL_CHECK(
            ncclRecv(pack_.stream() + l.recv_offset[i], m.bytes, ncclUint8, m.peer, comm_, st));
      }
      for (std::size_t i = 0; i < sched_.sends.size(); ++i) {
        auto const& m = sched_.sends[i];
        HALOX_NCCL_CHECK(
            ncclSend(pack_.stream() + l.send_offset[i], m.bytes, ncclUint8, m.peer, comm_, st));
      }
      HALOX_NCCL_CHECK(ncclGroupEnd());
    }
    order_.started(st);
  }

  void complete(void* stream) override {
    auto const st = static_cast<cudaStream_t>(stream);
    order_.join(st);
    pack_.unpack(bufs_, op_, st);
    order_.unpacked(st);
  }

private:
  ncclComm_t comm_; // owned by the context, which the executor's config keeps alive
};

} // namespace

std::unique_ptr<executor> make_nccl_executor(schedule const& s, exec_config const& cfg) {
  return std::make_unique<nccl_executor>(s, cfg);
}

} // namespace halox::detail
