#pragma once
// Datasets: built-in synthetic images (2-D and 3-D) and the MNIST (idx) and CIFAR-10 (binary)
// files. Every rank reads only the samples and the part of each sample it owns.
#include <halox/box.hpp>
#include <halox/tensor_desc.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trainer {

/// Which part of a dataset.
enum class split { train, test };

/// A labelled image dataset.
class dataset {
public:
  virtual ~dataset() = default;
  /// Shape of one sample: C, [D,] H, W.
  [[nodiscard]] std::vector<halox::index_t> const& sample_shape() const { return shape_; }
  /// Number of classes.
  [[nodiscard]] int classes() const { return classes_; }
  /// Samples in a split.
  [[nodiscard]] halox::index_t size(split s) const { return s == split::train ? train_ : test_; }
  /// Limits a split to its first `n` samples (n <= size).
  void limit(split s, halox::index_t n);
  /// Writes the values of sample `id` inside `b` (a box over C and the spatial dimensions)
  /// row-major into `out`.
  virtual void read(split s, halox::index_t id, halox::box const& b, float* out) = 0;
  /// The label of sample `id`.
  [[nodiscard]] virtual int label(split s, halox::index_t id) = 0;
  /// A line describing the dataset.
  [[nodiscard]] virtual std::string describe() const = 0;

protected:
  std::vector<halox::index_t> shape_;
  int classes_ = 0;
  halox::index_t train_ = 0, test_ = 0;
};

/// Opens `spec` (synthetic, synthetic3d, mnist:DIR or cifar10:DIR) for a model whose samples
/// have `shape` (C, [D,] H, W) and `classes` classes. Synthetic data take the model's shape and
/// have `train_size` + `test_size` samples. Throws `halox::error` naming the value and the fix.
[[nodiscard]] std::unique_ptr<dataset> open_dataset(std::string const& spec,
                                                    std::vector<halox::index_t> const& shape,
                                                    int classes, halox::index_t train_size,
                                                    halox::index_t test_size);

/// Fills the owned block of `buf` (laid out as `desc`, [N, C, spatial...]) with the samples
/// `ids[n]` of `s` for the owned batch positions n.
template <class T> void fill_batch(dataset& d, split s, std::vector<halox::index_t> const& ids,
                                   halox::tensor_desc const& desc, T* buf);

/// The labels of the samples `ids[n]` for the batch positions n in [lo, hi), into `out`
/// (reused: a step allocates nothing once it has held a batch).
void batch_labels(dataset& d, split s, std::vector<halox::index_t> const& ids, halox::index_t lo,
                  halox::index_t hi, std::vector<int>& out);

/// The order of the training samples in epoch `epoch` into `out` (its storage reused): a
/// permutation drawn from the seed and the epoch only, the same on every rank.
void epoch_order(halox::index_t n, std::uint64_t seed, int epoch, std::vector<halox::index_t>& out);

} // namespace trainer
