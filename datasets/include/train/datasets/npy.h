// NumPy's .npy arrays, memory-mapped: NpyArray reads the header and maps the data (no LibTorch),
// NpyDataset serves samples from an inputs file and a targets file (x.npy [N, ...], y.npy [N] or
// [N, ...]) as a train::SampleDataset, read on the loader's threads.
#pragma once

#include "train/catalog/catalog.h"
#include "train/sample_dataset.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace train::datasets {

class MappedFile;

/// The element types NpyArray reads, named as numpy's `descr` names them without the byte order
/// (b1 bool, i1..i8 signed, u1..u8 unsigned, f2 half, f4 float, f8 double).
enum class NpyDtype { b1, i1, u1, i2, u2, i4, u4, i8, u8, f2, f4, f8 };

/// Bytes per element of `dtype`.
int npy_item_bytes(NpyDtype dtype);

/// numpy's little-endian `descr` of `dtype`: "|u1", "<f4", ... .
std::string npy_descr(NpyDtype dtype);

/// True for the integer types (b1 included), false for f2, f4, f8.
bool npy_is_integer(NpyDtype dtype);

/// An .npy file (format versions 1.0, 2.0 and 3.0), its header parsed and checked and its data
/// memory-mapped, in C order and little-endian. Copies share the mapping; reading from several
/// threads at once is safe.
class NpyArray {
 public:
  /// Opens `path`, parses its header and maps the file.
  /// @throws train::DataError naming the file, with what was expected and what was found, for: a
  ///   file that can't be opened; a bad magic string (an .npz archive is named as such); an
  ///   unknown format version; a header cut short or not a dict of 'descr', 'fortran_order' and
  ///   'shape'; a big-endian, structured or unsupported dtype; fortran_order True; data bytes that
  ///   don't match the shape and dtype (truncated, or trailing bytes).
  explicit NpyArray(const std::string& path);

  const std::string& path() const { return path_; }
  NpyDtype dtype() const { return dtype_; }
  /// The dtype as the file states it, e.g. "<f4".
  const std::string& descr() const { return descr_; }
  int item_bytes() const { return npy_item_bytes(dtype_); }
  /// The array's shape; empty for a 0-d array.
  const std::vector<int64_t>& shape() const { return shape_; }
  /// The shape as numpy prints it: "(60000, 28, 28)", "(5,)", "()".
  std::string shape_string() const;
  /// The size of the first dimension: the number of rows (samples); 1 for a 0-d array.
  int64_t rows() const { return shape_.empty() ? 1 : shape_[0]; }
  /// Elements of one row: the product of shape[1:].
  int64_t row_elements() const { return row_elements_; }
  /// Bytes of one row: row_elements() * item_bytes().
  uint64_t row_bytes() const { return row_elements_ * static_cast<uint64_t>(item_bytes()); }
  /// The first byte of the data (in the mapping); nullptr when the array holds no element.
  const uint8_t* data() const;
  /// The first byte of row `i` (0 <= i < rows(), unchecked).
  const uint8_t* row(int64_t i) const { return data() + static_cast<uint64_t>(i) * row_bytes(); }
  /// Where the data starts in the file: magic, version, header length and header.
  uint64_t data_offset() const { return data_offset_; }
  /// The format's major version: 1, 2 or 3.
  int version() const { return version_; }

 private:
  std::string path_;
  std::shared_ptr<const MappedFile> file_;
  NpyDtype dtype_ = NpyDtype::u1;
  std::string descr_;
  std::vector<int64_t> shape_;
  int64_t row_elements_ = 1;
  uint64_t data_offset_ = 0;
  int version_ = 1;
};

/// How NpyDataset turns rows into samples.
struct NpyOptions {
  /// uint8 inputs become float32 (x / 255 - mean) / std, computed as the IDX reader computes it
  /// (the same bits): MNIST's mean and std by default, as the seeds normalize MNIST and
  /// Fashion-MNIST. Mean 0 and std 1 give x / 255.
  double uint8_mean = catalog::kMnistMean;
  double uint8_std = catalog::kMnistStd;
  /// The shape of one input; empty: as stored (the inputs' shape without its first dimension).
  /// E.g. {1, 28, 28} for images stored as [N, 28, 28] that a convolution reads as one channel.
  /// It must hold as many elements as a stored row.
  std::vector<int64_t> input_shape;
  /// When > 0, integer targets must be class indices in [0, num_classes): get() checks each one.
  int64_t num_classes = 0;
};

/// Samples from two .npy files: inputs (x.npy, [N, ...]) and targets (y.npy, [N] or [N, ...]),
/// both memory-mapped; get(i) reads row i of each.
///
/// Inputs: uint8 arrays become float32, scaled and normalized as NpyOptions says (Fashion-MNIST
/// saved as uint8 gives the IDX reader's tensors bit for bit); float arrays (f2, f4, f8) are taken
/// as they are, in their own dtype; other integer arrays become int64 (token ids, category codes).
/// Targets: integer arrays (class indices) become int64, float arrays are taken as they are; a
/// target of shape [N] gives 0-d targets (int64 [] for a class index).
class NpyDataset : public SampleDataset {
 public:
  /// Opens and checks both files.
  /// @throws train::DataError naming the file: everything NpyArray refuses; a 0-d array or one
  ///   with no row; inputs and targets of different row counts; an input_shape whose element
  ///   count differs from a row's; uint8 options with a std of 0.
  NpyDataset(const std::string& inputs_path, const std::string& targets_path, const NpyOptions& options = {});

  /// The number of samples: the rows of both files.
  int64_t size() const override { return inputs_.rows(); }

  /// Row `index` of the inputs and of the targets, converted as the class comment says.
  /// @throws train::DataError for an index outside [0, size()), or (with num_classes) a target
  ///   outside [0, num_classes), naming the targets file and the sample index.
  Sample get(int64_t index) override;

  /// "npy:" and the inputs' path.
  std::string name() const override { return "npy:" + inputs_.path(); }

  const NpyArray& inputs() const { return inputs_; }
  const NpyArray& targets() const { return targets_; }

 private:
  NpyArray inputs_;
  NpyArray targets_;
  NpyOptions options_;
  std::vector<int64_t> input_shape_;
  std::vector<int64_t> target_shape_;
  float uint8_table_[256] = {};  // uint8 input value -> its normalized float
};

}  // namespace train::datasets
