#include "transfer.hpp"

#include <mpi.h>

namespace trainer {

double now() { return MPI_Wtime(); }

template <class T>
transfer<T>::transfer(halox::tensor_desc const& src, halox::tensor_desc const& dst)
    : src_(src), dst_(dst) {
  if (!same_blocks(src, dst)) {
    halox::redistribute_options o;
    // Point-to-point with halox's packing: deterministic, and no measuring collectives at
    // build time (the automatic choice would time every backend for every transfer).
    o.method = halox::backend::mpi_pack;
    plan_ = std::make_unique<halox::redistribute_plan>(src_, dst_, o);
  }
}

template <class T>
void transfer<T>::forward(std::vector<T>& src_buf, std::vector<T>& dst_buf, phase_times& t) {
  double const t0 = now();
  if (plan_) {
    plan_->execute(halox::tensor_view(src_, src_buf), halox::tensor_view(dst_, dst_buf));
    t.shuffle += now() - t0;
    return;
  }
  copy_owned(src_, src_buf.data(), dst_, dst_buf.data());
  t.compute += now() - t0;
}

template <class T> void transfer<T>::backward(std::vector<T>& dst_buf, std::vector<T>& src_buf,
                                              phase_times& t, bool accumulate) {
  double const t0 = now();
  if (plan_) {
    std::vector<T>& out = accumulate ? scratch_ : src_buf;
    if (accumulate && scratch_.size() != src_buf.size()) scratch_.resize(src_buf.size());
    plan_->execute_inverse(halox::tensor_view(dst_, dst_buf), halox::tensor_view(src_, out));
    t.shuffle += now() - t0;
    if (accumulate) {
      double const t1 = now();
      add_owned(src_, scratch_.data(), src_, src_buf.data());
      t.compute += now() - t1;
    }
    return;
  }
  if (accumulate)
    add_owned(dst_, dst_buf.data(), src_, src_buf.data());
  else
    copy_owned(dst_, dst_buf.data(), src_, src_buf.data());
  t.compute += now() - t0;
}

template class transfer<float>;
template class transfer<double>;

} // namespace trainer
