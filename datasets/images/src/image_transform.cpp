// The augmentation's arithmetic: the sample's random stream, torchvision's crop boxes, the
// antialiased bilinear resample (Pillow's coefficients, in float32) and the normalization.
#include "train/datasets/image_transform.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

namespace train::datasets {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;  // splitmix64's increment: 2^64 / phi

// splitmix64's output function: a bijection of 64-bit words that mixes every bit into every bit.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Python's round() of a non-negative double to an int: half to even (nearbyint's default mode).
int round_half_even(double x) { return static_cast<int>(std::nearbyint(x)); }

// One output axis of the resample: for each output pixel, its first input pixel and its weights.
struct AxisTaps {
  int taps = 0;               // weights per output pixel (the widest support)
  std::vector<int> first;     // [out]: the first input pixel
  std::vector<int> count;     // [out]: how many input pixels, from first
  std::vector<float> weight;  // [out * taps]
};

// Pillow's precompute_coeffs (Resample.c) for the bilinear (triangle) filter, support 1 scaled by
// the downscale factor; torchvision's antialiased interpolation computes the same weights. Taps
// stay in [lo_bound, hi_bound): the image's pixels, or the crop's.
AxisTaps axis_taps(int lo_bound, int hi_bound, double in0, double in1, int out_size) {
  const double scale = (in1 - in0) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_scale;  // the triangle's support is 1
  AxisTaps a;
  a.taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  a.first.resize(out_size);
  a.count.resize(out_size);
  a.weight.assign(size_t(out_size) * a.taps, 0.0f);
  std::vector<double> w(a.taps);
  for (int x = 0; x < out_size; ++x) {
    const double center = in0 + (x + 0.5) * scale;
    const int lo = std::max(static_cast<int>(center - support + 0.5), lo_bound);
    const int hi = std::min(static_cast<int>(center + support + 0.5), hi_bound);
    const int n = std::max(hi - lo, 0);
    const double inv = 1.0 / filter_scale;
    double total = 0;
    for (int k = 0; k < n; ++k) {
      const double t = std::abs((k + lo - center + 0.5) * inv);
      w[k] = t < 1.0 ? 1.0 - t : 0.0;
      total += w[k];
    }
    for (int k = 0; k < n; ++k) a.weight[size_t(x) * a.taps + k] = static_cast<float>(total != 0 ? w[k] / total : 0.0);
    a.first[x] = lo;
    a.count[x] = n;
  }
  return a;
}

// Along x: `rows` rows of `in` (row r at in + r * in_stride; pixel x at (x - col0) * C) to out_w
// pixels each, into `out` (rows x out_w x C).
template <int C, typename T>
void horizontal(const T* in, size_t in_stride, int col0, int rows, const AxisTaps& ax, int out_w, float* out) {
  for (int y = 0; y < rows; ++y) {
    const T* row = in + size_t(y) * in_stride;
    float* dst = out + size_t(y) * out_w * C;
    for (int x = 0; x < out_w; ++x) {
      const float* w = ax.weight.data() + size_t(x) * ax.taps;
      const T* p = row + size_t(ax.first[x] - col0) * C;
      float acc[C] = {};
      for (int k = 0; k < ax.count[x]; ++k, p += C) {
        for (int c = 0; c < C; ++c) acc[c] += w[k] * static_cast<float>(p[c]);
      }
      for (int c = 0; c < C; ++c) dst[x * C + c] = acc[c];
    }
  }
}

template <typename T>
void horizontal_any(int channels, const T* in, size_t in_stride, int col0, int rows, const AxisTaps& ax, int out_w,
                    float* out) {
  switch (channels) {
    case 1: return horizontal<1>(in, in_stride, col0, rows, ax, out_w, out);
    case 2: return horizontal<2>(in, in_stride, col0, rows, ax, out_w, out);
    case 3: return horizontal<3>(in, in_stride, col0, rows, ax, out_w, out);
    default: return horizontal<4>(in, in_stride, col0, rows, ax, out_w, out);
  }
}

// Along y: out_h rows of row_len values, row y the taps' sum of rows first[y] - row0 ... of `in`
// (row r at in + r * in_stride). The inner loop runs along the row, so it vectorizes.
template <typename T>
void vertical(const T* in, size_t in_stride, int row0, const AxisTaps& ay, int out_h, size_t row_len, float* out) {
  for (int y = 0; y < out_h; ++y) {
    float* dst = out + size_t(y) * row_len;
    std::fill(dst, dst + row_len, 0.0f);
    const float* w = ay.weight.data() + size_t(y) * ay.taps;
    for (int k = 0; k < ay.count[y]; ++k) {
      const T* t = in + size_t(ay.first[y] + k - row0) * in_stride;
      const float wk = w[k];
      for (size_t i = 0; i < row_len; ++i) dst[i] += wk * static_cast<float>(t[i]);
    }
  }
}

// The first and one-past-the-last input pixel any output pixel's taps read.
std::pair<int, int> tap_span(const AxisTaps& a) {
  int end = a.first.front();
  for (size_t i = 0; i < a.first.size(); ++i) end = std::max(end, a.first[i] + a.count[i]);
  return {a.first.front(), end};
}

}  // namespace

