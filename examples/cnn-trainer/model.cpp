// Model files: one directive or layer per line, `#` starts a comment. See docs/trainer.md.
#include "model.hpp"

#include <halox/error.hpp>
#include <halox/grid.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace trainer {
namespace {

[[noreturn]] void fail(std::string const& source, int line, std::string const& what) {
  throw halox::error(halox::errc::invalid_argument,
                     source + (line > 0 ? ":" + std::to_string(line) : "") + ": " + what);
}

// Parses "3", "3x3" or "1x3x3" into one value per spatial dimension (one value is repeated).
bool parse_dims(std::string const& v, int nd, long min, std::vector<halox::index_t>& out) {
  out.clear();
  std::stringstream ss(v);
  std::string part;
  while (std::getline(ss, part, 'x')) {
    char* end = nullptr;
    long x = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || x < min) return false;
    out.push_back(x);
  }
  if (out.size() == 1) out.assign(static_cast<std::size_t>(nd), out[0]);
  return static_cast<int>(out.size()) == nd;
}

bool parse_int(std::string const& v, long min, long& out) {
  char* end = nullptr;
  out = std::strtol(v.c_str(), &end, 10);
  return !v.empty() && *end == '\0' && out >= min;
}

// Fields each layer kind accepts (label and strategy are accepted everywhere).
std::map<std::string, std::set<std::string>> const& layer_fields() {
  static std::map<std::string, std::set<std::string>> const f{
      {"conv", {"out", "k", "stride", "pad", "dilation", "bias"}},
      {"bn", {"stats"}},
      {"relu", {}},
      {"lrn", {"size", "alpha", "beta", "k"}},
      {"maxpool", {"k", "stride", "pad", "dilation"}},
      {"avgpool", {"k", "stride", "pad"}},
      {"add", {"from"}},
      {"dropout", {"p"}},
      {"flatten", {}},
      {"fc", {"out", "bias"}}};
  return f;
}

} // namespace

std::string check_strategy(std::string const& s, int spatial_dims) {
  if (s == "sample" || s == "spatial" || s == "hybrid") return {};
  std::vector<halox::index_t> g;
  if (!parse_dims(s, spatial_dims + 2, 1, g))
    return "strategy '" + s + "' is not sample, spatial, hybrid or a grid of " +
           std::to_string(spatial_dims + 2) + " positive counts like " +
           (spatial_dims == 2 ? "2x1x2x1" : "2x1x2x1x1");
  if (g[1] != 1)
    return "strategy '" + s + "' splits the channels (" + std::to_string(g[1]) +
           " parts); the operators never split channels, write 1 for C";
  return {};
}

std::vector<int> strategy_grid(std::string const& s, int nprocs,
                               std::vector<halox::index_t> const& shape) {
  int const nd = static_cast<int>(shape.size());
  std::vector<int> dims(static_cast<std::size_t>(nd), 1);
  // Halos only on the spatial dimensions, so choose_grid weighs the exchange they cost.
  std::vector<int> halo(static_cast<std::size_t>(nd), 1);
  halo[0] = halo[1] = 0;
  if (s == "sample") {
    dims[0] = nprocs;
    return dims;
  }
  if (s == "spatial" || s == "hybrid") {
    int n = 1;
    if (s == "hybrid") // the largest divisor of nprocs not above its square root
      for (int d = 1; d * d <= nprocs; ++d)
        if (nprocs % d == 0) n = d;
    dims[0] = n;
    for (int i = 2; i < nd; ++i) dims[i] = 0;
    return halox::choose_grid(nprocs, dims, shape, halo, halo);
  }
  std::vector<halox::index_t> g;
  parse_dims(s, nd, 1, g);
  long prod = 1;
  for (int i = 0; i < nd; ++i) {
    dims[i] = static_cast<int>(g[i]);
    prod *= g[i];
  }
  HALOX_REQUIRE(prod == nprocs, halox::errc::invalid_argument,
                "strategy grid " + s + " has " + std::to_string(prod) + " processes but " +
                    std::to_string(nprocs) + " are running; run with mpiexec -n " +
                    std::to_string(prod) +
                    " or use sample, spatial or hybrid, which adapt to the process count");
  return dims;
}

