// Images of an ImageSource (image folders, WebDataset shards) decoded and augmented sample by sample
// on the loader's threads: a train::SampleDataset of float32 [C, size, size] images and int64 labels.
#pragma once

#include "train/datasets/image_source.h"
#include "train/sample_dataset.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace train::datasets {

/// What ImageDataset does to each image between decoding and normalizing.
enum class ImageMode {
  train,  ///< torchvision's RandomResizedCrop(size) + RandomHorizontalFlip(0.5), drawn per sample
  eval,   ///< Resize(eval_resize_size(size)) + CenterCrop(size): the same in every epoch
  none,   ///< nothing: every image must already be size x size (MNIST-like data), no resampling
};

/// "train", "eval" or "none".
const char* image_mode_name(ImageMode mode);

/// Where JPEGs are decoded.
enum class ImageDecode {
  cpu,  ///< on the loader's threads (libjpeg-turbo and libpng)
  gpu,  ///< on a CUDA device by nvJPEG (batched, its hardware engines where the card has them)
};

/// How ImageDataset turns encoded images into samples.
struct ImageOptions {
  ImageMode mode = ImageMode::train;
  /// The output's height and width.
  int size = 224;
  /// The output's channels, 1 (grey) or 3 (RGB). Images stored with another count are converted
  /// as Pillow's convert() does (decode_image() in image.h); channel_conversion() says how.
  int channels = 3;
  /// Per channel: (x / 255 - mean) / std, as the IDX reader computes it. One value applies to
  /// every channel. The defaults are ImageNet's.
  std::vector<double> mean = {0.485, 0.456, 0.406};
  std::vector<double> std = {0.229, 0.224, 0.225};
  /// Reduced-DCT decoding, a documented choice: a JPEG whose crop box will be shrunk is decoded at
  /// 1/d of its size (d = 2, 4 or 8, the largest with box / d >= size on both sides:
  /// jpeg_scale_for_box()) by libjpeg-turbo's scaled inverse DCT, the box is mapped into the scaled
  /// image and resampled from there. It decodes up to 64x fewer pixels. The result is defined as
  /// this pipeline: the same bits on every run and thread, but not the bits of a full decode
  /// followed by the resample; the two differ by 0.7 to 1.3 levels of 255 on average on
  /// photographs, about what a quality-90 encoding changes (ImageDataset.ReducedDctStaysNearTheFullDecode
  /// measures it and holds it under 2). False: always decode whole.
  bool reduced_dct = true;
  /// ImageDecode::gpu (train --decode gpu): a sample is a record (uint8 [record_bytes()]) of the
  /// JPEG's bytes with its crop box and flip, drawn from (seed, epoch, index) as on the CPU; the
  /// loader's device stage (device_stage()) decodes a batch's records with nvJPEG, crops, resizes
  /// (antialiased bilinear, the same filter), flips and normalizes them on the GPU. The labels, the
  /// order, the boxes and the flips are the CPU path's; the pixels differ from a full CPU decode by
  /// what the decoders' inverse DCTs and chroma upsampling differ (docs/data.md). Colour JPEGs
  /// (baseline or progressive) of up to gpu_jpeg_bytes go to the GPU; the rest (PNGs, grey or CMYK
  /// JPEGs, larger files, files that don't end as a JPEG ends) are decoded and resampled on the
  /// loader's threads, as ImageDecode::cpu would (a truncated file is named there), and travel as
  /// pixels. A JPEG nvJPEG refuses stops the run with its name (--bad-samples skip doesn't cover it).
  ImageDecode decode = ImageDecode::cpu;
  /// ImageDecode::gpu: the largest JPEG sent encoded (the records' payload; the loader's ring holds
  /// prefetch + 1 batches of them, pinned).
  int64_t gpu_jpeg_bytes = 256 * 1024;
};

