// ImageDataset: one image's way from the source's bytes to a normalized float32 CHW sample, with the
// crop box chosen from the header before decoding, so a JPEG can decode at reduced DCT scale.
#include "train/datasets/image_dataset.h"

#include "gpu_records.h"
#include "train/base/error.h"
#include "train/datasets/image.h"
#include "train/datasets/image_transform.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace train::datasets {
namespace {

std::vector<float> per_channel(const std::vector<double>& values, int channels, const char* what) {
  if (values.size() != 1 && values.size() != size_t(channels)) {
    throw ConfigError("ImageOptions::" + std::string(what) + ": expected 1 value or " + std::to_string(channels) +
                          " (one per channel), found " + std::to_string(values.size()) + ".",
                      "give one value per output channel (ImageNet's RGB: mean 0.485 0.456 0.406, std 0.229 0.224 "
                      "0.225; grey images: one value).");
  }
  std::vector<float> out(channels);
  for (int c = 0; c < channels; ++c) out[c] = static_cast<float>(values.size() == 1 ? values[0] : values[c]);
  return out;
}

void check_options(const ImageOptions& o) {
  if (o.size < 1) {
    throw ConfigError("ImageOptions::size: expected a positive output size, found " + std::to_string(o.size) + ".",
                      "224 is ImageNet's; MNIST-like data keeps its own size (28) with mode none.");
  }
  if (o.channels != 1 && o.channels != 3) {
    throw ConfigError("ImageOptions::channels: expected 1 (grey) or 3 (RGB), found " + std::to_string(o.channels) + ".",
                      "the model's first layer decides: 3 for ImageNet's models, 1 for MNIST's.");
  }
  if (o.decode == ImageDecode::gpu && o.channels != 3) {
    throw ConfigError("ImageOptions::decode gpu: expected 3 channels (nvJPEG decodes colour JPEGs to RGB), found " +
                          std::to_string(o.channels) + ".",
                      "decode grey images on the CPU (ImageDecode::cpu, train --decode cpu).");
  }
  if (o.decode == ImageDecode::gpu && (o.gpu_jpeg_bytes < 1 || o.gpu_jpeg_bytes > (int64_t{1} << 30))) {
    throw ConfigError("ImageOptions::gpu_jpeg_bytes: expected 1 byte to 1 GiB, found " + std::to_string(o.gpu_jpeg_bytes) +
                          ".",
                      "256 KiB sends nearly every ImageNet JPEG to the GPU; larger files are decoded on the CPU.");
  }
  for (double s : o.std) {
    if (!(s > 0)) {
      throw ConfigError("ImageOptions::std: expected positive values, found " + std::to_string(s) + ".",
                        "a std of 0 divides by zero; use 1 to leave a channel unscaled.");
    }
  }
}

// The normalized value of each byte per channel, by the IDX reader's own tensor ops, so that 8-bit
// pixels taken as they are give its bits (idx.cpp: x.to(float).div_(255).sub_(mean).div_(std)).
std::vector<float> byte_table(const std::vector<double>& mean, const std::vector<double>& std, int channels) {
  std::vector<float> table(size_t(channels) * 256);
  std::vector<uint8_t> bytes(256);
  for (int v = 0; v < 256; ++v) bytes[v] = uint8_t(v);
  const at::Tensor raw = at::from_blob(bytes.data(), {256}, at::kByte);
  for (int c = 0; c < channels; ++c) {
    const double m = mean.size() == 1 ? mean[0] : mean[c], s = std.size() == 1 ? std[0] : std[c];
    const at::Tensor t = raw.to(at::kFloat).div_(255.0).sub_(m).div_(s).contiguous();
    std::memcpy(table.data() + size_t(c) * 256, t.data_ptr<float>(), 256 * sizeof(float));
  }
  return table;
}

std::string list(const std::vector<double>& v) {
  std::ostringstream s;
  for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  return s.str();
}

// The crop box and flip of one draw, in the full-size image's pixels.
struct Plan {
  CropBox box;
  bool flip = false;
  int scale_denom = 1;
};

Plan plan_image(const ImageOptions& o, const ImageHeader& h, const EncodedImage& image, int64_t index,
                const SampleDraw& draw) {
  Plan p;
  if (o.mode == ImageMode::none) {
    if (h.height != o.size || h.width != o.size) {
      throw DataError(image.where + ": expected a " + std::to_string(o.size) + "x" + std::to_string(o.size) +
                          " image (mode none resizes nothing), found " + std::to_string(h.width) + "x" +
                          std::to_string(h.height) + ".",
                      "resize the images beforehand, or use mode train or eval, which crop and resize.");
    }
    p.box = {0, 0, double(o.size), double(o.size)};
    return p;
  }
  if (o.mode == ImageMode::train) {
    SampleRng rng(draw.seed, draw.epoch, index);
    p.box = random_resized_crop_box(rng, h.height, h.width);
    p.flip = rng.uniform() < 0.5;  // after the box, as RandomHorizontalFlip follows RandomResizedCrop
  } else {
    p.box = eval_crop_box(h.height, h.width, o.size);
  }
  if (o.reduced_dct && h.format == ImageFormat::jpeg) p.scale_denom = jpeg_scale_for_box(p.box, o.size, o.size);
  return p;
}

bool is_whole(const CropBox& box, const Image& image, int size) {
  return box.top == 0 && box.left == 0 && box.height == size && box.width == size && image.height == size &&
         image.width == size;
}

}  // namespace

