#pragma once
// The packing executor: one host executor for every backend that splits into a packing
// strategy and a transport (exec/transport.hpp). It decides, per message, what goes on the
// wire and from where, and lets the transport move it:
//
//   contiguous  a message that is one contiguous run of the tensor goes in place (zero copy),
//               whatever the strategy, unless the transport needs fixed buffers;
//   pack        other messages are packed into a workspace area before they are sent and
//               unpacked from a landing area as they arrive;
//   iov         other messages go as iov lists of their runs, straight from and to the tensors
//               (transports that move iov lists; a combining reverse exchange still lands and
//               unpacks what it receives);
//   pipelined   like pack, but a long message travels as fragments (plan/fragments.hpp), each
//               packed just before it is sent and unpacked as soon as it lands;
//   datatypes   every message goes as its boxes in the tensors, which the transport walks
//               itself (MPI derived datatypes: halox packs nothing; a combining reverse
//               exchange still lands and unpacks what it receives).
//
// The host backends that move point-to-point messages are presets of it (exec/backend_table.cpp).

#include "exec/cpu/pack.hpp"
#include "exec/executor.hpp"
#include "exec/transport.hpp"
#include "plan/fragments.hpp"

#include <memory>
#include <string>
#include <vector>

namespace halox::detail {

/// How the packing executor puts non-contiguous messages on the wire.
enum class packing { pack, iov, pipelined, datatypes };

/// Name of a packing strategy ("pack", "iov", "pipelined", "derived datatypes").
[[nodiscard]] char const* to_string(packing p) noexcept;

class packing_executor final : public host_executor {
public:
  /// `preset`: the backend it implements (its name in reports); `strategy` the packing;
  /// `make` its transport.
  packing_executor(schedule s, exec_config const& cfg, backend preset, packing strategy,
                   transport_maker make);

  [[nodiscard]] backend kind() const noexcept override { return preset_; }
  [[nodiscard]] std::string wire_summary() const override;
  void warm_up() override { transport_->warm_up(); }

protected:
  void post(void* stream) override;
  void receive() override;
  void on_bind() override;
  void cancel_peer(int peer) noexcept override { transport_->cancel_peer(peer); }
  [[nodiscard]] bool abandon_requests(double grace) noexcept override {
    return transport_->abandon(grace);
  }

private:
  // How one piece leaves or lands.
  enum class how : unsigned char { inplace, packed, iov, walked };
  /// One message, or one fragment of a message, on the wire: one transport request.
  struct piece {
    std::size_t msg = 0;                 ///< index into sched_.sends / sched_.recvs
    byte_range range;                    ///< bytes of the message's stream
    std::vector<region> regions;         ///< this side's sub-boxes of `range` (fragments only)
    how mode = how::packed;              ///< receives: the mode of a plain (replacing) exchange
    std::size_t area = 0;                ///< workspace offset of its packed bytes / landing area
    std::size_t first_run = 0, runs = 0; ///< its runs in runs_ (iov)
  };
  void add_pieces(std::vector<message> const& msgs, bool recv);
  /// The regions `p` moves: its sub-boxes when it is a fragment, else all of its message's.
  [[nodiscard]] std::vector<region> const& regions_of(piece const& p, bool recv) const noexcept;
  [[nodiscard]] message const& message_of(piece const& p, bool recv) const noexcept {
    return recv ? sched_.recvs[p.msg] : sched_.sends[p.msg];
  }
  /// The tensor's own bytes of an in-place piece.
  [[nodiscard]] std::byte* in_place(piece const& p, bool recv) const;
  /// How receive `p` lands in this exchange (a combining exchange always unpacks).
  [[nodiscard]] how landing_mode(piece const& p) const noexcept {
    return op_ == combine_op::replace ? p.mode : how::packed;
  }
  /// The buffer (or iov list) and run count request `p` is posted with.
  void* wire_buffer(piece const& p, how mode, bool recv, std::size_t& runs) const;
  /// The context's fragment size (0: automatic).
  [[nodiscard]] std::size_t fragment_setting() const noexcept;

  backend preset_;
  packing strategy_;
  std::unique_ptr<transport> transport_;
  std::vector<piece> rpieces_, spieces_; // one transport request each: receives, then sends
  std::vector<run_ref> runs_;            // the iov lists' runs, all pieces
  std::size_t iov_area_ = 0;             // workspace offset of the io_run lists
};

} // namespace halox::detail
