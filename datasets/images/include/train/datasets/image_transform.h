// The ImageNet recipe's augmentation on decoded pixels, drawn per sample from (seed, epoch, index):
// random-resized crop and flip for training, resize and center crop for evaluation, an antialiased
// bilinear resample from a crop box, and normalization to float32 CHW. No LibTorch here.
#pragma once

#include "train/datasets/image.h"

#include <cstdint>
#include <vector>

namespace train::datasets {

/// The random numbers of one sample: a counter-based stream (splitmix64 over a key hashed from the
/// seed, the epoch and the index), so a sample's draws depend on those three numbers alone, never
/// on the thread that draws it, the prefetch, the world size or a resume.
class SampleRng {
 public:
  /// The stream of sample `index` in `epoch` of a run seeded `seed`.
  SampleRng(uint64_t seed, int64_t epoch, int64_t index);
  /// The next 64 random bits.
  uint64_t next();
  /// Uniform in [0, 1), from 53 bits.
  double uniform();
  /// Uniform in [lo, hi) rounded to float32, as torch's uniform_ fills a float32 tensor (24 bits,
  /// computed in double, then stored as float).
  float uniform_float(float lo, float hi);
  /// An integer in [lo, hi) (hi > lo), as torch.randint draws it (the bits modulo the range).
  int64_t randint(int64_t lo, int64_t hi);

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

/// A region of an image in pixels: rows [top, top + height), columns [left, left + width). The
/// corners may be fractional: an evaluation crop, or any box mapped into a reduced-scale decode.
struct CropBox {
  double top = 0;
  double left = 0;
  double height = 0;
  double width = 0;
};

/// RandomResizedCrop's ranges: the box's area as a fraction of the image, and its width / height.
struct RandomResizedCropRange {
  double scale_min = 0.08;
  double scale_max = 1.0;
  double ratio_min = 3.0 / 4.0;
  double ratio_max = 4.0 / 3.0;
};

/// The box of torchvision's RandomResizedCrop.get_params, step for step, with `rng` instead of
/// torch's generator: 10 attempts at an area uniform in the scale range and a ratio log-uniform in
/// the ratio range (both drawn as float32, as torch draws them; sides rounded half to even, as
/// Python's round()), the box's corner uniform among the integer positions that fit; then the
/// fallback, the whole image clamped to the ratio range and centered. Integer coordinates.
/// @param fallback set to whether the 10 attempts failed (for tests), when not null.
CropBox random_resized_crop_box(SampleRng& rng, int height, int width, const RandomResizedCropRange& range = {},
                                bool* fallback = nullptr);

/// The side the shorter side is resized to before the evaluation's center crop: round(size * 256
/// / 224) (256 for 224), as torchvision's ImageNet reference pairs them.
int eval_resize_size(int size);

/// torchvision's evaluation transform, Resize(eval_resize_size(size)) then CenterCrop(size), as the
/// box of the source that the crop's pixels come from: the shorter side is resized to S, the
/// longer to int(S * long / short), the crop's corner rounded half to even as CenterCrop does. A
/// resample of this box to size x size gives the resized image's center crop.
CropBox eval_crop_box(int height, int width, int size);

/// Which pixels a resample's filter may read at the box's edges.
enum class TapBounds {
  image,  ///< the whole image's: a resize of the image, then a crop (the evaluation's Resize + CenterCrop)
  box,    ///< the box's own (its pixel extent, rounded outwards): a crop, then a resize (RandomResizedCrop)
};

/// Resamples `box` of `src` (8-bit HWC, any channel count) to out_h x out_w float HWC in `out`
/// (out_h * out_w * src.channels values, in 0..255): a separable triangle filter whose support
/// widens with the downscale factor (antialiasing), with Pillow's and torchvision's coefficients
/// (antialias=True): a sample's center at box.left + (x + 0.5) * scale, taps clamped to `bounds`
/// and renormalized. In float32, one axis after the other (along y first when the box is taller
/// than the output, else along x); the same bits on every run and thread.
void resample_bilinear(const Image& src, const CropBox& box, int out_h, int out_w, float* out,
                       TapBounds bounds = TapBounds::box);

/// Normalizes one value in 0..255: (x / 255 - mean) / std in float32, each step rounded as the IDX
/// reader's tensor ops round it (idx.cpp), so integer inputs give its bits.
inline float normalize_value(float x, float mean, float std) { return (x / 255.0f - mean) / std; }

/// Writes `hwc` (height x width x channels floats in 0..255) normalized per channel into `chw`
/// (channels x height x width), mirrored left to right when `flip`. mean and std: one per channel.
void normalize_to_chw(const float* hwc, int height, int width, int channels, bool flip, const std::vector<float>& mean,
                      const std::vector<float>& std, float* chw);

/// The same for 8-bit pixels, through `table`: table[c * 256 + v] is channel c's value for byte v.
void normalize_to_chw(const uint8_t* hwc, int height, int width, int channels, bool flip, const float* table,
                      float* chw);

/// The reduced-DCT scale for a JPEG whose `box` (in full-size pixels) will be resampled to out_h x
/// out_w: the largest d of 1, 2, 4, 8 with box.width / d >= out_w and box.height / d >= out_h, so
/// the scaled decode never has fewer pixels than the output across the box.
int jpeg_scale_for_box(const CropBox& box, int out_h, int out_w);

/// `box` mapped into the image decoded at 1/scale_denom: each side divided by scale_denom (pixel i
/// of the scaled decode covers source pixels [i * d, (i + 1) * d)).
CropBox scale_box(const CropBox& box, int scale_denom);

}  // namespace train::datasets
