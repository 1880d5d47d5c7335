// The example's data: striped images in four orientations (horizontal, vertical and the two
// diagonals), stored in the example's own binary file format and read by a train::Dataset.
#pragma once

#include <train/data.h>

#include <cstdint>
#include <string>

namespace example {

/// The file format ("stripes", little-endian):
///   offset 0   8 bytes   magic "LTSTRIPE"
///   offset 8   uint32    format version (1)
///   offset 12  uint32    number of classes
///   offset 16  uint32    image height
///   offset 20  uint32    image width
///   offset 24  uint64    number of records
///   offset 32  records: one uint8 label, then height * width uint8 pixels, row by row
constexpr char kStripesMagic[8] = {'L', 'T', 'S', 'T', 'R', 'I', 'P', 'E'};
constexpr uint32_t kStripesVersion = 1;
constexpr int64_t kStripesHeaderBytes = 32;
constexpr int64_t kStripesClasses = 4;

/// Writes `count` images of height x width, drawn from `seed` (the same seed gives the same
/// bytes on every machine), to `path` through a temporary file and a rename.
/// @throws train::DataError when the file can't be written.
void write_stripes(const std::string& path, int64_t count, uint64_t seed, int64_t height = 16, int64_t width = 16);

/// Writes the example's two files, DIR/train.stripes and DIR/test.stripes, unless they exist.
void make_stripes_data(const std::string& dir);

/// A stripes file held in memory as float images [N, 1, H, W] (scaled to about [-1, 1]) and
/// int64 labels [N]. get_batch gathers rows on the device the data was moved to.
class StripesDataset : public train::Dataset {
 public:
  /// Reads and checks a stripes file; `limit` > 0 keeps the first `limit` records.
  /// @throws train::DataError naming the file, what was expected and what was found.
  explicit StripesDataset(const std::string& path, int64_t limit = 0);

  int64_t size() const override { return labels_.size(0); }
  train::Batch get_batch(const at::Tensor& indices) override;
  void to(const at::Device& device) override;
  std::string name() const override { return name_; }

 private:
  at::Tensor images_, labels_;
  std::string name_;
};

}  // namespace example
