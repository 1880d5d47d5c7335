// Writing and reading the stripes file format (see stripes_dataset.h): a deterministic generator,
// a reader that checks the header and the file size before it trusts a byte, and the Dataset.
#include "stripes_dataset.h"

#include <train/base/error.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace example {
namespace {

constexpr double kPi = 3.14159265358979323846;

// splitmix64: a tiny generator whose output is the same on every platform (std::*_distribution
// is not), so the data files are byte-identical everywhere.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, n).
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  /// Uniform in [0, 1).
  double unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
};

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t get_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// One image of class `label`: a sine grating along the class's direction, with a random period,
// phase and contrast, plus noise.
void draw(SplitMix64& rng, int64_t label, int64_t h, int64_t w, std::vector<uint8_t>& out) {
  static const int kDirections[4][2] = {{0, 1}, {1, 0}, {1, 1}, {1, -1}};  // (dx, dy) per class
  const double period = 3.0 + 3.0 * rng.unit();
  const double phase = 2.0 * kPi * rng.unit();
  const double contrast = 10.0 + 40.0 * rng.unit();
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      const double t = static_cast<double>(kDirections[label][0] * x + kDirections[label][1] * y);
      const double noise = 90.0 * (rng.unit() + rng.unit() - 1.0);
      const double v = 128.0 + contrast * std::sin(2.0 * kPi * t / period + phase) + noise;
      out.push_back(static_cast<uint8_t>(std::lround(std::clamp(v, 0.0, 255.0))));
    }
  }
}

}  // namespace

void write_stripes(const std::string& path, int64_t count, uint64_t seed, int64_t height, int64_t width) {
  std::vector<uint8_t> bytes(kStripesMagic, kStripesMagic + 8);
  put_u32(bytes, kStripesVersion);
  put_u32(bytes, static_cast<uint32_t>(kStripesClasses));
  put_u32(bytes, static_cast<uint32_t>(height));
  put_u32(bytes, static_cast<uint32_t>(width));
  put_u64(bytes, static_cast<uint64_t>(count));
  SplitMix64 rng{seed};
  for (int64_t i = 0; i < count; ++i) {
    const int64_t label = rng.below(kStripesClasses);
    bytes.push_back(static_cast<uint8_t>(label));
    draw(rng, label, height, width, bytes);
  }
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    throw train::DataError(path + ": expected to write " + std::to_string(bytes.size()) + " bytes, found the write failed.",
                           "check that the folder exists and is writable, and the disk has room.");
  }
  std::filesystem::rename(tmp, path);
}

void make_stripes_data(const std::string& dir) {
  std::filesystem::create_directories(dir);
  if (!std::filesystem::exists(dir + "/train.stripes")) write_stripes(dir + "/train.stripes", 4096, /*seed=*/1);
  if (!std::filesystem::exists(dir + "/test.stripes")) write_stripes(dir + "/test.stripes", 1024, /*seed=*/2);
}

StripesDataset::StripesDataset(const std::string& path, int64_t limit) : name_(path) {
  const std::string hint = "regenerate the files with `custom_model --make-data DIR`, then train with --data DIR.";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw train::DataError(path + ": expected a stripes file, found nothing readable at that path.", hint);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto size = static_cast<int64_t>(bytes.size());
  if (size < kStripesHeaderBytes || !std::equal(kStripesMagic, kStripesMagic + 8, bytes.begin())) {
    throw train::DataError(path + ": expected a stripes file starting with the magic 'LTSTRIPE', found " +
                               std::to_string(size) + " bytes without it (another format?).", hint);
  }
  const uint64_t version = get_le(&bytes[8], 4);
  const auto classes = static_cast<int64_t>(get_le(&bytes[12], 4));
  const auto h = static_cast<int64_t>(get_le(&bytes[16], 4));
  const auto w = static_cast<int64_t>(get_le(&bytes[20], 4));
  const auto count = static_cast<int64_t>(get_le(&bytes[24], 8));
  if (version != kStripesVersion || classes != kStripesClasses || h <= 0 || w <= 0 || h > 4096 || w > 4096) {
    throw train::DataError(path + ": expected format version 1 with 4 classes and sane image sizes, found version " +
                               std::to_string(version) + ", " + std::to_string(classes) + " classes, " +
                               std::to_string(h) + "x" + std::to_string(w) + " images.", hint);
  }
  const int64_t record = 1 + h * w;
  if (count < 0 || count > (size - kStripesHeaderBytes) / record || size != kStripesHeaderBytes + count * record) {
    throw train::DataError(path + ": expected " + std::to_string(kStripesHeaderBytes + count * record) + " bytes for " +
                               std::to_string(count) + " images of " + std::to_string(h) + "x" + std::to_string(w) +
                               ", found " + std::to_string(size) + " (truncated?).", hint);
  }
  const int64_t n = limit > 0 ? std::min(limit, count) : count;
  auto records = at::from_blob(const_cast<uint8_t*>(bytes.data()) + kStripesHeaderBytes, {n, record}, at::kByte);
  labels_ = records.select(1, 0).to(at::kLong);  // to() copies, so the tensors outlive `bytes`
  if (n > 0 && labels_.max().item<int64_t>() >= classes) {
    throw train::DataError(path + ": expected labels below " + std::to_string(classes) + ", found " +
                               std::to_string(labels_.max().item<int64_t>()) + " (corrupt file?).", hint);
  }
  images_ = records.narrow(1, 1, h * w).to(at::kFloat).div(127.5).sub(1.0).reshape({n, 1, h, w}).contiguous();
}

train::Batch StripesDataset::get_batch(const at::Tensor& indices) {
  return {images_.index_select(0, indices), labels_.index_select(0, indices)};
}

void StripesDataset::to(const at::Device& device) {
  images_ = images_.to(device);
  labels_ = labels_.to(device);
}

}  // namespace example