SampleRng::SampleRng(uint64_t seed, int64_t epoch, int64_t index) {
  uint64_t k = mix(seed + kGolden);
  k = mix(k ^ (static_cast<uint64_t>(epoch) + 2 * kGolden));
  key_ = mix(k ^ (static_cast<uint64_t>(index) + 3 * kGolden));
}

uint64_t SampleRng::next() { return mix(key_ + (++counter_) * kGolden); }

double SampleRng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

float SampleRng::uniform_float(float lo, float hi) {
  const double x = static_cast<double>(next() & ((uint64_t(1) << 24) - 1)) * 0x1.0p-24;
  return static_cast<float>(x * (static_cast<double>(hi) - lo) + lo);
}

int64_t SampleRng::randint(int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo));
}

CropBox random_resized_crop_box(SampleRng& rng, int height, int width, const RandomResizedCropRange& range,
                                bool* fallback) {
  const double area = double(height) * width;
  // torch.log(torch.tensor(ratio)): float32 logs of the float32 ratios.
  const float log_lo = std::log(static_cast<float>(range.ratio_min));
  const float log_hi = std::log(static_cast<float>(range.ratio_max));
  if (fallback != nullptr) *fallback = false;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area =
        area * rng.uniform_float(static_cast<float>(range.scale_min), static_cast<float>(range.scale_max));
    const double aspect = std::exp(rng.uniform_float(log_lo, log_hi));  // float32 exp, then .item()
    const int w = round_half_even(std::sqrt(target_area * aspect));
    const int h = round_half_even(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t i = rng.randint(0, height - h + 1);
      const int64_t j = rng.randint(0, width - w + 1);
      return {double(i), double(j), double(h), double(w)};
    }
  }
  if (fallback != nullptr) *fallback = true;
  const double in_ratio = double(width) / double(height);
  int w = width, h = height;
  if (in_ratio < std::min(range.ratio_min, range.ratio_max)) {
    h = round_half_even(w / std::min(range.ratio_min, range.ratio_max));
  } else if (in_ratio > std::max(range.ratio_min, range.ratio_max)) {
    w = round_half_even(h * std::max(range.ratio_min, range.ratio_max));
  }
  return {double((height - h) / 2), double((width - w) / 2), double(h), double(w)};
}

int eval_resize_size(int size) { return round_half_even(size * 256.0 / 224.0); }

CropBox eval_crop_box(int height, int width, int size) {
  const int s = eval_resize_size(size);
  const int short_side = std::min(height, width), long_side = std::max(height, width);
  // torchvision's _compute_resized_output_size: int() truncates the longer side.
  const int new_long = static_cast<int>(double(s) * long_side / short_side);
  const int new_h = height <= width ? s : new_long;
  const int new_w = height <= width ? new_long : s;
  const int top = round_half_even((new_h - size) / 2.0), left = round_half_even((new_w - size) / 2.0);
  const double sy = double(height) / new_h, sx = double(width) / new_w;
  return {top * sy, left * sx, size * sy, size * sx};
}

