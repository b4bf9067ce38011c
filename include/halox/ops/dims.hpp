#pragma once
/// \file dims.hpp
/// The extents and strides of an operator's tensor view, held inline.
///
/// A `tensor_ref` is built for every kernel call, and every sub-box of it is another one. With
/// `std::vector` members each of those views cost two heap allocations, which a training step
/// repeated hundreds of times. `dims` holds up to `max_dims` values in place, so views are
/// trivially copied and an operator's execution path allocates nothing. It offers the parts of
/// `std::vector`'s interface that code reading shapes uses, and converts to and from
/// `std::vector<index_t>` implicitly, so existing calls keep compiling.

#include <halox/box.hpp>
#include <halox/error.hpp>

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

namespace halox::ops {

/// Up to `max_dims` extents or strides, stored inline (no allocation).
class dims {
public:
  using value_type = index_t;            ///< the type of one value
  using size_type = std::size_t;         ///< the type of a count of values
  using iterator = index_t*;             ///< iterator over the values
  using const_iterator = index_t const*; ///< read-only iterator over the values
  /// The most values a `dims` holds: halox's tensor rank limit.
  static constexpr std::size_t capacity = static_cast<std::size_t>(max_dims);

  /// No values.
  dims() noexcept = default;
  /// `n` copies of `v`.
  explicit dims(std::size_t n, index_t v = 0) { assign(n, v); }
  /// The listed values.
  dims(std::initializer_list<index_t> v) { assign(v.begin(), v.end()); }
  /// The values of `v` (implicit, so calls passing a vector shape keep compiling).
  dims(std::vector<index_t> const& v) { assign(v.begin(), v.end()); } // NOLINT: implicit
  /// The values of [first, last).
  template <class It, class = decltype(*std::declval<It&>()),
            class = decltype(++std::declval<It&>())>
  dims(It first, It last) {
    assign(first, last);
  }

  /// The values as a vector (implicit, for interfaces that take `std::vector<index_t>`).
  operator std::vector<index_t>() const { return {begin(), end()}; } // NOLINT: implicit
  /// The values as a vector.
  [[nodiscard]] std::vector<index_t> to_vector() const { return {begin(), end()}; }

  /// Replaces the values with `n` copies of `v`.
  void assign(std::size_t n, index_t v) {
    check_size(n);
    n_ = n;
    std::fill(v_, v_ + n, v);
  }
  /// Replaces the values with those of [first, last).
  template <class It> void assign(It first, It last) {
    std::size_t n = 0;
    for (It i = first; i != last; ++i) {
      check_size(n + 1);
      v_[n++] = static_cast<index_t>(*i);
    }
    n_ = n;
  }

  [[nodiscard]] std::size_t size() const noexcept { return n_; }        ///< number of values
  [[nodiscard]] bool empty() const noexcept { return n_ == 0; }         ///< no values?
  [[nodiscard]] index_t* data() noexcept { return v_; }                 ///< the first value
  [[nodiscard]] index_t const* data() const noexcept { return v_; }     ///< the first value
  [[nodiscard]] iterator begin() noexcept { return v_; }                ///< the first value
  [[nodiscard]] iterator end() noexcept { return v_ + n_; }             ///< one past the last
  [[nodiscard]] const_iterator begin() const noexcept { return v_; }    ///< the first value
  [[nodiscard]] const_iterator end() const noexcept { return v_ + n_; } ///< one past the last
  /// Value `i` (unchecked, like `std::vector`).
  [[nodiscard]] index_t& operator[](std::size_t i) noexcept { return v_[i]; }
  /// Value `i` (unchecked, like `std::vector`).
  [[nodiscard]] index_t operator[](std::size_t i) const noexcept { return v_[i]; }
  [[nodiscard]] index_t& front() noexcept { return v_[0]; }          ///< the first value
  [[nodiscard]] index_t front() const noexcept { return v_[0]; }     ///< the first value
  [[nodiscard]] index_t& back() noexcept { return v_[n_ - 1]; }      ///< the last value
  [[nodiscard]] index_t back() const noexcept { return v_[n_ - 1]; } ///< the last value

  /// Appends `v`; throws `halox::error` beyond `capacity` values.
  void push_back(index_t v) {
    check_size(n_ + 1);
    v_[n_++] = v;
  }
  /// Removes the last value.
  void pop_back() noexcept { --n_; }
  /// Keeps the first `n` values, or appends copies of `v` up to `n`.
  void resize(std::size_t n, index_t v = 0) {
    check_size(n);
    for (std::size_t i = n_; i < n; ++i) v_[i] = v;
    n_ = n;
  }
  /// Removes every value.
  void clear() noexcept { n_ = 0; }

  /// Same values in the same order.
  friend bool operator==(dims const& a, dims const& b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  /// Not the same values.
  friend bool operator!=(dims const& a, dims const& b) noexcept { return !(a == b); }

private:
  static void check_size(std::size_t n) {
    if (n > capacity)
      throw error(errc::invalid_argument,
                  "halox::ops::dims: " + std::to_string(n) + " dimensions, more than the " +
                      std::to_string(capacity) +
                      " an operator's tensor view holds; use a tensor of rank <= " +
                      std::to_string(capacity));
  }

  index_t v_[capacity] = {};
  std::size_t n_ = 0;
};

} // namespace halox::ops
