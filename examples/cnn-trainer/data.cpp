#include "data.hpp"

#include "tensor_util.hpp"

#include <halox/error.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <unordered_map>

namespace trainer {
using halox::index_t;

void dataset::limit(split s, index_t n) {
  index_t& have = s == split::train ? train_ : test_;
  HALOX_REQUIRE(n >= 1 && n <= have, halox::errc::invalid_argument,
                "the " + std::string(s == split::train ? "training" : "test") + " split has " +
                    std::to_string(have) + " samples; ask for 1 to " + std::to_string(have) +
                    " (got " + std::to_string(n) + ")");
  have = n;
}

namespace {

// Class-dependent shapes at a random position and scale, plus noise. Every value is a pure
// function of (split, id, position), so a rank computes only the cells it owns.
class synthetic final : public dataset {
public:
  synthetic(std::vector<index_t> shape, int classes, index_t train, index_t test, bool three_d)
      : three_d_(three_d) {
    shape_ = std::move(shape);
    classes_ = classes;
    train_ = train;
    test_ = test;
  }
  // Generating a sample costs far more than copying it, and every epoch reads the same samples
  // over the same box (the rank's part of the first layer's input), so each generated box is
  // kept, up to a budget of memory per rank.
  void read(split s, index_t id, halox::box const& b, float* out) override {
    std::size_t const n = static_cast<std::size_t>(b.volume());
    if (!(b == box_)) {
      cache_.clear();
      cached_ = 0;
      box_ = b;
    }
    auto const key = static_cast<std::uint64_t>(id) * 2 + (s == split::train ? 0 : 1);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      std::memcpy(out, it->second.data(), n * sizeof(float));
      return;
    }
    generate(s, id, b, out);
    if ((cached_ + n) * sizeof(float) <= cache_budget) {
      cache_.emplace(key, std::vector<float>(out, out + n));
      cached_ += n;
    }
  }
  void generate(split s, index_t id, halox::box const& b, float* out) {
    std::uint64_t const key =
        mix(0x5eed, s == split::train ? 1 : 2, static_cast<std::uint64_t>(id));
    int const k = label(s, id);
    int const nd = static_cast<int>(shape_.size()) - 1;
    // Position and scale of the shape, in [-1, 1] coordinates.
    double const cx = 0.4 * uniform01(mix(key, 1)) - 0.2, cy = 0.4 * uniform01(mix(key, 2)) - 0.2,
                 cz = 0.4 * uniform01(mix(key, 3)) - 0.2;
    double const sc = 0.8 + 0.4 * uniform01(mix(key, 4));
    std::vector<index_t> i(static_cast<std::size_t>(nd + 1));
    for (int d = 0; d <= nd; ++d) i[d] = b.lo[d];
    std::size_t o = 0;
    if (b.volume() == 0) return;
    for (;;) {
      auto coord = [&](int d, double c) {
        return ((static_cast<double>(i[d]) + 0.5) / static_cast<double>(shape_[d]) * 2 - 1 - c) /
               sc;
      };
      double const u = coord(nd, cx), v = coord(nd - 1, cy), w = nd == 3 ? coord(1, cz) : 0;
      double const on = three_d_ ? shape3(k, u, v, w) : shape2(k, u, v);
      std::uint64_t const h =
          mix(key, 9,
              static_cast<std::uint64_t>(((i[0] * 131 + i[1]) * 131 + i[2]) * 131 +
                                         (nd == 3 ? i[3] : 0)));
      double const noise = uniform01(h) + uniform01(mix(h, 1)) - 1; // triangular in (-1, 1)
      out[o++] =
          static_cast<float>(on * (1 + 0.25 * static_cast<double>(i[0])) - 0.3 + 0.45 * noise);
      int d = nd;
      for (; d >= 0; --d) {
        if (++i[d] < b.hi[d]) break;
        i[d] = b.lo[d];
      }
      if (d < 0) return;
    }
  }
  int label(split s, index_t id) override {
    return static_cast<int>(
        mix(0x1abe1, s == split::train ? 1 : 2, static_cast<std::uint64_t>(id)) %
        static_cast<std::uint64_t>(classes_));
  }
  std::string describe() const override {
    return std::string(three_d_ ? "synthetic3d" : "synthetic") + ": " + std::to_string(classes_) +
           " classes of shapes with noise, " + std::to_string(train_) + " training and " +
           std::to_string(test_) + " test samples";
  }

private:
  static constexpr std::size_t cache_budget = std::size_t(256) << 20; // bytes per rank
  static double shape2(int k, double u, double v) {
    double const r = std::sqrt(u * u + v * v);
    switch (k) {
    case 0: return std::abs(v) < 0.18;                                        // horizontal bar
    case 1: return std::abs(u) < 0.18;                                        // vertical bar
    case 2: return std::abs(u - v) < 0.25;                                    // diagonal
    case 3: return std::abs(u + v) < 0.25;                                    // anti-diagonal
    case 4: return std::abs(r - 0.6) < 0.15;                                  // ring
    case 5: return r < 0.45;                                                  // disc
    case 6: return std::abs(u) < 0.12 || std::abs(v) < 0.12;                  // cross
    case 7: return std::abs(std::max(std::abs(u), std::abs(v)) - 0.55) < 0.1; // square outline
    case 8: return std::sin(5 * u) * std::sin(5 * v) > 0;                     // checkerboard
    default: return std::abs(u) + std::abs(v) < 0.4 || r > 0.95;              // diamond + corners
    }
  }
  static double shape3(int k, double u, double v, double w) {
    double const r = std::sqrt(u * u + v * v + w * w);
    switch (k % 8) {
    case 0: return std::abs(v) < 0.2 && std::abs(w) < 0.2;            // rod along x
    case 1: return std::abs(u) < 0.2 && std::abs(w) < 0.2;            // rod along y
    case 2: return std::abs(u) < 0.2 && std::abs(v) < 0.2;            // rod along z
    case 3: return std::abs(r - 0.65) < 0.15;                         // sphere shell
    case 4: return r < 0.5;                                           // ball
    case 5: return std::abs(w) < 0.15;                                // plane
    case 6: return std::abs(u) < 0.15;                                // other plane
    default: return std::abs(u - v) < 0.25 && std::abs(v - w) < 0.25; // space diagonal
    }
  }
  bool three_d_;
  halox::box box_;                                              // the box the cache holds
  std::unordered_map<std::uint64_t, std::vector<float>> cache_; // (id, split) -> values in box_
  std::size_t cached_ = 0;                                      // floats held
};

std::uint32_t be32(unsigned char const* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) |
         p[3];
}

