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
} // namespace

template <class T> transfer<T>::transfer(halox::tensor_desc const& src,
                                         halox::tensor_desc const& dst, halox::backend method)
    : src_(src), dst_(dst), plan_(src_, dst_, move_options(method)) {}

template <class T>
void transfer<T>::forward(std::vector<T>& src_buf, std::vector<T>& dst_buf, phase_times& t) {
  double const t0 = now();
  plan_.execute(halox::tensor_view(src_, src_buf), halox::tensor_view(dst_, dst_buf));
  t.shuffle += now() - t0;
}

template <class T> void transfer<T>::backward(std::vector<T>& dst_buf, std::vector<T>& src_buf,
                                              phase_times& t, bool accumulate) {
  double const t0 = now();
  std::vector<T>& out = accumulate ? scratch_ : src_buf;
  if (accumulate && scratch_.size() != src_buf.size()) scratch_.resize(src_buf.size());
  plan_.execute_inverse(halox::tensor_view(dst_, dst_buf), halox::tensor_view(src_, out));
  double const t1 = now();
  t.shuffle += t1 - t0;
  if (accumulate) {
    add_owned(src_, scratch_.data(), src_, src_buf.data());
    t.compute += now() - t1;
  }
}

template class transfer<float>;
template class transfer<double>;

} // namespace trainer
