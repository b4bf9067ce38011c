// The batch-norm statistics merge of halox::ops (include/halox/ops/batch_norm.hpp) for Python:
// halox.torch combines every process's per-channel statistics with it, so distributed batch
// norm in Python and in C++ merge the same way.
#include "bindings.hpp"

#include <halox/error.hpp>
#include <halox/ops/batch_norm.hpp>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

namespace py = pybind11;

namespace halox_py {

namespace {

using array = py::array_t<double, py::array::c_style | py::array::forcecast>;

std::vector<double> values(array const& a, char const* name, std::size_t part) {
  if (a.ndim() != 1)
    throw halox::error(halox::errc::invalid_argument,
                       std::string("bn_merge_stats: part ") + std::to_string(part) + "'s " + name +
                           " has " + std::to_string(a.ndim()) +
                           " dimensions; pass one value per channel");
  return {a.data(), a.data() + a.size()};
}

py::tuple merge(std::vector<py::tuple> const& parts) {
  halox::ops::bn_stats total;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].size() != 3)
      throw halox::error(halox::errc::invalid_argument,
                         "bn_merge_stats: part " + std::to_string(i) + " has " +
                             std::to_string(parts[i].size()) +
                             " entries; pass (count, mean, m2) per part");
    halox::ops::bn_stats s;
    s.count = parts[i][0].cast<halox::index_t>();
    if (s.count < 0)
      throw halox::error(halox::errc::invalid_argument,
                         "bn_merge_stats: part " + std::to_string(i) + " has count " +
                             std::to_string(s.count) + "; pass the number of values (>= 0)");
    s.mean = values(parts[i][1].cast<array>(), "mean", i);
    s.m2 = values(parts[i][2].cast<array>(), "m2", i);
    if (s.count > 0 && s.mean.size() != s.m2.size())
      throw halox::error(halox::errc::invalid_argument,
                         "bn_merge_stats: part " + std::to_string(i) + " has " +
                             std::to_string(s.mean.size()) + " means and " +
                             std::to_string(s.m2.size()) + " m2 values; pass one per channel");
    halox::ops::bn_merge_stats(total, s);
  }
  return py::make_tuple(total.count,
                        array(static_cast<py::ssize_t>(total.mean.size()), total.mean.data()),
                        array(static_cast<py::ssize_t>(total.m2.size()), total.m2.data()));
}

} // namespace

void bind_batch_norm(py::module_& m) {
  m.def("bn_merge_stats", &merge, py::arg("parts"),
        "Merges per-channel batch-norm statistics of several blocks: `parts` is a list of "
        "(count, mean, m2), count the values per channel of a block, mean and m2 (the sum of "
        "squared deviations from the mean) arrays of one value per channel. Returns the merged "
        "(count, mean, m2) (biased variance: m2 / count). Parts with count 0 are skipped. The "
        "merge of halox::ops::bn_merge_stats (pairwise, exact for any split of the batch).");
}

} // namespace halox_py