// A read-only memory map of a whole file, unmapped on destruction. Pages are read from the file
// on first touch, so a rank that reads only its part of each sample reads only those pages.
class mapped_file {
public:
  explicit mapped_file(std::string const& path) {
    int const fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    HALOX_REQUIRE(fd >= 0, halox::errc::invalid_argument,
                  "cannot open " + path + ": " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) == 0) size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p != MAP_FAILED) data_ = static_cast<unsigned char const*>(p);
    }
    int const err = errno;
    ::close(fd);
    HALOX_REQUIRE(size_ == 0 || data_ != nullptr, halox::errc::invalid_argument,
                  "cannot map " + path + ": " + std::strerror(err));
  }
  ~mapped_file() {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
  }
  mapped_file(mapped_file const&) = delete;
  mapped_file& operator=(mapped_file const&) = delete;
  [[nodiscard]] unsigned char const* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

private:
  unsigned char const* data_ = nullptr;
  std::size_t size_ = 0;
};

// Byte images in files: MNIST's idx pairs or CIFAR-10's records (label byte + CHW bytes). Each
// file is mapped once; a sample's rows are converted with a 256-entry table of normalised
// values, so a batch costs one table look-up per owned pixel and no system call.
class byte_images final : public dataset {
public:
  struct part {
    std::string images, labels; // files (labels empty: the label byte precedes each record)
    index_t first = 0;          // byte offset of sample 0's pixels (after the label byte)
    index_t stride = 0;         // bytes from one sample to the next
    index_t label_first = 0;    // byte offset of sample 0's label
    index_t label_stride = 1;
    index_t count = 0;
  };
  byte_images(std::string name, std::vector<index_t> shape, int classes, double mean, double std,
              std::vector<part> train, std::vector<part> test)
      : name_(std::move(name)), parts_{std::move(train), std::move(test)} {
    shape_ = std::move(shape);
    classes_ = classes;
    for (auto const& p : parts_[0]) train_ += p.count;
    for (auto const& p : parts_[1]) test_ += p.count;
    for (int v = 0; v < 256; ++v) table_[v] = static_cast<float>((v / 255.0 - mean) / std);
  }
  void read(split s, index_t id, halox::box const& b, float* out) override {
    auto [p, local] = find(s, id);
    mapped_file const& f = map(p->images);
    index_t const H = shape_[1], W = shape_[2], w = b.extent(2);
    index_t const sample = p->first + local * p->stride;
    HALOX_REQUIRE(
        sample + shape_[0] * H * W <= static_cast<index_t>(f.size()), halox::errc::invalid_argument,
        "cannot read sample " + std::to_string(id) + " from " + p->images + " (file truncated?)");
    float* o = out;
    for (index_t c = b.lo[0]; c < b.hi[0]; ++c)
      for (index_t h = b.lo[1]; h < b.hi[1]; ++h, o += w) {
        unsigned char const* row = f.data() + sample + (c * H + h) * W + b.lo[2];
        for (index_t x = 0; x < w; ++x) o[x] = table_[row[x]];
      }
  }
  int label(split s, index_t id) override {
    auto [p, local] = find(s, id);
    mapped_file const& f = map(p->labels.empty() ? p->images : p->labels);
    index_t const at = p->label_first + local * p->label_stride;
    HALOX_REQUIRE(at < static_cast<index_t>(f.size()), halox::errc::invalid_argument,
                  "cannot read label " + std::to_string(id));
    int const l = f.data()[at];
    HALOX_REQUIRE(l < classes_, halox::errc::invalid_argument,
                  "label " + std::to_string(l) + " of sample " + std::to_string(id) +
                      " is not below " + std::to_string(classes_) + " classes; the file is not a " +
                      name_ + " file");
    return l;
  }
  std::string describe() const override {
    return name_ + ": " + std::to_string(train_) + " training and " + std::to_string(test_) +
           " test samples";
  }

private:
  std::pair<part const*, index_t> find(split s, index_t id) const {
    for (auto const& p : parts_[s == split::train ? 0 : 1]) {
      if (id < p.count) return {&p, id};
      id -= p.count;
    }
    throw halox::error(halox::errc::internal, "sample index out of range");
  }
  mapped_file const& map(std::string const& path) {
    auto& f = files_[path];
    if (!f) f = std::make_unique<mapped_file>(path);
    return *f;
  }
  std::string name_;
  float table_[256] = {};
  std::vector<part> parts_[2];
  std::map<std::string, std::unique_ptr<mapped_file>> files_;
};

