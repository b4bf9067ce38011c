// The NCCL transport. Posting only records each request's buffer; `posted` enqueues them all,
// receives and sends, in one NCCL group on the exchange's stream, so that every rank's sends
// and receives of one exchange match whatever order the ranks post them in. Nothing waits on
// the host: the received bytes are ready for the unpack kernel enqueued after them.
//
// The NCCL communicator belongs to the plan's context: the first nccl plan of a context makes
// it (at plan time: rank 0 creates the unique id, MPI_Bcast shares it, every rank joins with
// ncclCommInitRank on its current device) and every later plan of the context shares it. NCCL
// does not allow two ranks of one communicator on the same GPU.

#include "exec/nccl/nccl_transport.hpp"

#include "exec/cuda/cuda_handle.hpp"
#include "exec/transport_resources.hpp"

#include <halox/error.hpp>

#include <vector>

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

class nccl_transport final : public transport {
public:
  explicit nccl_transport(wait_context& waits) : comm_(context_nccl_comm(*waits.config().ctx)) {}

  [[nodiscard]] char const* name() const noexcept override { return "nccl"; }
  [[nodiscard]] bool stream_ordered() const noexcept override { return true; }

  void declare(std::vector<wire_request> const& recvs, std::vector<wire_request> const& sends,
               workspace_layout&) override {
    nr_ = recvs.size();
    wire_ = recvs;
    wire_.insert(wire_.end(), sends.begin(), sends.end());
    for (auto const& w : wire_)
      HALOX_REQUIRE(w.runs == 0, errc::internal,
                    "the nccl transport moves contiguous buffers only");
    bufs_.assign(wire_.size(), nullptr);
  }

  void use_stream(void* stream) override { stream_ = static_cast<cudaStream_t>(stream); }
  void post(std::size_t i, void* buf, std::size_t) override { bufs_[i] = buf; }

  void posted() override {
    next_ = 0;
    if (wire_.empty()) return;
    HALOX_NCCL_CHECK(ncclGroupStart());
    try {
      for (std::size_t i = 0; i < wire_.size(); ++i) {
        auto const& w = wire_[i];
        if (i < nr_)
          HALOX_NCCL_CHECK(ncclRecv(bufs_[i], w.bytes, ncclUint8, w.peer, comm_, stream_));
        else
          HALOX_NCCL_CHECK(ncclSend(bufs_[i], w.bytes, ncclUint8, w.peer, comm_, stream_));
      }
    } catch (...) {
      ncclGroupEnd(); // leave no group open behind the error
      throw;
    }
    HALOX_NCCL_CHECK(ncclGroupEnd());
  }

  // Each receive is complete in stream order: work enqueued after this point sees its bytes.
  std::size_t wait_recv() override { return next_ < nr_ ? next_++ : none; }
  void wait_sends() override {}
  // Nothing is pending on the host: a failed peer leaves the stream's NCCL kernels to the
  // communicator's own error handling.
  void cancel_peer(int) noexcept override {}
  [[nodiscard]] bool abandon(double) noexcept override { return true; }

private:
  ncclComm_t comm_; // owned by the context, which the executor's config keeps alive
  cudaStream_t stream_ = nullptr;
  std::vector<wire_request> wire_; // receives, then sends
  std::vector<void*> bufs_;        // this exchange's buffers, per request
  std::size_t nr_ = 0;
  std::size_t next_ = 0; // the next receive wait_recv returns
};

} // namespace

std::unique_ptr<transport> make_nccl_transport(wait_context& waits) {
  return std::make_unique<nccl_transport>(waits);
}

} // namespace halox::detail
