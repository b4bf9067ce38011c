// halox-ops-ref: runs one reference operator, forward and every backward, on inputs given as
// files, so that an independent implementation (tests/ops/compare_torch.py, PyTorch) can check
// the results.
//
// Usage: halox-ops-ref DIR
//
// DIR/request.txt holds one `key value...` line per setting ('#' starts a comment):
//   op        conv | pool | bn | relu | lrn
//   dtype     float64 | float32   (the precision halox computes in)
//   x_shape   N C spatial...
//   conv:     w_shape Cout Cin k...; bias 0|1; stride, pad_lo, pad_hi, dilation (per dim)
//   pool:     kind max|avg; kernel, stride, pad_lo, pad_hi, dilation (per dim);
//             count_include_pad 0|1
//   bn:       training 0|1; eps E; momentum M
//   lrn:      size S; alpha A; beta B; k K
// Arrays are raw little-endian float64 files in DIR, row-major:
//   inputs   x.bin, dy.bin (the gradient of the forward output); conv: w.bin, b.bin (if bias);
//            bn: gamma.bin, beta.bin, running_mean.bin, running_var.bin
//   outputs  y.bin, dx.bin; conv: dw.bin, db.bin (if bias);
//            bn: dgamma.bin, dbeta.bin, running_mean_out.bin, running_var_out.bin
// float32 requests round the inputs to float and widen the results back to float64.
// Exit status: 0 done; 1 bad request or file; 2 halox rejected the request (message printed).

#include <halox/error.hpp>
#include <halox/ops/ops.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using halox::index_t;
namespace ops = halox::ops;

struct request {
  std::string dir;
  std::map<std::string, std::vector<std::string>> kv;

  bool has(std::string const& k) const { return kv.count(k) != 0; }
  std::vector<std::string> const& raw(std::string const& k) const {
    auto it = kv.find(k);
    if (it == kv.end()) throw std::runtime_error("request.txt has no '" + k + "' line");
    return it->second;
  }
  std::string str(std::string const& k) const { return raw(k).at(0); }
  std::vector<index_t> ints(std::string const& k) const {
    std::vector<index_t> v;
    if (!has(k)) return v; // empty: the operator's default
    for (auto const& s : raw(k)) v.push_back(std::stoll(s));
    return v;
  }
  double num(std::string const& k, double def) const { return has(k) ? std::stod(str(k)) : def; }
  bool flag(std::string const& k, bool def) const { return has(k) ? str(k) != "0" : def; }
};

request read_request(std::string const& dir) {
  std::ifstream in(dir + "/request.txt");
  if (!in) throw std::runtime_error("cannot open " + dir + "/request.txt");
  request r;
  r.dir = dir;
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream ls(line);
    std::string key, v;
    if (!(ls >> key)) continue;
    auto& vals = r.kv[key];
    while (ls >> v) vals.push_back(v);
  }
  return r;
}

bool little_endian() {
  std::uint16_t one = 1;
  unsigned char b;
  std::memcpy(&b, &one, 1);
  return b == 1;
}

template <class T>
std::vector<T> read_array(request const& r, std::string const& name, index_t count) {
  std::string path = r.dir + "/" + name;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("cannot open " + path);
  auto bytes = static_cast<index_t>(in.tellg());
  if (bytes != count * 8)
    throw std::runtime_error(path + " holds " + std::to_string(bytes) + " bytes; expected " +
                             std::to_string(count) + " float64 values");
  in.seekg(0);
  std::vector<double> d(static_cast<std::size_t>(count));
  in.read(reinterpret_cast<char*>(d.data()), static_cast<std::streamsize>(bytes));
  return std::vector<T>(d.begin(), d.end());
}

template <class T>
void write_array(request const& r, std::string const& name, std::vector<T> const& v) {
  std::vector<double> d(v.begin(), v.end());
  std::string path = r.dir + "/" + name;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<char const*>(d.data()), static_cast<std::streamsize>(d.size() * 8));
  if (!out) throw std::runtime_error("cannot write " + path);
}

template <class T> std::vector<T> zeros(std::vector<index_t> const& shape) {
  return std::vector<T>(static_cast<std::size_t>(ops::element_count(shape)));
}

template <class T> void run_conv(request const& r) {
  auto xs = r.ints("x_shape"), ws = r.ints("w_shape");
  bool const bias = r.flag("bias", false);
  ops::conv_params p{r.ints("stride"), r.ints("pad_lo"), r.ints("pad_hi"), r.ints("dilation")};
  auto ys = ops::conv_output_shape(xs, ws, p);
  auto x = read_array<T>(r, "x.bin", ops::element_count(xs));
  auto w = read_array<T>(r, "w.bin", ops::element_count(ws));
  auto b = bias ? read_array<T>(r, "b.bin", ws[0]) : std::vector<T>{};
  auto dy = read_array<T>(r, "dy.bin", ops::element_count(ys));
  auto y = zeros<T>(ys), dx = zeros<T>(xs), dw = zeros<T>(ws);
  std::vector<T> db(b.size());
  ops::conv_forward<T>({x.data(), xs}, {w.data(), ws}, bias ? b.data() : nullptr, {y.data(), ys},
                       p);
  ops::conv_backward_data<T>({dy.data(), ys}, {w.data(), ws}, {dx.data(), xs}, p);
  ops::conv_backward_weights<T>({x.data(), xs}, {dy.data(), ys}, {dw.data(), ws}, p);
  if (bias) ops::conv_backward_bias<T>({dy.data(), ys}, db.data());
  write_array(r, "y.bin", y);
  write_array(r, "dx.bin", dx);
  write_array(r, "dw.bin", dw);
  if (bias) write_array(r, "db.bin", db);
}

