#include "core/plan_engine.hpp"

#include <halox/error.hpp>

#include <sstream>

namespace halox::detail {

combine_op to_combine(reduce_op op) noexcept {
  switch (op) {
  case reduce_op::sum: return combine_op::sum;
  case reduce_op::max: return combine_op::max;
  case reduce_op::min: return combine_op::min;
  }
  return combine_op::sum;
}

plan_engine::plan_engine(MPI_Comm base, schedule forward, engine_options const& o,
                         std::uint64_t key)
    : forward_(std::move(forward)) {
  HALOX_MPI_CHECK(MPI_Comm_dup(base, comm_.out()));
  cfg_.comm = comm_.get();
  cfg_.memory = o.memory;
  cfg_.fill_value = o.fill_value;
  selection sel = select_backend(o.method, forward_, cfg_, o.tune, key);
  selected_ = sel.chosen;
  report_ = std::move(sel.report);
  fwd_ = make_executor(selected_, forward_, cfg_);
}

plan_engine::~plan_engine() = default;

void plan_engine::start(void* const* bufs, bool reverse, combine_op op, void* stream) {
  HALOX_REQUIRE(mpi_alive(), errc::invalid_state,
                "the plan was used after MPI_Finalize (or before MPI_Init); execute plans while "
                "MPI is initialised and destroy them before finalising");
  HALOX_REQUIRE(active_ == nullptr, errc::invalid_state,
                "start called while an exchange of this plan is still in flight; call wait() "
                "first");
  if (reverse && !rev_) {
    // Built on first use: a plan that never runs backwards never pays for it. Every rank
    // reaches this point in the same call, so collective set-up inside is safe.
    exec_config c = cfg_;
    rev_ = make_executor(selected_, forward_.reversed(), c);
  }
  executor* e = reverse ? rev_.get() : fwd_.get();
  e->start(bufs, reverse ? op : combine_op::replace, stream);
  active_ = e;
}

void plan_engine::wait(void* stream) {
  HALOX_REQUIRE(active_ != nullptr, errc::invalid_state,
                "wait called without a matching start; call start() (or execute()) first");
  executor* e = active_;
  active_ = nullptr;
  e->wait(stream);
}

std::string plan_engine::summary() const {
  std::ostringstream os;
  std::size_t regions = 0;
  for (auto const& m : forward_.sends) regions += m.regions.size();
  os << "backend " << to_string(selected_) << " (" << report_ << "); " << forward_.sends.size()
     << " send peer(s), " << forward_.recvs.size() << " receive peer(s), " << forward_.send_bytes()
     << " B out / " << forward_.recv_bytes() << " B in per exchange, " << regions
     << " send region(s), " << forward_.copies.size() << " local copy(ies)";
  return os.str();
}

} // namespace halox::detail
