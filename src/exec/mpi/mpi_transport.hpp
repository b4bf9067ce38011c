#pragma once
// MPI point-to-point as a transport: MPI_Irecv / MPI_Isend of contiguous byte ranges, or
// persistent requests (MPI_Recv_init / MPI_Send_init) made whenever the workspace is bound and
// started by each exchange. MPI has no iov lists of raw addresses short of a derived datatype
// per exchange, so multi-run messages reach it packed, or as boxes it walks itself: a request
// declared with boxes travels as one MPI message per part (exec/mpi/mpi_types.hpp), each of one
// derived datatype relative to its buffer's base, built once at declaration.

#include "exec/mpi/mpi_types.hpp"
#include "exec/transport.hpp"

#include <halox/detail/mpi_handle.hpp>

#include <memory>
#include <vector>

namespace halox::detail {

/// Point-to-point MPI on the plan's communicator and tag.
class mpi_transport final : public transport {
public:
  /// `waits`: its executor's wait context (its communicator, tag, timeout and failure watch);
  /// `persistent`: persistent requests on buffers fixed at bind.
  mpi_transport(wait_context& waits, bool persistent) : waits_(waits), persistent_(persistent) {}

  [[nodiscard]] char const* name() const noexcept override {
    return persistent_ ? "mpi (persistent requests)" : "mpi";
  }
  [[nodiscard]] bool fixed_buffers() const noexcept override { return persistent_; }
  [[nodiscard]] bool walks_boxes() const noexcept override { return !persistent_; }
  void declare(std::vector<wire_request> const& recvs, std::vector<wire_request> const& sends,
               workspace_layout& layout) override;
  [[nodiscard]] std::vector<request_info>
  request_table(std::vector<request_info> declared) const override;
  void bind(workspace_bases const& bases) override;
  void attach(std::size_t i, std::byte* buf) override;
  void post(std::size_t i, void* buf, std::size_t runs) override;
  std::size_t wait_recv() override;
  void wait_sends() override;
  void cancel_peer(int peer) noexcept override;
  [[nodiscard]] bool abandon(double grace) noexcept override;

private:
  void post_parts(std::size_t i, void* buf, std::size_t runs);

  wait_context& waits_;
  bool persistent_;
  std::vector<wire_request> wire_; // receives, then sends
  std::size_t nr_ = 0;             // receives among them
  std::vector<int> counts_;        // bytes as MPI's count
  // Per declared request: its parts when declared with boxes (walked), and its first MPI
  // request; a plain request is one MPI request.
  std::vector<std::vector<typed_part>> parts_;
  std::vector<std::size_t> first_;
  std::vector<std::size_t> owner_of_;           // per MPI request: its declared request
  std::size_t nr_mpi_ = 0;                      // MPI requests of the receives
  std::vector<std::size_t> left_;               // per receive: MPI requests not yet completed
  std::vector<std::size_t> ready_;              // receives that move nothing, to return
  std::vector<MPI_Request> reqs_;               // the exchange in flight (MPI requests)
  std::vector<unique_request> persistent_reqs_; // persistent: owned handles, per request
};

/// The transport of mpi_pack and mpi_pipeline.
[[nodiscard]] std::unique_ptr<transport> make_mpi_transport(wait_context& waits);
/// The transport of mpi_persistent.
[[nodiscard]] std::unique_ptr<transport> make_persistent_mpi_transport(wait_context& waits);

} // namespace halox::detail
