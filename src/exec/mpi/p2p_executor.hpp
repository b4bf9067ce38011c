#pragma once
// mpi_pack and mpi_persistent: halox packs each peer's regions into one contiguous message and
// uses point-to-point MPI. Messages that are one contiguous region go in place (zero copy).

#include "exec/executor.hpp"

#include <halox/detail/mpi_handle.hpp>

#include <vector>

namespace halox::detail {

class p2p_executor final : public host_executor {
public:
  p2p_executor(schedule s, exec_config const& cfg, bool persistent);
  [[nodiscard]] backend kind() const noexcept override {
    return persistent_ ? backend::mpi_persistent : backend::mpi_pack;
  }

protected:
  void post(void* stream) override;
  void receive() override;
  void on_bind() override;

private:
  bool persistent_;
  std::size_t send_area_ = 0, recv_area_ = 0; // workspace offsets of the packed messages
  std::vector<std::size_t> soff_, roff_;      // message offsets inside those areas
  std::vector<int> scount_, rcount_;
  std::vector<char> send_inplace_, recv_inplace_; // single contiguous region: no packing
  std::vector<unique_request> persistent_reqs_;   // recvs first, then sends
};

} // namespace halox::detail
