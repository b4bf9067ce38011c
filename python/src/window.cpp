// Sliding-window geometry of halox::ops (include/halox/ops/window.hpp) for Python: halox.torch
// sizes the halos of its distributed convolutions and poolings from these, so the window rule
// lives in one place.
#include "bindings.hpp"

#include <halox/ops/window.hpp>
#include <halox/ops/window_partition.hpp>

#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace halox_py {

namespace {

using index_vec = std::vector<halox::index_t>;

halox::ops::conv_params params(index_vec stride, index_vec pad_lo, index_vec pad_hi,
                               index_vec dilation) {
  return {std::move(stride), std::move(pad_lo), std::move(pad_hi), std::move(dilation)};
}

halox::box make_box(index_vec const& lo, index_vec const& hi) {
  if (lo.size() != hi.size() || lo.size() > static_cast<std::size_t>(halox::max_dims))
    throw halox::error(halox::errc::invalid_argument,
                       "window geometry: lo has " + std::to_string(lo.size()) + " entries and hi " +
                           std::to_string(hi.size()) + "; pass one entry per spatial dimension (" +
                           "at most " + std::to_string(halox::max_dims) + ")");
  halox::box b;
  b.nd = static_cast<int>(lo.size());
  for (int d = 0; d < b.nd; ++d) {
    b.lo[d] = lo[static_cast<std::size_t>(d)];
    b.hi[d] = hi[static_cast<std::size_t>(d)];
  }
  return b;
}

py::tuple bounds(halox::box const& b) {
  index_vec lo(b.lo, b.lo + b.nd), hi(b.hi, b.hi + b.nd);
  return py::make_tuple(py::tuple(py::cast(lo)), py::tuple(py::cast(hi)));
}

// Binds a rule that maps an output box to the input box its windows read.
using box_rule = halox::box (*)(halox::box const&, halox::ops::dims const&, halox::ops::dims const&,
                                halox::ops::conv_params const&);
void def_box_rule(py::module_& m, char const* name, box_rule rule, std::string const& doc) {
  m.def(
      name,
      [rule](index_vec const& out_lo, index_vec const& out_hi, index_vec const& in_extent,
             index_vec const& kernel, index_vec stride, index_vec pad_lo, index_vec pad_hi,
             index_vec dilation) {
        return bounds(rule(
            make_box(out_lo, out_hi), in_extent, kernel,
            params(std::move(stride), std::move(pad_lo), std::move(pad_hi), std::move(dilation))));
      },
      py::arg("out_lo"), py::arg("out_hi"), py::arg("in_extent"), py::arg("kernel"),
      py::arg("stride") = index_vec{}, py::arg("pad_lo") = index_vec{},
      py::arg("pad_hi") = index_vec{}, py::arg("dilation") = index_vec{}, doc.c_str());
}

halox::ops::halo_reach reach_of(std::string const& name) {
  if (name == "footprint") return halox::ops::halo_reach::footprint;
  if (name == "span") return halox::ops::halo_reach::span;
  throw halox::error(halox::errc::invalid_argument,
                     "window_partition: reach='" + name + "'; use 'footprint' or 'span'");
}

py::tuple partition(halox::index_t in_extent, halox::index_t kernel, index_vec const& in_starts,
                    halox::index_t stride, halox::index_t pad_lo, halox::index_t pad_hi,
                    halox::index_t dilation, std::optional<index_vec> const& out_starts,
                    std::string const& reach) {
  halox::ops::window_1d const w{in_extent, kernel, stride, pad_lo, pad_hi, dilation};
  auto const r =
      halox::ops::window_partition(w, in_starts, out_starts.value_or(index_vec{}), reach_of(reach));
  py::list need;
  for (std::size_t p = 0; p < r.need_lo.size(); ++p)
    need.append(py::make_tuple(r.need_lo[p], r.need_hi[p]));
  return py::make_tuple(py::tuple(py::cast(r.out_starts)), py::make_tuple(r.halo_lo, r.halo_hi),
                        py::tuple(need));
}

} // namespace

void bind_window(py::module_& m) {
  char const* params_doc =
      " Parameters follow halox::ops::conv_params: each of stride, pad_lo, pad_hi, dilation may "
      "be empty (stride 1, padding 0, dilation 1), hold one value for every spatial dimension, "
      "or one per dimension.";
  m.def(
      "window_output_shape",
      [](index_vec const& in_extent, index_vec const& kernel, index_vec stride, index_vec pad_lo,
         index_vec pad_hi, index_vec dilation) {
        // conv_output_shape checks every parameter and names the bad one.
        halox::ops::dims x{1, 1}, w{1, 1};
        for (auto e : in_extent) x.push_back(e);
        for (auto k : kernel) w.push_back(k);
        auto const out = halox::ops::conv_output_shape(
            x, w,
            params(std::move(stride), std::move(pad_lo), std::move(pad_hi), std::move(dilation)));
        return py::tuple(py::cast(index_vec(out.begin() + 2, out.end())));
      },
      py::arg("in_extent"), py::arg("kernel"), py::arg("stride") = index_vec{},
      py::arg("pad_lo") = index_vec{}, py::arg("pad_hi") = index_vec{},
      py::arg("dilation") = index_vec{},
      (std::string("Output extents of a sliding window (convolution or pooling, floor rule) over "
                   "spatial extents `in_extent` with window `kernel`.") +
       params_doc)
          .c_str());
  def_box_rule(m, "window_input_span", &halox::ops::conv_input_span,
               std::string("(lo, hi) of the input positions, padding included (lo may be "
                           "negative, hi past the extent), that the windows of the output box "
                           "[out_lo, out_hi) read: the halo a distributed window operator needs "
                           "when padding is stored as halo cells.") +
                   params_doc);
  def_box_rule(m, "window_input_footprint", &halox::ops::conv_input_footprint,
               "As window_input_span, clipped to the input [0, in_extent) (empty: all zeros).");
  m.def("window_partition", &partition, py::arg("in_extent"), py::arg("kernel"),
        py::arg("in_starts"), py::arg("stride") = 1, py::arg("pad_lo") = 0, py::arg("pad_hi") = 0,
        py::arg("dilation") = 1, py::arg("out_starts") = py::none(), py::arg("reach") = "footprint",
        "The split of a sliding window along one spatial dimension over the parts whose input "
        "blocks start at `in_starts` (parts + 1 positions from 0 to `in_extent`): returns "
        "(out_starts, (halo_lo, halo_hi), need). `out_starts` (parts + 1 positions from 0 to the "
        "output extent) fixes the output blocks; None gives each output to the part owning its "
        "anchor (the window's centre tap), the rule of halox::ops's distributed operators. `need` "
        "holds, per part, the (lo, hi) input positions its outputs read: clipped to the input "
        "with reach='footprint', padding included with reach='span' (padding stored as halo "
        "cells, as halox.torch does); (0, 0) when nothing. The halo widths are the smallest "
        "uniform ones that give every part with cells what it needs. "
        "halox::ops::window_partition.");
}

} // namespace halox_py
