#pragma once
// MPI point-to-point as a transport: MPI_Irecv / MPI_Isend of contiguous byte ranges, or
// persistent requests (MPI_Recv_init / MPI_Send_init) made whenever the workspace is bound and
// started by each exchange. MPI has no iov lists of raw addresses short of a derived datatype
// per exchange, so multi-run messages reach it packed.

#include "exec/transport.hpp"

#include <halox/detail/mpi_handle.hpp>

#include <memory>
#include <vector>

namespace halox::detail {

/// Point-to-point MPI on the plan's communicator and tag.
class mpi_transport final : public transport {
public:
  /// `owner`: the executor driving it (its waits, timeout and failure watch); `persistent`:
  /// persistent requests on buffers fixed at bind.
  mpi_transport(executor& owner, bool persistent) : owner_(owner), persistent_(persistent) {}

  [[nodiscard]] char const* name() const noexcept override {
    return persistent_ ? "mpi (persistent requests)" : "mpi";
  }
  [[nodiscard]] bool fixed_buffers() const noexcept override { return persistent_; }
  void declare(std::vector<wire_request> const& recvs, std::vector<wire_request> const& sends,
               workspace_layout& layout) override;
  void bind(workspace_bases const& bases) override;
  void attach(std::size_t i, std::byte* buf) override;
  void post(std::size_t i, void* buf, std::size_t runs) override;
  std::size_t wait_recv() override;
  void wait_sends() override;
  void cancel_peer(int peer) noexcept override;
  [[nodiscard]] bool abandon(double grace) noexcept override;

private:
  executor& owner_;
  bool persistent_;
  std::vector<wire_request> wire_;              // receives, then sends
  std::size_t nr_ = 0;                          // receives among them
  std::vector<int> counts_;                     // bytes as MPI's count
  std::vector<MPI_Request> reqs_;               // the exchange in flight
  std::vector<unique_request> persistent_reqs_; // persistent: owned handles, per request
};

/// The transport of mpi_pack and mpi_pipeline.
[[nodiscard]] std::unique_ptr<transport> make_mpi_transport(executor& owner);
/// The transport of mpi_persistent.
[[nodiscard]] std::unique_ptr<transport> make_persistent_mpi_transport(executor& owner);

} // namespace halox::detail
