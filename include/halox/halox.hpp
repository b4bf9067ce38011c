#pragma once
/// \file halox.hpp
/// Umbrella header: everything in the public API of halox.

#include <halox/backend.hpp>
#include <halox/box.hpp>
#include <halox/config.hpp>
#include <halox/distribution.hpp>
#include <halox/dtype.hpp>
#include <halox/error.hpp>
#include <halox/grid.hpp>
#include <halox/halo.hpp>
#include <halox/info.hpp>
#include <halox/ops/distributed.hpp>
#include <halox/ops/ops.hpp>
#include <halox/redistribute.hpp>
#include <halox/tensor_desc.hpp>
#include <halox/tensor_view.hpp>
#include <halox/tune.hpp>
