#pragma once
/// \file tensor_ref.hpp
/// Non-owning strided views of caller memory, used by every reference operator.
///
/// Operators never allocate or own tensors: they read and write through a `tensor_ref`, whose
/// strides (in elements) let it address a sub-block of a larger buffer, such as the owned part
/// of a buffer that also holds halos. A `block_ref` adds where such a buffer sits in the global
/// spatial coordinates of a distributed tensor, which is what the `*_box` kernels need to
/// compute only part of an output.

#include <halox/box.hpp>
#include <halox/ops/dims.hpp>

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace halox::ops {

/// Row-major (last dimension fastest) element strides of a contiguous tensor of `shape`.
[[nodiscard]] inline dims contiguous_strides(dims const& shape) {
  dims s(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

/// Number of elements of a tensor of `shape` (1 for rank 0).
[[nodiscard]] inline index_t element_count(dims const& shape) noexcept {
  index_t n = 1;
  for (index_t e : shape) n *= e;
  return n;
}

/// A non-owning view of a strided N-d tensor in caller memory.
///
/// `T` may be const-qualified for read-only views (see `const_tensor_ref`); a mutable view
/// converts implicitly to a read-only one. Operators take `shape` as NC followed by 1 to 3
/// spatial extents (NCW, NCHW, NCDHW), and weights as [Cout, Cin, k...].
template <class T> struct tensor_ref {
  T* data = nullptr; ///< address of element (0, 0, ...)
  dims shape;        ///< extent per dimension
  dims strides;      ///< element stride per dimension (same length as `shape`)

  /// An empty view (rank 0, no data).
  tensor_ref() = default;
  /// A view of a row-major contiguous tensor.
  tensor_ref(T* data_, dims const& shape_)
      : data(data_), shape(shape_), strides(contiguous_strides(shape)) {}
  /// A view with explicit element strides.
  tensor_ref(T* data_, dims const& shape_, dims const& strides_)
      : data(data_), shape(shape_), strides(strides_) {}
  /// The read-only view of a mutable one.
  template <class U, class = std::enable_if_t<std::is_same_v<T, U const>>>
  tensor_ref(tensor_ref<U> const& other) // NOLINT: implicit by design, like T* -> T const*
      : data(other.data), shape(other.shape), strides(other.strides) {}

  /// Number of dimensions.
  [[nodiscard]] int rank() const noexcept { return static_cast<int>(shape.size()); }
  /// Number of elements.
  [[nodiscard]] index_t size() const noexcept { return element_count(shape); }
};

/// A read-only view.
template <class T> using const_tensor_ref = tensor_ref<T const>;

/// The view of the part of `t` inside box `b`, given in `t`'s own index coordinates over all of
/// its dimensions (`b.nd == t.rank()`). The result shares `t`'s strides; the caller keeps `b`
/// inside `t` (not checked here; operators check the shapes they receive).
template <class T> [[nodiscard]] tensor_ref<T> sub_box(tensor_ref<T> const& t, box const& b) {
  tensor_ref<T> r = t;
  for (int d = 0; d < b.nd && d < t.rank(); ++d) {
    r.data += b.lo[d] * t.strides[d];
    r.shape[d] = b.extent(d);
  }
  return r;
}

/// A local buffer holding part of a globally indexed NC[D]HW tensor.
///
/// `ref` holds the full batch and channel extents; along each spatial dimension its element 0
/// is global position `origin[d]`. A rank's haloed input block, for instance, has
/// `origin = owned_lo - halo_lo`. An empty `origin` means all zeros (the whole tensor).
template <class T> struct block_ref {
  tensor_ref<T> ref; ///< the buffer
  dims origin;       ///< global spatial coordinate of the buffer's first element
  /// The caller's promise that every element of the buffer outside the global extent (beyond
  /// the tensor's boundary, where a window reads zero padding) holds zero, as a halo exchange
  /// with `boundary_fill::constant` and fill value 0 leaves them. A convolution may then read
  /// those elements as its padding rather than clip its source region, which keeps the source
  /// one dense array when the block is a haloed block; the results are the same either way.
  /// Other operators ignore it.
  bool zero_padding = false;

  /// An empty block.
  block_ref() = default;
  /// A block at `origin_` (empty: at the global origin).
  block_ref(tensor_ref<T> const& ref_, dims const& origin_ = {}) // NOLINT: implicit
      : ref(ref_), origin(origin_) {}
  /// The read-only block of a mutable one.
  template <class U, class = std::enable_if_t<std::is_same_v<T, U const>>>
  block_ref(block_ref<U> const& other) // NOLINT: implicit by design
      : ref(other.ref), origin(other.origin), zero_padding(other.zero_padding) {}
};

/// A read-only block.
template <class T> using const_block_ref = block_ref<T const>;

} // namespace halox::ops
