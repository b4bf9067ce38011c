#pragma once
// Helpers shared by the MPI tests.

#include <halox/error.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <functional>
#include <string>

namespace halox::test {

/// Rank of the calling process in MPI_COMM_WORLD.
inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

/// Size of MPI_COMM_WORLD.
inline int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

/// Runs `f`, expects a halox::error with `code` whose message contains `expected`, and checks
/// (with one all-reduce that every rank reaches) that every rank threw.
inline void expect_error_everywhere(std::function<void()> const& f, errc code,
                                    std::string const& expected) {
  int threw = 0;
  try {
    f();
  } catch (halox::error const& e) {
    threw = 1;
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(e.message().find(expected), std::string::npos)
        << "expected \"" << expected << "\" in: " << e.what();
    EXPECT_EQ(e.rank(), world_rank()) << e.what();
  } catch (std::exception const& e) {
    ADD_FAILURE() << "expected halox::error, got: " << e.what();
  }
  EXPECT_EQ(threw, 1) << "no halox::error on this rank (expected \"" << expected << "\")";
  int threw_total = 0;
  MPI_Allreduce(&threw, &threw_total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(threw_total, world_size()) << "not every rank threw";
}

// Runs `f`; returns the error code it threw (or -1) and the message, and how long it took.
struct outcome {
  int code = -1;
  std::string message;
  double seconds = 0;
};
template <class F> outcome run(F&& f) {
  outcome o;
  double const t0 = MPI_Wtime();
  try {
    f();
  } catch (halox::error const& e) {
    o.code = static_cast<int>(e.code());
    o.message = e.message();
  }
  o.seconds = MPI_Wtime() - t0;
  return o;
}

} // namespace halox::test