model_spec parse_model(std::string const& text, std::string const& source) {
  model_spec m;
  m.source = source;
  std::istringstream in(text);
  std::string raw;
  int line = 0;
  std::string current_strategy;
  std::map<std::string, int> labels;
  while (std::getline(in, raw)) {
    ++line;
    if (auto h = raw.find('#'); h != std::string::npos) raw.erase(h);
    std::istringstream ls(raw);
    std::vector<std::string> tok;
    for (std::string t; ls >> t;) tok.push_back(t);
    if (tok.empty()) continue;
    std::string const& key = tok[0];
    if (key == "name") {
      if (tok.size() != 2) fail(source, line, "field 'name': expected one word");
      m.name = tok[1];
    } else if (key == "input") {
      if (!m.layers.empty()) fail(source, line, "field 'input' must come before the layers");
      if (tok.size() != 4 && tok.size() != 5)
        fail(source, line,
             "field 'input': expected C H W or C D H W, got " + std::to_string(tok.size() - 1) +
                 " values");
      m.input.clear();
      for (std::size_t i = 1; i < tok.size(); ++i) {
        long v = 0;
        if (!parse_int(tok[i], 1, v))
          fail(source, line, "field 'input': '" + tok[i] + "' is not a positive integer");
        m.input.push_back(v);
      }
    } else if (key == "classes") {
      long v = 0;
      if (tok.size() != 2 || !parse_int(tok[1], 2, v))
        fail(source, line, "field 'classes': expected an integer >= 2");
      m.classes = static_cast<int>(v);
    } else if (key == "dtype") {
      if (tok.size() != 2 || (tok[1] != "float32" && tok[1] != "float64"))
        fail(source, line, "field 'dtype': expected float32 or float64");
      m.dtype = tok[1];
    } else if (key == "strategy") {
      if (m.input.empty()) fail(source, line, "field 'strategy' must come after 'input'");
      if (tok.size() != 2) fail(source, line, "field 'strategy': expected one value");
      if (auto e = check_strategy(tok[1], m.spatial_dims()); !e.empty())
        fail(source, line, "field 'strategy': " + e);
      // Before the first layer it is the model's default; later it changes the strategy of
      // the layers that follow.
      if (m.layers.empty()) m.strategy = tok[1];
      current_strategy = tok[1];
    } else if (layer_fields().count(key)) {
      if (m.input.empty()) fail(source, line, "layer '" + key + "' before the 'input' line");
      int const nd = m.spatial_dims();
      layer_spec l;
      l.kind = key;
      l.line = line;
      l.strategy = current_strategy;
      auto const& allowed = layer_fields().at(key);
      for (std::size_t i = 1; i < tok.size(); ++i) {
        auto eq = tok[i].find('=');
        if (eq == std::string::npos)
          fail(source, line, "'" + tok[i] + "' is not of the form field=value");
        std::string f = tok[i].substr(0, eq), v = tok[i].substr(eq + 1);
        auto bad = [&](std::string const& want) {
          fail(source, line, "field '" + f + "' of " + key + ": '" + v + "' is not " + want);
        };
        long n = 0;
        if (f == "label") {
          if (v.empty()) bad("a name");
          if (labels.count(v))
            bad("a new label (already used on line " + std::to_string(labels[v]) + ")");
          labels[v] = line;
          l.label = v;
        } else if (f == "strategy") {
          if (auto e = check_strategy(v, nd); !e.empty())
            fail(source, line, "field 'strategy': " + e);
          l.strategy = v;
        } else if (!allowed.count(f)) {
          std::string list;
          for (auto const& a : allowed) list += " " + a;
          fail(source, line,
               "layer '" + key + "' has no field '" + f + "' (fields:" + list + " label strategy)");
        } else if (f == "out") {
          if (!parse_int(v, 1, n)) bad("a positive integer");
          l.out = static_cast<int>(n);
        } else if (key == "lrn") {
          char* end = nullptr;
          double const x = std::strtod(v.c_str(), &end);
          bool const num = !v.empty() && *end == '\0' && std::isfinite(x);
          if (f == "size") {
            if (!parse_int(v, 1, n)) bad("a positive integer (channels per window, e.g. 5)");
            l.lrn_size = static_cast<int>(n);
          } else if (f == "alpha") {
            if (!num || x < 0) bad("a number >= 0 like 1e-4");
            l.lrn_alpha = x;
          } else if (f == "beta") {
            if (!num) bad("a number like 0.75");
            l.lrn_beta = x;
          } else {
            if (!num || x <= 0) bad("a number > 0 like 2");
            l.lrn_k = x;
          }
        } else if (f == "k") {
          if (!parse_dims(v, nd, 1, l.kernel)) bad("a positive size like 3 or 3x3");
        } else if (f == "stride") {
          if (!parse_dims(v, nd, 1, l.stride)) bad("a positive step like 2 or 2x2");
        } else if (f == "pad") {
          if (!parse_dims(v, nd, 0, l.pad)) bad("a padding >= 0 like 1 or 1x1");
        } else if (f == "dilation") {
          if (!parse_dims(v, nd, 1, l.dilation)) bad("a positive dilation like 2");
        } else if (f == "bias") {
          if (v != "0" && v != "1") bad("0 or 1");
          l.bias = v == "1";
        } else if (f == "stats") {
          if (v != "global" && v != "local") bad("global or local");
          l.global_stats = v == "global";
        } else if (f == "from") {
          if (!labels.count(v)) bad("the label of an earlier layer");
          l.from = v;
        } else if (f == "p") {
          char* end = nullptr;
          l.p = std::strtod(v.c_str(), &end);
          if (v.empty() || *end != '\0' || !(l.p >= 0 && l.p < 1)) bad("a probability in [0, 1)");
        }
      }
      if ((key == "conv" || key == "fc") && l.out == 0)
        fail(source, line,
             "layer '" + key + "' needs field 'out' (output " +
                 (key == "conv" ? "channels" : "features") + ")");
      if ((key == "conv" || key == "maxpool" || key == "avgpool") && l.kernel.empty())
        fail(source, line, "layer '" + key + "' needs field 'k' (kernel size)");
      if (key == "add" && l.from.empty())
        fail(source, line, "layer 'add' needs field 'from' (label of an earlier layer)");
      m.layers.push_back(std::move(l));
    } else {
      fail(source, line,
           "unknown directive or layer '" + key +
               "' (directives: name input classes dtype strategy; layers: conv bn relu "
               "lrn maxpool avgpool add dropout flatten fc)");
    }
  }
  if (m.input.empty()) fail(source, 0, "missing 'input C H W' (or 'input C D H W') line");
  if (m.classes == 0) fail(source, 0, "missing 'classes N' line");
  if (m.layers.empty()) fail(source, 0, "no layers");
  if (m.name.empty()) m.name = source;
  bool flat = false;
  for (auto const& l : m.layers) {
    bool const spatial = l.kind == "conv" || l.kind == "bn" || l.kind == "lrn" ||
                         l.kind == "maxpool" || l.kind == "avgpool" || l.kind == "add" ||
                         l.kind == "flatten";
    if (flat && spatial)
      fail(source, l.line,
           "layer '" + l.kind +
               "' needs an N C spatial tensor but follows "
               "'flatten'; move it before the flatten layer");
    if (!flat && l.kind == "fc")
      fail(source, l.line, "layer 'fc' needs a flattened input; add a 'flatten' line before it");
    if (l.kind == "flatten") flat = true;
  }
  if (!flat)
    fail(source, 0,
         "the model never flattens; end it with 'flatten' and 'fc out=" +
             std::to_string(m.classes) + "'");
  if (m.layers.back().kind != "fc" || m.layers.back().out != m.classes)
    fail(source, m.layers.back().line,
         "the last layer must be 'fc out=" + std::to_string(m.classes) +
             "' (the class scores that softmax + cross-entropy read)");
  return m;
}

model_spec load_model_file(std::string const& path) {
  std::ifstream f(path);
  HALOX_REQUIRE(f.good(), halox::errc::invalid_argument,
                "cannot read model file '" + path +
                    "'; pass an existing file or one of the "
                    "built-in names that --list-models prints");
  // A model file is a few hundred lines; a larger file is not one (and is not read whole).
  constexpr std::streamsize limit = std::streamsize{1} << 20;
  std::string text(static_cast<std::size_t>(limit) + 1, '\0');
  f.read(text.data(), limit + 1);
  text.resize(static_cast<std::size_t>(f.gcount()));
  HALOX_REQUIRE(static_cast<std::streamsize>(text.size()) <= limit, halox::errc::invalid_argument,
                "model file '" + path +
                    "' is larger than 1 MiB, which no model file reaches; "
                    "pass a model file (docs/trainer.md, Model files)");
  return parse_model(text, path);
}

model_spec resolve_model(std::string const& name_or_file) {
  std::string const t = builtin_model_text(name_or_file);
  if (!t.empty()) {
    model_spec m = parse_model(t, "built-in model " + name_or_file);
    m.source = "built-in";
    return m;
  }
  return load_model_file(name_or_file);
}

} // namespace trainer
