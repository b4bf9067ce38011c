#pragma once
/// \file error.hpp
/// The single error type of halox and the check macros that raise it.

#include <stdexcept>
#include <string>

namespace halox {

/// Category of a halox failure.
enum class errc {
  invalid_argument,   ///< a value passed by the caller is out of range or inconsistent
  inconsistent_ranks, ///< ranks passed different collective descriptions
  mpi_error,          ///< an MPI call returned an error
  cuda_error,         ///< a CUDA call returned an error
  nccl_error,         ///< an NCCL call returned an error
  invalid_state,      ///< an operation was called in the wrong order (wait without start, ...)
  unsupported,        ///< the combination is valid but not available in this build
  internal,           ///< a bug in halox
  timeout,            ///< a wait exceeded its bound (HALOX_TIMEOUT / timeout_seconds)
  ucx_error,          ///< a UCX call failed (the ucx / ucx_iov backends)
  peer_failed,        ///< a peer of this plan failed at execute and will not take part
  out_of_memory       ///< an allocation failed, or what is asked for does not fit a memory budget
};

/// Human-readable name of an error category.
[[nodiscard]] char const* to_string(errc c) noexcept;

/// The one exception type thrown by halox.
///
/// Its `what()` reads `halox error [<code>] on rank <r>: <message> (at <call>, <file>:<line>)`.
class error : public std::runtime_error {
public:
  /// Builds the error; `rank` is the world rank or -1 when MPI is not initialised.
  error(errc code, std::string message, char const* call = "", char const* file = "", int line = 0);

  /// The category.
  [[nodiscard]] errc code() const noexcept { return code_; }
  /// World rank that raised the error (-1 if MPI was not initialised).
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// The message without the decoration added by `what()`.
  [[nodiscard]] std::string const& message() const noexcept { return message_; }
  /// The failing call or expression, when known.
  [[nodiscard]] std::string const& call() const noexcept { return call_; }
  /// Source file of the failing check.
  [[nodiscard]] std::string const& file() const noexcept { return file_; }
  /// Source line of the failing check.
  [[nodiscard]] int line() const noexcept { return line_; }

private:
  errc code_;
  int rank_;
  std::string message_, call_, file_;
  int line_;
};

namespace detail {
[[noreturn]] void throw_mpi_error(int code, char const* call, char const* file, int line);
[[noreturn]] void throw_error(errc code, std::string const& msg, char const* call, char const* file,
                              int line);
} // namespace detail
} // namespace halox

/// Evaluates an MPI call once and throws `halox::error` (errc::mpi_error) if it failed.
#define HALOX_MPI_CHECK(call)                                                                      \
  do {                                                                                             \
    int halox_mpi_rc_ = (call);                                                                    \
    if (halox_mpi_rc_ != 0)                                                                        \
      ::halox::detail::throw_mpi_error(halox_mpi_rc_, #call, __FILE__, __LINE__);                  \
  } while (0)

/// Throws `halox::error` with `code` and message `msg` (a std::string expression) unless `cond`.
/// Never compiled out.
#define HALOX_REQUIRE(cond, code, msg)                                                             \
  do {                                                                                             \
    if (!(cond)) ::halox::detail::throw_error((code), (msg), #cond, __FILE__, __LINE__);           \
  } while (0)
