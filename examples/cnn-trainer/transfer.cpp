#include "transfer.hpp"

#include <mpi.h>

namespace trainer {

double now() { return MPI_Wtime(); }

namespace {
// A fixed backend: no measuring collectives at build time (the automatic choice would time
// every backend for every transfer).
halox::redistribute_options move_options(halox::backend method) {
  halox::redistribute_options o;
  o.method = method;
  return o;
}
// A buffer of `d`'s local elements as a view.
template <class T> halox::tensor_view view(halox::tensor_desc const& d, T* p) {
  return {d, p, static_cast<std::size_t>(d.local_elements()) * sizeof(T)};
}
} // namespace

template <class T> transfer<T>::transfer(halox::tensor_desc const& src,
                                         halox::tensor_desc const& dst, halox::backend method)
    : src_(src), dst_(dst), plan_(src_, dst_, move_options(method)) {}

template <class T> void transfer<T>::forward(T const* src_buf, T* dst_buf, phase_times& t) {
  double const t0 = now();
  plan_.execute(view(src_, const_cast<T*>(src_buf)), view(dst_, dst_buf));
  t.shuffle += now() - t0;
}

template <class T>
void transfer<T>::backward(T const* dst_buf, T* src_buf, phase_times& t, bool accumulate) {
  double const t0 = now();
  if (accumulate) scratch_.resize(static_cast<std::size_t>(src_.local_elements())); // once
  T* const out = accumulate ? scratch_.data() : src_buf;
  plan_.execute_inverse(view(dst_, const_cast<T*>(dst_buf)), view(src_, out));
  double const t1 = now();
  t.shuffle += t1 - t0;
  if (accumulate) {
    add_owned(src_, scratch_.data(), src_, src_buf);
    t.compute += now() - t1;
  }
}

template <class T> std::size_t transfer<T>::held_bytes() const noexcept {
  halox::workspace_size const w = plan_.workspace_bytes();
  return w.host + w.pinned_host + w.device + scratch_.capacity() * sizeof(T);
}

template class transfer<float>;
template class transfer<double>;

} // namespace trainer