std::vector<unsigned char> head(std::string const& path, std::size_t n) {
  std::ifstream f(path, std::ios::binary);
  HALOX_REQUIRE(f.good(), halox::errc::invalid_argument,
                "cannot open " + path +
                    "; the dataset folder must hold the files listed in "
                    "docs/trainer.md");
  std::vector<unsigned char> h(n);
  f.read(reinterpret_cast<char*>(h.data()), static_cast<std::streamsize>(n));
  HALOX_REQUIRE(f.good(), halox::errc::invalid_argument, path + " is shorter than its header");
  return h;
}

index_t file_size(std::string const& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  return static_cast<index_t>(f.tellg());
}

byte_images::part mnist_part(std::string const& dir, std::string const& prefix, index_t& rows,
                             index_t& cols) {
  byte_images::part p;
  p.images = dir + "/" + prefix + "-images-idx3-ubyte";
  p.labels = dir + "/" + prefix + "-labels-idx1-ubyte";
  auto const hi = head(p.images, 16), hl = head(p.labels, 8);
  HALOX_REQUIRE(be32(hi.data()) == 0x803, halox::errc::invalid_argument,
                p.images + " does not start with the idx3 magic number 2051; is it gzipped? "
                           "(gunzip it first)");
  HALOX_REQUIRE(be32(hl.data()) == 0x801, halox::errc::invalid_argument,
                p.labels + " does not start with the idx1 magic number 2049");
  p.count = be32(hi.data() + 4);
  rows = be32(hi.data() + 8);
  cols = be32(hi.data() + 12);
  HALOX_REQUIRE(be32(hl.data() + 4) == p.count, halox::errc::invalid_argument,
                p.labels + " has " + std::to_string(be32(hl.data() + 4)) + " labels for " +
                    std::to_string(p.count) + " images in " + p.images);
  // Each factor is checked before the product, which 32-bit fields could make overflow.
  HALOX_REQUIRE(rows >= 1 && cols >= 1 && rows <= 65536 && cols <= 65536,
                halox::errc::invalid_argument,
                p.images + " says its images are " + std::to_string(rows) + "x" +
                    std::to_string(cols) + "; an idx3 image file has 1 to 65536 rows and columns");
  index_t const have = file_size(p.images);
  HALOX_REQUIRE(have >= 16 && (have - 16) / (rows * cols) >= p.count, halox::errc::invalid_argument,
                p.images + " is truncated: it holds " + std::to_string(have) + " bytes, not the " +
                    std::to_string(p.count) + " images of " + std::to_string(rows) + "x" +
                    std::to_string(cols) + " its header announces");
  p.first = 16;
  p.stride = rows * cols;
  p.label_first = 8;
  return p;
}

} // namespace

