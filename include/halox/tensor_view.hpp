#pragma once
/// \file tensor_view.hpp
/// A caller-owned local buffer together with the descriptor it was allocated for.

#include <halox/tensor_desc.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace halox {

/// Non-owning view of one rank's local buffer: what plans execute on. Carrying the descriptor
/// and the size lets a plan reject a buffer allocated for another tensor, or too small, with a
/// clear error instead of corrupting memory.
struct tensor_view {
  tensor_desc const* desc = nullptr; ///< descriptor the buffer was allocated for
  void* data = nullptr;              ///< first allocated cell (halo included)
  std::size_t bytes = 0;             ///< size of the buffer in bytes

  /// An empty view (no descriptor, no buffer); executing a plan with it throws.
  tensor_view() = default;
  /// View of `bytes` bytes at `data` holding `desc`'s local tensor.
  tensor_view(tensor_desc const& d, void* p, std::size_t n) : desc(&d), data(p), bytes(n) {}
  /// View of a typed container (std::vector<T> or anything with data() and size()).
  template <class C> tensor_view(tensor_desc const& d, C& c)
      : desc(&d), data(c.data()), bytes(c.size() * sizeof(*c.data())) {}
};

/// Throws `halox::error` (invalid_argument) unless `v` is a buffer for a tensor laid out exactly
/// like `expected` (same global description and local strides), large enough for this rank's
/// part, and not null when that part holds any byte. `what` names the argument in the message.
/// The check plans apply to the buffers they are given, for code that takes views itself.
void validate_view(tensor_view const& v, tensor_desc const& expected, std::string const& what);

} // namespace halox
