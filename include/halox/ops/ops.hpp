#pragma once
/// \file ops.hpp
/// All reference operators: convolution, pooling, batch normalisation, ReLU and LRN, with the views
/// and window geometry they share.

#include <halox/ops/batch_norm.hpp>
#include <halox/ops/conv.hpp>
#include <halox/ops/lrn.hpp>
#include <halox/ops/pool.hpp>
#include <halox/ops/relu.hpp>
#include <halox/ops/tensor_ref.hpp>
#include <halox/ops/window.hpp>
