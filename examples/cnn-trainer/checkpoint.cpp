#include "checkpoint.hpp"

#include <halox/checksum.hpp>
#include <halox/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <vector>

namespace trainer {
namespace {

// Format 2: a 24-byte header, then the payload.
//   magic "HXTRAIN" + '\0' | u32 version (2) | u64 payload bytes | u32 CRC-32C of the payload
// Payload: str model | u32 bytes per value | i64 step | u32 parameter count, then per parameter
//   str name | u32 rank | i64 extents[rank] | values | u8 trainable | velocity (if trainable)
// (str: u32 length + bytes; host byte order, as the values themselves.)
// Format 1 ("HXTRAIN1", then the payload, no length and no checksum) is still read.
constexpr char magic2[8] = {'H', 'X', 'T', 'R', 'A', 'I', 'N', '\0'};
constexpr char magic1[8] = {'H', 'X', 'T', 'R', 'A', 'I', 'N', '1'};
constexpr std::uint32_t format_version = 2;
constexpr std::size_t header_bytes = 8 + 4 + 8 + 4;
constexpr std::uint32_t max_rank = 8; // halox tensors have at most 8 dimensions

template <class V> void put(std::string& s, V const& v) {
  s.append(reinterpret_cast<char const*>(&v), sizeof v);
}
void put_str(std::string& s, std::string const& v) {
  put(s, static_cast<std::uint32_t>(v.size()));
  s += v;
}

// Reads the payload; every count and length is checked against the bytes that remain before
// anything is allocated or copied.
struct reader {
  std::string_view s;
  std::size_t pos = 0;
  std::string const& path;

