// --decode gpu's samples (ImageDecode::gpu): each image travels from the loader's threads to the
// GPU as one fixed-size record, a 64-byte header then a payload: the JPEG's own bytes, for nvJPEG,
// or the pixels the loader's thread decoded and resampled (images nvJPEG isn't given). The header
// holds what the CPU path drew for the sample (the crop, the flip), so that the GPU finishes it
// the same way. Private to train::datasets.
#pragma once

#include "train/datasets/image_dataset.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace train::datasets::detail {

inline constexpr uint32_t kRecordMagic = 0x5247544c;  // "LTGR" read little-endian
inline constexpr size_t kRecordHeaderBytes = 64;

enum class RecordKind : uint32_t {
  jpeg = 1,    ///< the payload is the JPEG file, decoded on the GPU
  pixels = 2,  ///< the payload is size x size x 3 bytes (HWC), resampled on the CPU, not yet flipped
};

struct RecordHeader {
  uint32_t magic = kRecordMagic;
  RecordKind kind = RecordKind::jpeg;
  uint32_t bytes = 0;   ///< the payload's
  int32_t flip = 0;     ///< mirror left to right after the resample
  int32_t height = 0;   ///< jpeg: the image's full size
  int32_t width = 0;
  /// The crop of the image: train and none, the box in full-size pixels, resampled to size x size;
  /// eval, the size x size window of the image first resized whole to resize_h x resize_w.
  int32_t crop_top = 0, crop_left = 0, crop_height = 0, crop_width = 0;
  int32_t resize_h = 0, resize_w = 0;  ///< eval only; 0: crop, then resize the crop
  int32_t progressive = 0;             ///< a progressive JPEG (nvJPEG's hardware engines take baseline only)
  int32_t reserved = 0;
  int64_t index = 0;                   ///< the sample's index, for messages
};
static_assert(sizeof(RecordHeader) == kRecordHeaderBytes, "the record's header is 64 bytes");

/// What a JPEG's frame header (SOFn) says, found by walking its markers.
struct JpegFrame {
  int marker = 0;      ///< 0xC0 baseline, 0xC1 extended, 0xC2 progressive, ...; 0: none found
  int components = 0;  ///< 1 grey, 3 colour (YCbCr or RGB), 4 CMYK/YCCK
};

/// Walks the markers of a JPEG held in memory up to its frame header. Never throws: a malformed
/// stream gives marker 0 (the caller then decodes on the CPU, which names the fault).
JpegFrame jpeg_frame(const uint8_t* bytes, size_t n);

/// Whether nvJPEG decodes this JPEG for us: colour (3 components), Huffman-coded baseline,
/// extended or progressive.
inline bool gpu_decodable(const JpegFrame& f) {
  return f.components == 3 && (f.marker == 0xC0 || f.marker == 0xC1 || f.marker == 0xC2);
}

/// The records of a batch, read from the collated host batch (uint8 [B, record bytes]).
/// @throws train::DataError (a bug) when one lacks the record's mark.
std::vector<RecordHeader> record_headers(const Batch& host, const std::string& name);

/// The part of a record batch's finish that needs no decoder: the pixel records copied up (the whole
/// batch in one copy when every record is pixels), the decoded JPEGs (`decoded`, RGB bytes on the
/// device at `offsets`) cropped and resized, then the flips and the normalization, on the current
/// stream. Thread-safe.
class RecordFinisher {
 public:
  explicit RecordFinisher(const ImageOptions& options);
  Batch finish(const Batch& host, const std::vector<RecordHeader>& recs, const at::Tensor& decoded,
               const std::vector<int64_t>& offsets, const at::Device& device);

 private:
  at::Tensor pixels(const Batch& host, const std::vector<RecordHeader>& recs, const at::Device& device);
  std::pair<at::Tensor, at::Tensor> normalization(const at::Device& device);
  ImageOptions options_;
  std::vector<float> mean_, std_;
  std::mutex mu_;
  at::Tensor mean_d_, std_d_;  // on the device, made at the first batch
};

/// The stage of records that are all pixels (ImageDecode::cpu on a GPU: decoded and resampled on the
/// loader's threads, sent as bytes): no decoder, RecordFinisher alone.
std::shared_ptr<DeviceStage> make_pixel_stage(const ImageDataset& data);

/// The nvJPEG stage of `data` on `device` (nvjpeg_stage.cpp; nvjpeg_stage_none.cpp in builds
/// without nvjpeg.h, where it throws train::ConfigError saying so).
std::shared_ptr<DeviceStage> make_nvjpeg_stage(const ImageDataset& data, const at::Device& device);

}  // namespace train::datasets::detail