const char* image_mode_name(ImageMode mode) {
  switch (mode) {
    case ImageMode::train: return "train";
    case ImageMode::eval: return "eval";
    default: return "none";
  }
}

ImageDataset::ImageDataset(std::shared_ptr<const ImageSource> source, ImageOptions options)
    : source_(std::move(source)), options_(std::move(options)) {
  check_options(options_);
  per_channel(options_.mean, options_.channels, "mean");  // their counts checked; the table holds the values
  per_channel(options_.std, options_.channels, "std");
  table_ = byte_table(options_.mean, options_.std, options_.channels);
}

int64_t ImageDataset::size() const { return source_->size(); }

Sample ImageDataset::get(int64_t index) { return draw(index, SampleDraw{}); }

Sample ImageDataset::draw(int64_t index, const SampleDraw& draw) {
  if (options_.decode == ImageDecode::gpu || pixel_records_.load(std::memory_order_relaxed)) {
    return draw_record(index, draw);
  }
  Sample s;
  s.input = at::empty({options_.channels, options_.size, options_.size}, at::kFloat);
  s.target = at::empty({}, at::kLong);
  *s.target.data_ptr<int64_t>() = draw_into(index, draw, s.input.data_ptr<float>());
  return s;
}

namespace {

// The source's image `index`, its label checked against the source's classes.
EncodedImage read_checked(const ImageSource& source, int64_t index) {
  EncodedImage encoded = source.read(index);
  const int64_t classes = static_cast<int64_t>(source.classes().size());
  if (classes > 0 && (encoded.label < 0 || encoded.label >= classes)) {
    throw DataError(encoded.where + ": expected a label in 0.." + std::to_string(classes - 1) + " (the source's " +
                        std::to_string(classes) + " classes), found " + std::to_string(encoded.label) + ".",
                    "the label doesn't match the class list; rebuild the source's index.");
  }
  return encoded;
}

// The CPU's pixels of a draw, before normalization and the flip: the decoded image itself when it
// is already the output (is_whole), else `resampled` (size x size x c bytes: the resample rounded
// half to even and clamped, as Pillow's resize gives bytes) filled. Returns the decoded image (this
// thread's buffer); `whole` says which of the two holds the pixels.
// Counts a channel conversion in `converted` and a reduced-DCT decode in `reduced`.
const Image& decode_and_resample(const ImageOptions& o, const EncodedImage& encoded, const ImageHeader& header,
                                 const Plan& plan, std::vector<uint8_t>& resampled, bool* whole,
                                 std::atomic<int64_t>& converted, std::atomic<int64_t>& reduced) {
  thread_local Image image;  // its buffer is reused from one draw to the next on this thread
  decode_image_into(encoded.bytes.data(), encoded.bytes.size(), encoded.where, &image, o.channels, plan.scale_denom);
  if (header.channels != o.channels) converted.fetch_add(1, std::memory_order_relaxed);
  if (plan.scale_denom > 1) reduced.fetch_add(1, std::memory_order_relaxed);
  *whole = is_whole(plan.box, image, o.size);
  if (!*whole) {
    const size_t count = size_t(o.size) * o.size * o.channels;
    thread_local std::vector<float> floats;
    floats.resize(count);
    // Train crops, then resizes (RandomResizedCrop); eval resizes the whole image, then crops.
    resample_bilinear(image, scale_box(plan.box, plan.scale_denom), o.size, o.size, floats.data(),
                      o.mode == ImageMode::eval ? TapBounds::image : TapBounds::box);
    resampled.resize(count);
    for (size_t i = 0; i < count; ++i) resampled[i] = static_cast<uint8_t>(std::clamp(std::nearbyint(floats[i]), 0.0f, 255.0f));
  }
  return image;
}

}  // namespace

