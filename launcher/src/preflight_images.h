// `trainctl preflight`'s image checks: every image of an image folder's splits, or of WebDataset
// shards, looked at on this node without training, the bad ones named. Private to the launcher.
#pragma once

#include <string>
#include <vector>

namespace train::detail {

/// What the image checks found.
struct ImageCheck {
  std::string summary;              ///< "12,811 images in 2 splits (train, val) of 10 classes"
  std::vector<std::string> errors;  ///< one per bad image (at most kMaxNamed, then a count), each naming the file
};

/// The bad images named one by one; past this many, a count.
inline constexpr int kMaxNamed = 20;

/// Checks --dataset imagefolder's folder `dir` (train/ and val/ or test/) or --dataset webdataset's
/// shards `data` (a pattern or a folder; `eval_data` too when given): the folder lists (class folders,
/// no empty class) or the shards' structure (every sample with an image and a label), then every
/// image. `decode` false reads each image's header and checks that it ends as its format ends (a
/// JPEG's EOI marker, a PNG's IEND chunk): a non-image, a damaged header or a truncated file is
/// found, reading a few KiB a file; true decodes each image whole (libjpeg-turbo, libpng) on
/// `threads` threads.
/// @throws train::DataError for what makes the data unusable as a whole (a missing folder or
///   shard, a damaged tar), naming it.
ImageCheck check_images(const std::string& dataset, const std::string& data, const std::string& eval_data, bool decode,
                        int threads);

}  // namespace train::detail