std::unique_ptr<dataset> open_dataset(std::string const& spec, std::vector<index_t> const& shape,
                                      int classes, index_t train_size, index_t test_size) {
  auto shape_str = [](std::vector<index_t> const& s) {
    std::string r;
    for (std::size_t i = 0; i < s.size(); ++i) r += (i ? "x" : "") + std::to_string(s[i]);
    return r;
  };
  if (spec == "synthetic" || spec == "synthetic3d") {
    bool const three = spec == "synthetic3d";
    HALOX_REQUIRE(shape.size() == (three ? 4u : 3u), halox::errc::invalid_argument,
                  "--dataset " + spec + " makes " + (three ? "3-D" : "2-D") +
                      " samples but the model's input is " + shape_str(shape) + "; use --dataset " +
                      (three ? "synthetic" : "synthetic3d") + " or a " + (three ? "3-D" : "2-D") +
                      " model");
    HALOX_REQUIRE(classes <= (three ? 8 : 10), halox::errc::invalid_argument,
                  "--dataset " + spec + " has at most " + (three ? "8" : "10") +
                      " classes but the model has " + std::to_string(classes) +
                      "; set 'classes' and the last fc's 'out' to at most that");
    return std::make_unique<synthetic>(shape, classes, train_size, test_size, three);
  }
  auto colon = spec.find(':');
  std::string const kind = spec.substr(0, colon),
                    dir = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if ((kind == "mnist" || kind == "cifar10") && !dir.empty()) {
    std::unique_ptr<dataset> d;
    if (kind == "mnist") {
      index_t r = 0, c = 0, r2 = 0, c2 = 0;
      auto tr = mnist_part(dir, "train", r, c), te = mnist_part(dir, "t10k", r2, c2);
      HALOX_REQUIRE(r == r2 && c == c2, halox::errc::invalid_argument,
                    "MNIST training and test images in " + dir + " differ in size");
      d = std::make_unique<byte_images>("mnist", std::vector<index_t>{1, r, c}, 10, 0.1307, 0.3081,
                                        std::vector<byte_images::part>{tr},
                                        std::vector<byte_images::part>{te});
    } else {
      auto part = [&](std::string const& name) {
        byte_images::part p;
        p.images = dir + "/" + name;
        index_t const bytes = file_size(p.images);
        p.stride = p.label_stride = 3073;
        p.first = 1;
        p.count = bytes / 3073;
        return p;
      };
      std::vector<byte_images::part> tr, te;
      for (int b = 1; b <= 5; ++b) {
        std::string const n = "data_batch_" + std::to_string(b) + ".bin";
        if (std::ifstream(dir + "/" + n).good()) tr.push_back(part(n));
      }
      HALOX_REQUIRE(!tr.empty() && std::ifstream(dir + "/test_batch.bin").good(),
                    halox::errc::invalid_argument,
                    "cifar10:" + dir +
                        " needs data_batch_1.bin (to _5) and test_batch.bin, the "
                        "CIFAR-10 binary version");
      te.push_back(part("test_batch.bin"));
      for (auto const& p : tr)
        HALOX_REQUIRE(p.count > 0 && file_size(p.images) % 3073 == 0, halox::errc::invalid_argument,
                      p.images + " is not a whole number of 3073-byte CIFAR-10 records");
      d = std::make_unique<byte_images>("cifar10", std::vector<index_t>{3, 32, 32}, 10, 0.5, 0.25,
                                        tr, te);
    }
    HALOX_REQUIRE(d->sample_shape() == shape, halox::errc::invalid_argument,
                  "--dataset " + spec + " has samples of " + shape_str(d->sample_shape()) +
                      " but the model's input is " + shape_str(shape) + "; write 'input " +
                      shape_str(d->sample_shape()) + "' (with spaces) in the model file");
    HALOX_REQUIRE(classes == d->classes(), halox::errc::invalid_argument,
                  "--dataset " + spec + " has 10 classes but the model has " +
                      std::to_string(classes) + "; set 'classes 10'");
    if (train_size < d->size(split::train)) d->limit(split::train, train_size);
    if (test_size < d->size(split::test)) d->limit(split::test, test_size);
    return d;
  }
  throw halox::error(halox::errc::invalid_argument,
                     "unknown --dataset '" + spec +
                         "'; use synthetic, synthetic3d, mnist:DIR or cifar10:DIR");
}

