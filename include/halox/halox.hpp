#pragma once
/// \file halox.hpp
/// Umbrella header: everything in the public API of the core library (`halox::halox`). The
/// operators (`halox::ops`) have their own headers: <halox/ops/ops.hpp> (serial) and
/// <halox/ops/distributed.hpp>.

#include <halox/backend.hpp>
#include <halox/box.hpp>
#include <halox/box_gather.hpp>
#include <halox/checksum.hpp>
#include <halox/collective.hpp>
#include <halox/config.hpp>
#include <halox/deep_halo.hpp>
#include <halox/device.hpp>
#include <halox/distribution.hpp>
#include <halox/dtype.hpp>
#include <halox/error.hpp>
#include <halox/grid.hpp>
#include <halox/halo.hpp>
#include <halox/info.hpp>
#include <halox/redistribute.hpp>
#include <halox/settings.hpp>
#include <halox/tensor_desc.hpp>
#include <halox/tensor_view.hpp>
#include <halox/tune.hpp>
