// Where encoded images come from: a folder of class folders (ImageFolder's layout) or WebDataset's
// tar shards. A source lists its samples once (cached) and reads one sample's bytes on request;
// decoding and augmentation are the image dataset's (image_dataset.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace train::datasets {

/// One sample of a source: the encoded image (JPEG or PNG bytes, as stored) and its class.
struct EncodedImage {
  std::vector<uint8_t> bytes;
  int64_t label = 0;
  std::string where;  ///< for messages: "DIR/train/cat/001.jpg", or "DIR/shard-000003.tar: member 0042.jpg"
};

/// A list of encoded images with their classes, read concurrently by the loader's threads.
class ImageSource {
 public:
  virtual ~ImageSource() = default;
  /// Number of samples.
  virtual int64_t size() const = 0;
  /// The sample at `index` (0 <= index < size()). Safe to call from several threads at once (pread,
  /// no shared file position).
  /// @throws train::DataError naming the file (and member) when it can't be read.
  virtual EncodedImage read(int64_t index) const = 0;
  /// The class names, index i for label i (ImageFolder: the sorted folder names; shards: the labels
  /// found, as numbers).
  virtual const std::vector<std::string>& classes() const = 0;
  /// A name for logs and errors, e.g. "imagefolder:/data/imagenet/train".
  virtual std::string name() const = 0;
};

}  // namespace train::datasets
