#include "exec/cuda/device_executor.hpp"

#include "exec/cpu/pack.hpp"

#include <utility>
#include <vector>

namespace halox::detail {

void device_executor::declare_messages(bool walked) {
  // The packed stream holds each message whole: one request moves one message.
  std::vector<wire_request> rw, sw;
  std::vector<request_info> info;
  for (auto const& m : sched_.recvs) {
    rw.push_back({m.peer, m.bytes, 0, walked ? message_boxes(sched_, m) : std::vector<wire_box>{}});
    info.push_back({m.peer, m.bytes, true});
  }
  for (auto const& m : sched_.sends) {
    sw.push_back({m.peer, m.bytes, 0, walked ? message_boxes(sched_, m) : std::vector<wire_box>{}});
    info.push_back({m.peer, m.bytes, false});
  }
  transport_->declare(rw, sw, layout());
  waits().name_requests(transport_->request_table(std::move(info)));
}

} // namespace halox::detail
