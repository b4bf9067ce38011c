#pragma once
/// \file bindings.hpp
/// The parts of the halox._halox module, each defined in its own file.

#include <pybind11/pybind11.h>

namespace halox_py {

/// Enums, boxes, grids, distributions, tensor descriptors, contexts (descriptors.cpp).
void bind_descriptors(pybind11::module_& m);
/// Halo, redistribution and box-gather plans; gather and scatter (plans.cpp).
void bind_plans(pybind11::module_& m);
/// Sliding-window geometry of the operators (window.cpp).
void bind_window(pybind11::module_& m);
/// The batch-norm statistics merge of the operators (batch_norm.cpp).
void bind_batch_norm(pybind11::module_& m);

} // namespace halox_py