template <class T> void run_pool(request const& r) {
  auto xs = r.ints("x_shape");
  ops::pool_params p;
  std::string kind = r.str("kind");
  if (kind != "max" && kind != "avg")
    throw std::runtime_error("kind must be max or avg, not " + kind);
  p.kind = kind == "max" ? ops::pool_kind::max : ops::pool_kind::average;
  p.kernel = r.ints("kernel");
  p.stride = r.ints("stride");
  p.pad_lo = r.ints("pad_lo");
  p.pad_hi = r.ints("pad_hi");
  p.dilation = r.ints("dilation");
  p.count_include_pad = r.flag("count_include_pad", true);
  auto ys = ops::pool_output_shape(xs, p);
  auto x = read_array<T>(r, "x.bin", ops::element_count(xs));
  auto dy = read_array<T>(r, "dy.bin", ops::element_count(ys));
  auto y = zeros<T>(ys), dx = zeros<T>(xs);
  ops::pool_forward<T>({x.data(), xs}, {y.data(), ys}, p);
  ops::pool_backward<T>({x.data(), xs}, {dy.data(), ys}, {dx.data(), xs}, p);
  write_array(r, "y.bin", y);
  write_array(r, "dx.bin", dx);
}

template <class T> void run_bn(request const& r) {
  auto xs = r.ints("x_shape");
  index_t const c = xs.at(1);
  ops::bn_params p;
  p.training = r.flag("training", true);
  p.eps = r.num("eps", p.eps);
  p.momentum = r.num("momentum", p.momentum);
  auto x = read_array<T>(r, "x.bin", ops::element_count(xs));
  auto dy = read_array<T>(r, "dy.bin", ops::element_count(xs));
  auto gamma = read_array<T>(r, "gamma.bin", c), beta = read_array<T>(r, "beta.bin", c);
  auto rm = read_array<T>(r, "running_mean.bin", c), rv = read_array<T>(r, "running_var.bin", c);
  auto y = zeros<T>(xs), dx = zeros<T>(xs);
  std::vector<T> dgamma(static_cast<std::size_t>(c)), dbeta(static_cast<std::size_t>(c));
  auto m = ops::batch_norm_forward<T>({x.data(), xs}, gamma.data(), beta.data(), rm.data(),
                                      rv.data(), {y.data(), xs}, p);
  ops::batch_norm_backward<T>({x.data(), xs}, {dy.data(), xs}, m, gamma.data(), {dx.data(), xs},
                              dgamma.data(), dbeta.data(), p);
  write_array(r, "y.bin", y);
  write_array(r, "dx.bin", dx);
  write_array(r, "dgamma.bin", dgamma);
  write_array(r, "dbeta.bin", dbeta);
  write_array(r, "running_mean_out.bin", rm);
  write_array(r, "running_var_out.bin", rv);
}

template <class T> void run_relu(request const& r) {
  auto xs = r.ints("x_shape");
  auto x = read_array<T>(r, "x.bin", ops::element_count(xs));
  auto dy = read_array<T>(r, "dy.bin", ops::element_count(xs));
  auto y = zeros<T>(xs), dx = zeros<T>(xs);
  ops::relu_forward<T>({x.data(), xs}, {y.data(), xs});
  ops::relu_backward<T>({x.data(), xs}, {dy.data(), xs}, {dx.data(), xs});
  write_array(r, "y.bin", y);
  write_array(r, "dx.bin", dx);
}

template <class T> void run_lrn(request const& r) {
  auto xs = r.ints("x_shape");
  ops::lrn_params p;
  p.size = static_cast<int>(r.num("size", p.size));
  p.alpha = r.num("alpha", p.alpha);
  p.beta = r.num("beta", p.beta);
  p.k = r.num("k", p.k);
  auto x = read_array<T>(r, "x.bin", ops::element_count(xs));
  auto dy = read_array<T>(r, "dy.bin", ops::element_count(xs));
  auto y = zeros<T>(xs), dx = zeros<T>(xs);
  ops::lrn_forward<T>({x.data(), xs}, {y.data(), xs}, p);
  ops::lrn_backward<T>({x.data(), xs}, {dy.data(), xs}, {dx.data(), xs}, p);
  write_array(r, "y.bin", y);
  write_array(r, "dx.bin", dx);
}

template <class T> void run(request const& r) {
  std::string op = r.str("op");
  if (op == "conv")
    run_conv<T>(r);
  else if (op == "pool")
    run_pool<T>(r);
  else if (op == "bn")
    run_bn<T>(r);
  else if (op == "relu")
    run_relu<T>(r);
  else if (op == "lrn")
    run_lrn<T>(r);
  else
    throw std::runtime_error("unknown op '" + op + "'; expected conv, pool, bn, relu or lrn");
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: halox-ops-ref DIR (see the comment at the top of halox_ops_ref.cpp)\n";
    return 1;
  }
  try {
    if (!little_endian()) throw std::runtime_error("this tool reads little-endian files only");
    request r = read_request(argv[1]);
    std::string dtype = r.has("dtype") ? r.str("dtype") : "float64";
    if (dtype == "float64")
      run<double>(r);
    else if (dtype == "float32")
      run<float>(r);
    else
      throw std::runtime_error("dtype must be float64 or float32, not " + dtype);
  } catch (halox::error const& e) {
    std::cerr << "halox-ops-ref: " << e.what() << "\n";
    return 2;
  } catch (std::exception const& e) {
    std::cerr << "halox-ops-ref: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
