#pragma once
// A device_pack with its own stream buffer, for tests and benchmarks that drive the pack
// kernels without a plan (a plan's executors place the stream in the plan's workspace).

#include "exec/context_state.hpp"
#include "exec/cuda/device_pack.hpp"

#include <algorithm>
#include <memory>

namespace halox::detail {

struct owned_device_pack {
  std::shared_ptr<context_state> ctx = std::make_shared<context_state>(); // halox's allocations
  device_pack dp;
  memory_block stream;

  owned_device_pack(schedule const& s, device_pack_options const& o)
      : dp(s, o, ctx),
        stream(ctx, std::max<std::size_t>(dp.stream_bytes(), 64), memory_kind::device) {
    dp.set_stream(reinterpret_cast<unsigned char*>(stream.data()));
  }
};

} // namespace halox::detail
