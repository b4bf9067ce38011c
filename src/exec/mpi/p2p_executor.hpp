#pragma once
// mpi_pack, mpi_persistent and mpi_pipeline: halox packs each peer's regions into one contiguous
// message and uses point-to-point MPI. Messages that are one contiguous region go in place (zero
// copy). mpi_pipeline sends a long message as fragments (plan/fragments.hpp), each packed just
// before it is sent and unpacked as soon as it lands.

#include "exec/executor.hpp"
#include "plan/fragments.hpp"

#include <halox/detail/mpi_handle.hpp>

#include <vector>

namespace halox::detail {

enum class p2p_mode { plain, persistent, pipelined };

class p2p_executor final : public host_executor {
public:
  p2p_executor(schedule s, exec_config const& cfg, p2p_mode mode);
  [[nodiscard]] std::string wire_summary() const override;
  [[nodiscard]] backend kind() const noexcept override {
    return mode_ == p2p_mode::persistent  ? backend::mpi_persistent
           : mode_ == p2p_mode::pipelined ? backend::mpi_pipeline
                                          : backend::mpi_pack;
  }

protected:
  void post(void* stream) override;
  void receive() override;
  void on_bind() override;

private:
  /// One message, or one fragment of a message, on the wire (pipelined: one per fragment).
  struct piece {
    std::size_t msg = 0;         ///< index into sched_.sends / sched_.recvs
    byte_range range;            ///< bytes of the message's stream
    std::vector<region> regions; ///< this side's sub-boxes of `range` (fragments only; a whole
                                 ///< message keeps its own regions, see regions_of)
    int count = 0;               ///< range.bytes as MPI's count
  };
  void add_pieces(std::vector<message> const& msgs, bool recv);
  [[nodiscard]] std::byte* in_place(message const& m, std::size_t offset) const;
  /// The regions `p` moves: its sub-boxes when it is a fragment, else all of `m`'s.
  [[nodiscard]] static std::vector<region> const& regions_of(piece const& p,
                                                             message const& m) noexcept;
  /// The context's fragment size (0: automatic).
  [[nodiscard]] std::size_t fragment_setting() const noexcept;

  p2p_mode mode_;
  std::size_t send_area_ = 0, recv_area_ = 0;     // workspace offsets of the packed messages
  std::vector<std::size_t> soff_, roff_;          // message offsets inside those areas
  std::vector<char> send_inplace_, recv_inplace_; // single contiguous region: no packing
  std::vector<piece> rpieces_, spieces_;          // what is posted, in order
  std::vector<unique_request> persistent_reqs_;   // recvs first, then sends
};

} // namespace halox::detail