int64_t ImageDataset::draw_into(int64_t index, const SampleDraw& draw, float* out) {
  const EncodedImage encoded = read_checked(*source_, index);
  const ImageHeader header = read_image_header(encoded.bytes.data(), encoded.bytes.size(), encoded.where);
  const Plan plan = plan_image(options_, header, encoded, index, draw);
  thread_local std::vector<uint8_t> resampled;
  bool whole = false;
  const Image& image = decode_and_resample(options_, encoded, header, plan, resampled, &whole, converted_, reduced_);
  const int size = options_.size, c = options_.channels;
  normalize_to_chw(whole ? image.pixels.data() : resampled.data(), size, size, c, plan.flip, table_.data(), out);
  return encoded.label;
}

int64_t ImageDataset::record_bytes() const {
  const int64_t pixels = int64_t{options_.size} * options_.size * options_.channels;
  const int64_t payload = options_.decode == ImageDecode::gpu ? std::max(options_.gpu_jpeg_bytes, pixels) : pixels;
  return static_cast<int64_t>(detail::kRecordHeaderBytes) + payload;
}

// A record (gpu_records.h): the JPEG as it is, with the CPU path's full-size crop and flip, when
// nvJPEG takes it; else the CPU path's pixels (decoded, cropped and resampled here), rounded to
// bytes, the flip and normalization left to the GPU as for the others.
Sample ImageDataset::draw_record(int64_t index, const SampleDraw& draw) {
  const EncodedImage encoded = read_checked(*source_, index);
  const uint8_t* bytes = encoded.bytes.data();
  const size_t n = encoded.bytes.size();
  const ImageHeader header = read_image_header(bytes, n, encoded.where);
  Sample s;
  s.input = at::empty({record_bytes()}, at::kByte);
  s.target = at::empty({}, at::kLong);
  *s.target.data_ptr<int64_t>() = encoded.label;
  uint8_t* out = s.input.data_ptr<uint8_t>();
  detail::RecordHeader r;
  r.index = index;
  const int size = options_.size;
  const detail::JpegFrame frame =
      header.format == ImageFormat::jpeg ? detail::jpeg_frame(bytes, n) : detail::JpegFrame{};
  // A JPEG cut short goes the CPU's way too, whose decode names the fault: nvJPEG may fill it in.
  if (options_.decode == ImageDecode::gpu && detail::gpu_decodable(frame) &&
      static_cast<int64_t>(n) <= options_.gpu_jpeg_bytes &&
      image_ends_whole(header.format, bytes, n)) {
    ImageOptions full = options_;
    full.reduced_dct = false;  // the GPU decodes whole: the box in full-size pixels
    const Plan plan = plan_image(full, header, encoded, index, draw);
    r.kind = detail::RecordKind::jpeg;
    r.bytes = static_cast<uint32_t>(n);
    r.flip = plan.flip;
    r.height = header.height;
    r.width = header.width;
    r.progressive = frame.marker == 0xC2;
    if (options_.mode == ImageMode::eval) {
      // eval_crop_box's geometry: the whole image resized, then the center window.
      const int e = eval_resize_size(size);
      const int short_side = std::min(header.height, header.width), long_side = std::max(header.height, header.width);
      const int new_long = static_cast<int>(double(e) * long_side / short_side);
      r.resize_h = header.height <= header.width ? e : new_long;
      r.resize_w = header.height <= header.width ? new_long : e;
      r.crop_top = static_cast<int32_t>(std::nearbyint((r.resize_h - size) / 2.0));
      r.crop_left = static_cast<int32_t>(std::nearbyint((r.resize_w - size) / 2.0));
      r.crop_height = r.crop_width = size;
    } else {
      r.crop_top = static_cast<int32_t>(plan.box.top);
      r.crop_left = static_cast<int32_t>(plan.box.left);
      r.crop_height = static_cast<int32_t>(plan.box.height);
      r.crop_width = static_cast<int32_t>(plan.box.width);
    }
    std::memcpy(out + detail::kRecordHeaderBytes, bytes, n);
    gpu_records_.fetch_add(1, std::memory_order_relaxed);
  } else {
    const Plan plan = plan_image(options_, header, encoded, index, draw);
    thread_local std::vector<uint8_t> resampled;
    bool whole = false;
    const Image& image = decode_and_resample(options_, encoded, header, plan, resampled, &whole, converted_, reduced_);
    const size_t count = size_t(size) * size * options_.channels;
    r.kind = detail::RecordKind::pixels;
    r.bytes = static_cast<uint32_t>(count);
    r.flip = plan.flip;
    r.height = r.width = r.crop_height = r.crop_width = size;
    std::memcpy(out + detail::kRecordHeaderBytes, whole ? image.pixels.data() : resampled.data(), count);
    cpu_records_.fetch_add(1, std::memory_order_relaxed);
  }
  std::memcpy(out, &r, sizeof(r));
  return s;
}