  [[noreturn]] void bad(std::string const& what) const {
    throw halox::error(halox::errc::invalid_argument, "checkpoint " + path +
                                                          " is damaged: " + what + " (at byte " +
                                                          std::to_string(pos) + "); " + fix());
  }
  std::string fix() const { return checkpoint_fix(path); }
  std::size_t left() const { return s.size() - pos; }
  template <class V> V get(char const* what) {
    if (left() < sizeof(V)) bad(std::string("it ends inside ") + what);
    V v;
    std::memcpy(&v, s.data() + pos, sizeof v);
    pos += sizeof v;
    return v;
  }
  std::string str(char const* what) {
    auto const n = get<std::uint32_t>(what);
    if (n > left())
      bad(std::string(what) + " claims " + std::to_string(n) + " bytes but " +
          std::to_string(left()) + " remain");
    std::string v(s.substr(pos, n));
    pos += n;
    return v;
  }
  std::string_view bytes(std::size_t n, char const* what) {
    if (n > left())
      bad(std::string(what) + " needs " + std::to_string(n) + " bytes but " +
          std::to_string(left()) + " remain");
    auto v = s.substr(pos, n);
    pos += n;
    return v;
  }
};

// Rank 0's error message (empty: success), made every rank's.
void agree(std::string msg, MPI_Comm comm) {
  int len = static_cast<int>(msg.size());
  MPI_Bcast(&len, 1, MPI_INT, 0, comm);
  msg.resize(static_cast<std::size_t>(len));
  MPI_Bcast(msg.data(), len, MPI_CHAR, 0, comm);
  if (len) throw halox::error(halox::errc::invalid_argument, msg);
}

bool exists(std::string const& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Writes `data` to `path` and flushes it to the disk; an empty string on success.
std::string write_synced(std::string const& path, std::string const& data) {
  int const fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return std::string("cannot create it: ") + std::strerror(errno);
  std::size_t done = 0;
  std::string err;
  while (done < data.size() && err.empty()) {
    ssize_t const n = ::write(fd, data.data() + done, data.size() - done);
    if (n > 0)
      done += static_cast<std::size_t>(n);
    else if (n < 0 && errno != EINTR)
      err = std::string("cannot write it: ") + std::strerror(errno);
  }
  if (err.empty() && ::fsync(fd) != 0)
    err = std::string("cannot flush it: ") + std::strerror(errno);
  if (::close(fd) != 0 && err.empty())
    err = std::string("cannot close it: ") + std::strerror(errno);
  return err;
}

// Flushes the directory holding `path`, so that a rename in it survives a crash.
void sync_folder(std::string const& path) {
  auto const slash = path.rfind('/');
  std::string const dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  int const fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

template <class T>
train_position parse_payload(reader& r, std::string const& model, param_store<T>& ps) {
  std::string const& path = r.path;
  std::string const m = r.str("the model name");
  HALOX_REQUIRE(m == model, halox::errc::invalid_argument,
                "checkpoint " + path + " is of model '" + m + "', not '" + model +
                    "'; pass --model " + m + " (any strategy variant of it)");
  auto const bytes = r.get<std::uint32_t>("the value size");
  if (bytes != 4 && bytes != 8) r.bad("its value size is " + std::to_string(bytes) + " bytes");
  HALOX_REQUIRE(bytes == sizeof(T), halox::errc::invalid_argument,
                "checkpoint " + path + " holds " + (bytes == 4 ? "float32" : "float64") +
                    " values; pass --dtype " + (bytes == 4 ? "float32" : "float64"));
  train_position pos;
  auto const step = r.get<std::int64_t>("the step");
  if (step < 0) r.bad("its step is " + std::to_string(step));
  pos.step = static_cast<long>(step);
  auto const count = r.get<std::uint32_t>("the parameter count");
  HALOX_REQUIRE(count == ps.params.size(), halox::errc::invalid_argument,
                "checkpoint " + path + " has " + std::to_string(count) + " parameters, the model " +
                    std::to_string(ps.params.size()) +
                    " (the model file changed since the checkpoint was written)");
  // First every parameter is found and checked; only then are values copied, so that a
  // damaged file leaves the model as it was.
  struct found {
    std::string_view value, velocity;
  };
  std::vector<found> at;
  at.reserve(ps.params.size());
  for (auto const& p : ps.params) {
    std::string const name = r.str("a parameter name");
    auto const nd = r.get<std::uint32_t>("a parameter rank");
    if (nd > max_rank)
      r.bad("parameter '" + name + "' has " + std::to_string(nd) + " dimensions (at most " +
            std::to_string(max_rank) + ")");
    std::vector<halox::index_t> shape(nd);
    for (auto& e : shape) e = r.get<std::int64_t>("a parameter extent");
    HALOX_REQUIRE(name == p.name && shape == p.shape, halox::errc::invalid_argument,
                  "checkpoint " + path + ": parameter '" + name + "' does not match the model's '" +
                      p.name + "' (the model file changed since the checkpoint was written)");
    found f;
    f.value = r.bytes(p.value.size() * sizeof(T), "a parameter's values");
    auto const trainable = r.get<std::uint8_t>("a trainable flag");
    if (trainable > 1)
      r.bad("parameter '" + name + "' has trainable flag " + std::to_string(trainable));
    HALOX_REQUIRE((trainable != 0) == p.trainable, halox::errc::invalid_argument,
                  "checkpoint " + path + ": parameter '" + name + "' is " +
                      (trainable ? "trainable there but not in the model"
                                 : "not trainable there but is in the model") +
                      " (the model file changed since the checkpoint was written)");
    if (trainable) f.velocity = r.bytes(p.velocity.size() * sizeof(T), "a momentum buffer");
    at.push_back(f);
  }
  if (r.left() != 0) r.bad(std::to_string(r.left()) + " bytes follow the last parameter");
  for (std::size_t i = 0; i < at.size(); ++i) {
    auto& p = ps.params[i];
    std::memcpy(p.value.data(), at[i].value.data(), at[i].value.size());
    if (!at[i].velocity.empty())
      std::memcpy(p.velocity.data(), at[i].velocity.data(), at[i].velocity.size());
  }
  return pos;
}

} // namespace

std::string checkpoint_fix(std::string const& path) {
  if (exists(path + ".prev"))
    return "resume from " + path + ".prev, the checkpoint written before it";
  return "no earlier checkpoint (" + path + ".prev) exists: start again without --resume";
}

template <class T> std::string checkpoint_bytes(std::string const& model, param_store<T> const& ps,
                                                train_position const& pos) {
  std::string payload;
  put_str(payload, model);
  put(payload, static_cast<std::uint32_t>(sizeof(T)));
  put(payload, static_cast<std::int64_t>(pos.step));
  put(payload, static_cast<std::uint32_t>(ps.params.size()));
  for (auto const& p : ps.params) {
    put_str(payload, p.name);
    put(payload, static_cast<std::uint32_t>(p.shape.size()));
    for (auto e : p.shape) put(payload, static_cast<std::int64_t>(e));
    payload.append(reinterpret_cast<char const*>(p.value.data()), p.value.size() * sizeof(T));
    put(payload, static_cast<std::uint8_t>(p.trainable));
    if (p.trainable)
      payload.append(reinterpret_cast<char const*>(p.velocity.data()),
                     p.velocity.size() * sizeof(T));
  }
  std::string s(magic2, sizeof magic2);
  put(s, format_version);
  put(s, static_cast<std::uint64_t>(payload.size()));
  put(s, halox::crc32c(payload.data(), payload.size()));
  return s + payload;
}

template <class T> train_position parse_checkpoint(std::string_view data, std::string const& path,
                                                   std::string const& model, param_store<T>& ps) {
  HALOX_REQUIRE(data.size() >= 8 && (std::memcmp(data.data(), magic2, 8) == 0 ||
                                     std::memcmp(data.data(), magic1, 8) == 0),
                halox::errc::invalid_argument,
                path + " is not a halox-train checkpoint; pass a file written by --checkpoint");
  if (std::memcmp(data.data(), magic1, 8) == 0) {
    reader r{data.substr(8), 0, path};
    return parse_payload(r, model, ps);
  }
  reader h{data, 8, path};
  auto const version = h.get<std::uint32_t>("the header");
  HALOX_REQUIRE(version == format_version, halox::errc::invalid_argument,
                "checkpoint " + path + " has format version " + std::to_string(version) +
                    "; this halox-train reads versions 1 and 2: resume with the halox-train that "
                    "wrote it");
  auto const length = h.get<std::uint64_t>("the header");
  auto const crc = h.get<std::uint32_t>("the header");
  std::size_t const have = data.size() - header_bytes;
  if (length != have)
    h.bad(length > have ? "it is truncated: " + std::to_string(have) + " of " +
                              std::to_string(length) + " payload bytes are there"
                        : std::to_string(have - length) + " bytes follow its payload");
  std::string_view const payload = data.substr(header_bytes);
  if (halox::crc32c(payload.data(), payload.size()) != crc)
    h.bad("its checksum does not match its contents (a write that did not finish, or a disk or "
          "copy error)");
  reader r{payload, 0, path};
  return parse_payload(r, model, ps);
}

template <class T> void save_checkpoint(std::string const& path, std::string const& model,
                                        param_store<T> const& ps, train_position const& pos,
                                        MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string err;
  if (rank == 0) {
    std::string const tmp = path + ".tmp", prev = path + ".prev";
    err = write_synced(tmp, checkpoint_bytes(model, ps, pos));
    // The previous checkpoint stays as path.prev: a hard link, so that `path` itself always
    // names a complete checkpoint, the old one until the rename below replaces it at once.
    if (err.empty() && exists(path)) {
      (void)::unlink(prev.c_str());
      if (::link(path.c_str(), prev.c_str()) != 0 && std::rename(path.c_str(), prev.c_str()) != 0)
        err = std::string("cannot keep the previous one as ") + prev + ": " + std::strerror(errno);
    }
    if (err.empty() && std::rename(tmp.c_str(), path.c_str()) != 0)
      err = std::string("cannot rename ") + tmp + " to it: " + std::strerror(errno);
    if (err.empty())
      sync_folder(path);
    else
      err = "cannot write checkpoint " + path + " (" + err +
            "); check that its folder exists, is writable and has room";
  }
  agree(err, comm);
}

template <class T> train_position load_checkpoint(std::string const& path, std::string const& model,
                                                  param_store<T>& ps, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string data, err;
  if (rank == 0) {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    std::streamoff const size = f ? static_cast<std::streamoff>(f.tellg()) : -1;
    if (size >= 0) {
      // Read once, straight into the buffer that is broadcast and parsed.
      data.resize(static_cast<std::size_t>(size));
      f.seekg(0);
      f.read(data.data(), size);
    }
    if (size < 0 || !f) {
      err = "cannot read checkpoint " + path + "; pass a file written by --checkpoint";
      if (exists(path + ".prev")) err += ", or " + path + ".prev (the one written before it)";
    }
  }
  agree(err, comm);
  long long n = static_cast<long long>(data.size());
  MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, comm);
  data.resize(static_cast<std::size_t>(n));
  // In pieces: one call's count is an int.
  for (long long off = 0; off < n; off += INT_MAX / 2) {
    int const len = static_cast<int>(std::min<long long>(INT_MAX / 2, n - off));
    MPI_Bcast(data.data() + off, len, MPI_CHAR, 0, comm);
  }
  // Every rank checks the same bytes, so every rank reaches the same verdict.
  return parse_checkpoint(std::string_view(data), path, model, ps);
}

#define HALOX_TRAINER_CKPT(T)                                                                      \
  template std::string checkpoint_bytes(std::string const&, param_store<T> const&,                 \
                                        train_position const&);                                    \
  template train_position parse_checkpoint(std::string_view, std::string const&,                   \
                                           std::string const&, param_store<T>&);                   \
  template void save_checkpoint(std::string const&, std::string const&, param_store<T> const&,     \
                                train_position const&, MPI_Comm);                                  \
  template train_position load_checkpoint(std::string const&, std::string const&, param_store<T>&, \
                                          MPI_Comm);
HALOX_TRAINER_CKPT(float)
HALOX_TRAINER_CKPT(double)
#undef HALOX_TRAINER_CKPT

} // namespace trainer