template <class T> void fill_batch(dataset& d, split s, std::vector<index_t> const& ids,
                                   halox::tensor_desc const& desc, T* buf) {
  halox::box const own = desc.owned_box();
  if (own.empty()) return;
  int const nd = desc.ndim();
  halox::box b; // the owned box without N
  b.nd = nd - 1;
  for (int i = 1; i < nd; ++i) b.lo[i - 1] = own.lo[i], b.hi[i - 1] = own.hi[i];
  std::size_t const vol = static_cast<std::size_t>(b.volume());
  static thread_local std::vector<float> sample; // one sample's box, kept from batch to batch
  if (sample.size() < vol) sample.resize(vol);
  float* const tmp = sample.data();
  index_t const base = desc.owned_offset_elements();
  auto const& st = desc.strides();
  index_t const w = b.extent(b.nd - 1), sw = st[nd - 1];
  for (index_t n = own.lo[0]; n < own.hi[0]; ++n) {
    d.read(s, ids[static_cast<std::size_t>(n)], b, tmp);
    // One row of the sample (along the last dimension) at a time into the haloed layout.
    float const* src = tmp;
    index_t i[halox::max_dims] = {};
    for (;;) {
      index_t p = base + (n - own.lo[0]) * st[0];
      for (int k = 1; k < nd - 1; ++k) p += i[k - 1] * st[k];
      T* dst = buf + p;
      for (index_t x = 0; x < w; ++x) dst[x * sw] = static_cast<T>(src[x]);
      src += w;
      int k = nd - 3; // odometer over the dimensions before the last
      for (; k >= 0; --k) {
        if (++i[k] < b.extent(k)) break;
        i[k] = 0;
      }
      if (k < 0) break;
    }
  }
}

void batch_labels(dataset& d, split s, std::vector<index_t> const& ids, index_t lo, index_t hi,
                  std::vector<int>& out) {
  out.clear();
  for (index_t n = lo; n < hi; ++n) out.push_back(d.label(s, ids[static_cast<std::size_t>(n)]));
}

void epoch_order(index_t n, std::uint64_t seed, int epoch, std::vector<index_t>& p) {
  p.resize(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  for (index_t i = n - 1; i > 0; --i) { // Fisher-Yates with hashed draws
    auto const j = static_cast<index_t>(
        mix(seed, 0xda7a, static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(i)) %
        static_cast<std::uint64_t>(i + 1));
    std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(j)]);
  }
}

template void fill_batch(dataset&, split, std::vector<index_t> const&, halox::tensor_desc const&,
                         float*);
template void fill_batch(dataset&, split, std::vector<index_t> const&, halox::tensor_desc const&,
                         double*);

} // namespace trainer
