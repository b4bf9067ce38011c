#pragma once
/// \file handle.hpp
/// One RAII owner for every opaque C handle halox creates (MPI, CUDA, NCCL, hwloc).

#include <utility>

namespace halox::detail {

/// Owns a handle of type `T` released by `Traits::release(T&)`; `Traits::null()` is the empty
/// value. Move-only; move-assignment releases the handle it overwrites; the destructor never
/// throws (release errors are ignored there, since nothing can be done about them).
template <class T, class Traits> class unique_handle {
public:
  unique_handle() noexcept : h_(Traits::null()) {}
  explicit unique_handle(T h) noexcept : h_(h) {}
  unique_handle(unique_handle const&) = delete;
  unique_handle& operator=(unique_handle const&) = delete;
  unique_handle(unique_handle&& o) noexcept : h_(std::exchange(o.h_, Traits::null())) {}
  unique_handle& operator=(unique_handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, Traits::null());
    }
    return *this;
  }
  ~unique_handle() { reset(); }

  /// The raw handle (still owned).
  [[nodiscard]] T get() const noexcept { return h_; }
  /// Address for C APIs that create into an out-parameter; releases any current handle first.
  [[nodiscard]] T* out() noexcept {
    reset();
    return &h_;
  }
  /// Gives up ownership.
  [[nodiscard]] T release() noexcept { return std::exchange(h_, Traits::null()); }
  /// Releases the owned handle, if any.
  void reset() noexcept {
    if (h_ != Traits::null()) {
      Traits::release(h_);
      h_ = Traits::null();
    }
  }
  /// True when a handle is owned.
  explicit operator bool() const noexcept { return h_ != Traits::null(); }

private:
  T h_;
};

} // namespace halox::detail
