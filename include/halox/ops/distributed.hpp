#pragma once
/// \file distributed.hpp
/// The distributed operators: convolution, pooling, batch normalisation, ReLU and LRN on tensors
/// split over N and the spatial dimensions (and, for LRN, the channels), built on halo exchanges
/// and the serial reference kernels, and the memory budget over them. See docs/dist_ops.md.

#include <halox/ops/dist_batch_norm.hpp>
#include <halox/ops/dist_common.hpp>
#include <halox/ops/dist_conv.hpp>
#include <halox/ops/dist_lrn.hpp>
#include <halox/ops/dist_pool.hpp>
#include <halox/ops/dist_relu.hpp>
#include <halox/ops/memory_budget.hpp>