void resample_bilinear(const Image& src, const CropBox& box, int out_h, int out_w, float* out, TapBounds bounds) {
  // A crop's pixels: the box rounded outwards (a box mapped into a reduced-scale decode is fractional).
  auto lo = [&](double at) { return bounds == TapBounds::image ? 0 : std::max(static_cast<int>(std::floor(at)), 0); };
  auto hi = [&](double at, int size) {
    return bounds == TapBounds::image ? size : std::min(static_cast<int>(std::ceil(at)), size);
  };
  const double right = box.left + box.width, bottom = box.top + box.height;
  const AxisTaps ax = axis_taps(lo(box.left), hi(right, src.width), box.left, right, out_w);
  const AxisTaps ay = axis_taps(lo(box.top), hi(bottom, src.height), box.top, bottom, out_h);
  const auto [row0, row_end] = tap_span(ay);
  const auto [col0, col_end] = tap_span(ax);
  const int c = src.channels;
  const size_t in_stride = size_t(src.width) * c;
  thread_local std::vector<float> tmp;  // grown, never shrunk: no allocation per image
  // The pass that shrinks more goes first on the 8-bit pixels: rows (vectorized) when the box is
  // taller than the output, else columns. Either order is the same filter; the choice depends on
  // the sizes alone, so a draw's bits are the same on every run.
  if (row_end - row0 > out_h) {
    const size_t span = size_t(col_end - col0) * c;
    if (tmp.size() < out_h * span) tmp.resize(out_h * span);
    vertical(src.pixels.data() + size_t(col0) * c, in_stride, 0, ay, out_h, span, tmp.data());
    horizontal_any(c, tmp.data(), span, col0, out_h, ax, out_w, out);
  } else {
    const size_t row_len = size_t(out_w) * c;
    if (tmp.size() < (row_end - row0) * row_len) tmp.resize((row_end - row0) * row_len);
    horizontal_any(c, src.pixels.data() + row0 * in_stride, in_stride, 0, row_end - row0, ax, out_w, tmp.data());
    vertical(tmp.data(), row_len, row0, ay, out_h, row_len, out);
  }
}

void normalize_to_chw(const float* hwc, int height, int width, int channels, bool flip, const std::vector<float>& mean,
                      const std::vector<float>& std, float* chw) {
  for (int c = 0; c < channels; ++c) {
    const float m = mean[c], s = std[c];
    for (int y = 0; y < height; ++y) {
      const float* row = hwc + size_t(y) * width * channels + c;
      float* dst = chw + (size_t(c) * height + y) * width;
      for (int x = 0; x < width; ++x) dst[x] = normalize_value(row[size_t(flip ? width - 1 - x : x) * channels], m, s);
    }
  }
}

void normalize_to_chw(const uint8_t* hwc, int height, int width, int channels, bool flip, const float* table,
                      float* chw) {
  for (int c = 0; c < channels; ++c) {
    const float* t = table + c * 256;
    for (int y = 0; y < height; ++y) {
      const uint8_t* row = hwc + size_t(y) * width * channels + c;
      float* dst = chw + (size_t(c) * height + y) * width;
      for (int x = 0; x < width; ++x) dst[x] = t[row[size_t(flip ? width - 1 - x : x) * channels]];
    }
  }
}

int jpeg_scale_for_box(const CropBox& box, int out_h, int out_w) {
  for (int d : {8, 4, 2}) {
    if (box.width / d >= out_w && box.height / d >= out_h) return d;
  }
  return 1;
}

CropBox scale_box(const CropBox& box, int scale_denom) {
  const double d = scale_denom;
  return {box.top / d, box.left / d, box.height / d, box.width / d};
}

}  // namespace train::datasets
