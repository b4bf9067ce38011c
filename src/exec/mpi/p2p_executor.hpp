#pragma once
// mpi_pack and mpi_persistent: halox packs each peer's regions into one contiguous message and
// uses point-to-point MPI. Messages that are one contiguous region go in place (zero copy).

#include "exec/executor.hpp"

#include <halox/detail/mpi_handle.hpp>

#include <vector>

namespace halox::detail {

class p2p_executor final : public executor {
public:
  p2p_executor(schedule s, exec_config const& cfg, bool persistent);
  ~p2p_executor() override;
  void start(void* const* bufs, combine_op op, void* stream) override;
  void wait(void* stream) override;
  [[nodiscard]] backend kind() const noexcept override {
    return persistent_ ? backend::mpi_persistent : backend::mpi_pack;
  }

private:
  bool persistent_;
  std::vector<std::byte> sendbuf_, recvbuf_, scratch_;
  std::vector<std::size_t> soff_, roff_;
  std::vector<char> send_inplace_, recv_inplace_; // single contiguous region: no packing
  std::vector<MPI_Request> reqs_;                 // recvs first, then sends
  std::vector<unique_request> persistent_reqs_;
  void* const* bufs_ = nullptr;
  combine_op op_ = combine_op::replace;
};

} // namespace halox::detail