std::shared_ptr<DeviceStage> ImageDataset::device_stage(const at::Device& device) {
  if (options_.decode != ImageDecode::gpu) {
    if (!device.is_cuda()) return nullptr;  // float32 samples, used as they are
    // On a GPU the samples travel as bytes (a quarter of float32's), normalized there.
    pixel_records_.store(true, std::memory_order_relaxed);
    return detail::make_pixel_stage(*this);
  }
  if (!device.is_cuda()) {
    throw ConfigError(name() + ": --decode gpu expected the rank's batches on a CUDA device, found " + device.str() + ".",
                      "train with --device cuda, or use --decode cpu.");
  }
  return detail::make_nvjpeg_stage(*this, device);
}

std::string ImageDataset::name() const { return source_->name(); }

std::string ImageDataset::channel_conversion() const {
  if (options_.channels == 3) {
    return "grey images are copied to R, G and B, alpha is dropped, CMYK JPEGs are converted to RGB";
  }
  return "colour images become grey (L = 0.299 R + 0.587 G + 0.114 B, a JPEG's own luma), alpha is dropped";
}

std::string ImageDataset::describe() const {
  std::ostringstream s;
  s << name() << ": " << size() << " images, mode " << image_mode_name(options_.mode) << ", " << options_.channels
    << "x" << options_.size << "x" << options_.size << " ("
    << (options_.channels == 3 ? "RGB" : "grey") << "; " << channel_conversion() << "), normalized with mean "
    << list(options_.mean) << " std " << list(options_.std);
  if (options_.mode != ImageMode::none) {
    s << ", JPEGs decoded " << (options_.reduced_dct ? "at reduced DCT scale where the crop is shrunk 2x or more" : "whole");
  }
  return s.str();
}

}  // namespace train::datasets
