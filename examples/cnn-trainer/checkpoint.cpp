#include "checkpoint.hpp"

#include <halox/error.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace trainer {
namespace {

char const magic[8] = {'H', 'X', 'T', 'R', 'A', 'I', 'N', '1'};

template <class V> void put(std::string& s, V const& v) {
  s.append(reinterpret_cast<char const*>(&v), sizeof v);
}
void put_str(std::string& s, std::string const& v) {
  put(s, static_cast<std::uint32_t>(v.size()));
  s += v;
}

struct reader {
  std::string const& s;
  std::size_t pos = 0;
  std::string const& path;
  template <class V> V get() {
    HALOX_REQUIRE(pos + sizeof(V) <= s.size(), halox::errc::invalid_argument,
                  "checkpoint " + path + " is truncated");
    V v;
    std::memcpy(&v, s.data() + pos, sizeof v);
    pos += sizeof v;
    return v;
  }
  std::string str() {
    auto const n = get<std::uint32_t>();
    HALOX_REQUIRE(pos + n <= s.size(), halox::errc::invalid_argument,
                  "checkpoint " + path + " is truncated");
    std::string v = s.substr(pos, n);
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

} // namespace

template <class T> void save_checkpoint(std::string const& path, std::string const& model,
                                        param_store<T> const& ps, train_position const& pos,
                                        MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string err;
  if (rank == 0) {
    std::string s(magic, sizeof magic);
    put_str(s, model);
    put(s, static_cast<std::uint32_t>(sizeof(T)));
    put(s, static_cast<std::int64_t>(pos.step));
    put(s, static_cast<std::uint32_t>(ps.params.size()));
    for (auto const& p : ps.params) {
      put_str(s, p.name);
      put(s, static_cast<std::uint32_t>(p.shape.size()));
      for (auto e : p.shape) put(s, static_cast<std::int64_t>(e));
      s.append(reinterpret_cast<char const*>(p.value.data()), p.value.size() * sizeof(T));
      put(s, static_cast<std::uint8_t>(p.trainable));
      if (p.trainable)
        s.append(reinterpret_cast<char const*>(p.velocity.data()), p.velocity.size() * sizeof(T));
    }
    std::string const tmp = path + ".tmp";
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(s.data(), static_cast<std::streamsize>(s.size()));
    f.close();
    if (!f || std::rename(tmp.c_str(), path.c_str()) != 0)
      err = "cannot write checkpoint " + path + "; check that its folder exists and is writable";
  }
  agree(err, comm);
}

template <class T> train_position load_checkpoint(std::string const& path, std::string const& model,
                                                  param_store<T>& ps, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string data, err;
  if (rank == 0) {
    std::ifstream f(path, std::ios::binary);
    if (!f) err = "cannot read checkpoint " + path + "; pass a file written by --checkpoint";
    std::stringstream ss;
    ss << f.rdbuf();
    data = ss.str();
  }
  agree(err, comm);
  long n = static_cast<long>(data.size());
  MPI_Bcast(&n, 1, MPI_LONG, 0, comm);
  data.resize(static_cast<std::size_t>(n));
  MPI_Bcast(data.data(), static_cast<int>(n), MPI_CHAR, 0, comm);
  // Every rank parses the same bytes, so every rank reaches the same verdict.
  reader r{data, 0, path};
  HALOX_REQUIRE(data.size() >= sizeof magic && std::memcmp(data.data(), magic, sizeof magic) == 0,
                halox::errc::invalid_argument, path + " is not a halox-train checkpoint");
  r.pos = sizeof magic;
  std::string const m = r.str();
  HALOX_REQUIRE(m == model, halox::errc::invalid_argument,
                "checkpoint " + path + " is of model '" + m + "', not '" + model +
                    "'; pass --model " + m + " (any strategy variant of it)");
  auto const bytes = r.get<std::uint32_t>();
  HALOX_REQUIRE(bytes == sizeof(T), halox::errc::invalid_argument,
                "checkpoint " + path + " holds " + (bytes == 4 ? "float32" : "float64") +
                    " values; pass --dtype " + (bytes == 4 ? "float32" : "float64"));
  train_position pos;
  pos.step = static_cast<long>(r.get<std::int64_t>());
  auto const count = r.get<std::uint32_t>();
  HALOX_REQUIRE(count == ps.params.size(), halox::errc::invalid_argument,
                "checkpoint " + path + " has " + std::to_string(count) + " parameters, the model " +
                    std::to_string(ps.params.size()));
  for (auto& p : ps.params) {
    std::string const name = r.str();
    auto const nd = r.get<std::uint32_t>();
    std::vector<halox::index_t> shape(nd);
    for (auto& e : shape) e = r.get<std::int64_t>();
    HALOX_REQUIRE(name == p.name && shape == p.shape, halox::errc::invalid_argument,
                  "checkpoint " + path + ": parameter '" + name + "' does not match the model's '" +
                      p.name + "' (the model file changed since the checkpoint was written)");
    for (auto& v : p.value) v = r.get<T>();
    bool const trainable = r.get<std::uint8_t>() != 0;
    if (trainable)
      for (auto& v : p.velocity) v = r.get<T>();
  }
  return pos;
}

template void save_checkpoint(std::string const&, std::string const&, param_store<float> const&,
                              train_position const&, MPI_Comm);
template void save_checkpoint(std::string const&, std::string const&, param_store<double> const&,
                              train_position const&, MPI_Comm);
template train_position load_checkpoint(std::string const&, std::string const&, param_store<float>&,
                                        MPI_Comm);
template train_position load_checkpoint(std::string const&, std::string const&,
                                        param_store<double>&, MPI_Comm);

} // namespace trainer