/// The images of `source`, each read, decoded, cropped, resampled, flipped and normalized when
/// drawn: read -> header -> crop box -> decode (scaled) -> resample (rounded to bytes, half to even,
/// as Pillow's resize gives bytes) -> flip -> normalize. A sample
/// is float32 [channels, size, size] with an int64 [] label. In train mode the crop and the flip
/// come from SampleRng(seed, epoch, index) alone, so a sample is the same at any thread count,
/// prefetch or world size, and after a resume. Safe to call from several threads at once.
class ImageDataset : public SampleDataset {
 public:
  /// @throws train::ConfigError for a size below 1, channels other than 1 or 3, or mean and std
  ///   lists that are not one value or one per channel, or a std that is not positive.
  ImageDataset(std::shared_ptr<const ImageSource> source, ImageOptions options);

  /// The source's number of images.
  int64_t size() const override;

  /// draw(index, {seed 0, epoch 0}).
  Sample get(int64_t index) override;

  /// The sample at `index` for `draw` (train mode draws its crop and flip from seed, epoch and
  /// index; the other modes ignore `draw`).
  /// @throws train::DataError naming the file (and member): what the source throws, a file that is
  ///   not a JPEG or PNG, a corrupt or truncated one, a label outside the source's classes, and in
  ///   mode none an image that is not size x size.
  Sample draw(int64_t index, const SampleDraw& draw) override;

  /// The same into `out` (channels * size * size floats, CHW); returns the label. What draw()
  /// calls, for callers that own their buffers. Always the CPU's decode, whatever options().decode.
  int64_t draw_into(int64_t index, const SampleDraw& draw, float* out);

  /// The bytes of one sample's record, what draw() returns once a GPU's stage was asked for (a
  /// 64-byte header, then the JPEG or the pixels).
  int64_t record_bytes() const;

  /// The stage that turns a batch of records into float32 [B, channels, size, size] on CUDA
  /// `device`. ImageDecode::gpu: nvJPEG decodes, then the crop, flip and normalization run there.
  /// ImageDecode::cpu: the loader's threads decode, crop and resample as always, and from this call
  /// on draw() hands the pixels as bytes (a record; a quarter of float32's memory and copy), which
  /// the stage flips and normalizes on the GPU: the CPU's values (its resample is rounded to bytes
  /// too). For the CPU: null (float32 samples) with ImageDecode::cpu.
  /// @throws train::ConfigError for ImageDecode::gpu when nvJPEG can't run: a build without
  ///   nvjpeg.h, libnvjpeg.so not found at run time, or a device that isn't CUDA.
  std::shared_ptr<DeviceStage> device_stage(const at::Device& device) override;

  /// The source's name.
  std::string name() const override;

  /// The options it was made with.
  const ImageOptions& options() const { return options_; }
  /// The source it reads.
  const ImageSource& source() const { return *source_; }

  /// What happens to an image of another channel count, for the log: e.g. "grey images are
  /// copied to R, G and B; alpha is dropped".
  std::string channel_conversion() const;

  /// One line for the log: the source, the mode and size, the channels and their conversion, the
  /// normalization, and whether JPEGs decode at reduced DCT scale.
  std::string describe() const;

  /// Images drawn so far (by every thread) that were stored with another channel count.
  int64_t converted_images() const { return converted_.load(std::memory_order_relaxed); }
  /// Images drawn so far that were decoded at a reduced DCT scale.
  int64_t reduced_decodes() const { return reduced_.load(std::memory_order_relaxed); }
  /// ImageDecode::gpu: images drawn so far that went to the GPU encoded, and those decoded on the
  /// CPU instead (PNGs, grey or CMYK JPEGs, JPEGs over gpu_jpeg_bytes).
  int64_t gpu_records() const { return gpu_records_.load(std::memory_order_relaxed); }
  int64_t cpu_records() const { return cpu_records_.load(std::memory_order_relaxed); }

 private:
  std::shared_ptr<const ImageSource> source_;
  ImageOptions options_;
  std::vector<float> table_;       // [channel * 256 + byte]: the normalized value of an 8-bit pixel
  std::atomic<int64_t> converted_{0};
  std::atomic<int64_t> reduced_{0};
  std::atomic<int64_t> gpu_records_{0};
  std::atomic<int64_t> cpu_records_{0};
  std::atomic<bool> pixel_records_{false};  // ImageDecode::cpu after a CUDA device's stage was asked

  Sample draw_record(int64_t index, const SampleDraw& draw);
};

}  // namespace train::datasets
