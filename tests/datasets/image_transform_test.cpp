// The augmentation's pieces (datasets/src/image_transform.cpp): the per-sample random stream, the
// RandomResizedCrop box against torchvision's algorithm, the evaluation box and the resample against
// ATen's antialiased bilinear interpolation, and the normalization against the IDX reader's ops.
#include "image_files.h"
#include "test_util.h"
#include "train/datasets/image_transform.h"

#include <ATen/ops/_upsample_bilinear2d_aa.h>
#include <ATen/ops/from_blob.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>

using train::datasets::CropBox;
using train::datasets::Image;
using train::datasets::SampleRng;

namespace {

std::vector<uint64_t> draws(uint64_t seed, int64_t epoch, int64_t index, int n = 8) {
  SampleRng rng(seed, epoch, index);
  std::vector<uint64_t> out(n);
  for (auto& v : out) v = rng.next();
  return out;
}

TEST(SampleRng, DependsOnSeedEpochAndIndexAlone) {
  EXPECT_EQ(draws(1, 2, 3), draws(1, 2, 3));
  EXPECT_NE(draws(1, 2, 3), draws(2, 2, 3));
  EXPECT_NE(draws(1, 2, 3), draws(1, 3, 3));
  EXPECT_NE(draws(1, 2, 3), draws(1, 2, 4));
  EXPECT_NE(draws(0, 0, 1), draws(0, 1, 0));  // the three numbers are not summed
  // The same draws from 4 threads, each taking indices in its own order, as from one.
  const int n = 2000;
  std::vector<std::vector<uint64_t>> serial(n), threaded(n);
  for (int i = 0; i < n; ++i) serial[i] = draws(42, 7, i);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < n / 4; ++k) {
        const int i = (n - 1 - k * 4 - t);
        threaded[i] = draws(42, 7, i);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(serial, threaded);
}

TEST(SampleRng, UniformsAreUniform) {
  // Fixed seeds: the same numbers every run; the bounds are many standard errors wide.
  double sum = 0, sum_f = 0;
  int64_t buckets[10] = {};
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    SampleRng rng(5, 0, i);
    const double u = rng.uniform();
    const float f = rng.uniform_float(2.0f, 3.0f);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ASSERT_GE(f, 2.0f);
    ASSERT_LE(f, 3.0f);
    sum += u, sum_f += f;
    ++buckets[int(u * 10)];
    const int64_t r = rng.randint(3, 6);
    ASSERT_GE(r, 3);
    ASSERT_LT(r, 6);
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NEAR(sum_f / n, 2.5, 0.005);
  for (int64_t b : buckets) EXPECT_NEAR(double(b) / n, 0.1, 0.005);
}

// Every box lies in the image with integer corners; a box of the 10 attempts has an area fraction
// in [0.08, 1] and a ratio in [3/4, 4/3] up to the rounding of its sides; the fallback is centered.
TEST(RandomResizedCrop, BoxesKeepTheirRanges) {
  for (auto [h, w] : {std::pair{375, 500}, std::pair{500, 333}, std::pair{28, 28}, std::pair{20, 400}}) {
    int fallbacks = 0;
    for (int i = 0; i < 5000; ++i) {
      SampleRng rng(3, 1, i);
      bool fallback = false;
      const CropBox b = train::datasets::random_resized_crop_box(rng, h, w, {}, &fallback);
      ASSERT_EQ(b.top, std::floor(b.top));
      ASSERT_EQ(b.left, std::floor(b.left));
      ASSERT_GE(b.top, 0);
      ASSERT_GE(b.left, 0);
      ASSERT_LE(b.top + b.height, h);
      ASSERT_LE(b.left + b.width, w);
      ASSERT_GT(b.height, 0);
      ASSERT_GT(b.width, 0);
      if (fallback) {
        ++fallbacks;
        const double ratio = b.width / b.height;
        EXPECT_TRUE(b.width == w || b.height == h);
        EXPECT_GE(ratio, 0.75 - 1.0 / std::min(b.width, b.height));
        EXPECT_LE(ratio, 4.0 / 3 + 1.0 / std::min(b.width, b.height));
        EXPECT_EQ(b.top, std::floor((h - b.height) / 2));
        EXPECT_EQ(b.left, std::floor((w - b.width) / 2));
        continue;
      }
      // The sides are rounded: the area and ratio bounds widen by half a pixel a side.
      const double area_hi = (b.height + 0.5) * (b.width + 0.5) / (double(h) * w);
      const double area_lo = (b.height - 0.5) * (b.width - 0.5) / (double(h) * w);
      EXPECT_GE(area_hi, 0.08) << b.height << "x" << b.width;
      EXPECT_LE(area_lo, 1.0);
      EXPECT_GE((b.width + 0.5) / (b.height - 0.5), 0.75);
      EXPECT_LE((b.width - 0.5) / (b.height + 0.5), 4.0 / 3);
    }
    if (h == 20) EXPECT_GT(fallbacks, 4000) << "a 20x400 image leaves the attempts no room";
    if (h == 375) EXPECT_LT(fallbacks, 50);
  }
}

// Summary statistics of the boxes over 20000 draws on a 375x500 image, ours and torchvision's
// (RandomResizedCrop.get_params with torch's generator): the same distribution, within a few
// standard errors (both sides use fixed seeds, so the numbers are the same every run).
TEST(RandomResizedCrop, BoxesAreDistributedAsTorchvisionDraws) {
  const std::string py = train::test::venv_python();
  if (py.empty()) GTEST_SKIP() << "no .venv with torch and torchvision (scripts/setup.sh makes it)";
  const char* script =
      "import torch, math\nfrom PIL import Image\nimport torchvision.transforms as T\n"
      "torch.manual_seed(0)\nimg = Image.new('RGB', (500, 375))\nn = 20000\ns = [0.0] * 6\n"
      "for _ in range(n):\n"
      "    i, j, h, w = T.RandomResizedCrop.get_params(img, (0.08, 1.0), (3 / 4, 4 / 3))\n"
      "    a = h * w / (375 * 500); r = math.log(w / h)\n"
      "    for k, v in enumerate((a, a * a, r, r * r, (i + h / 2) / 375, (j + w / 2) / 500)): s[k] += v / n\n"
      "print(' '.join(repr(v) for v in s))\n";
  const auto r = train::test::run_program({py, "-c", script}, {}, 240);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(r.out);
  double tv[6];
  for (double& v : tv) ASSERT_TRUE(in >> v) << r.out;
  double ours[6] = {};
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    SampleRng rng(0, 0, i);
    const CropBox b = train::datasets::random_resized_crop_box(rng, 375, 500);
    const double a = b.height * b.width / (375.0 * 500), lr = std::log(b.width / b.height);
    const double v[6] = {a, a * a, lr, lr * lr, (b.top + b.height / 2) / 375, (b.left + b.width / 2) / 500};
    for (int k = 0; k < 6; ++k) ours[k] += v[k] / n;
  }
  // Standard errors of a mean of 20000: area fraction (sd ~0.26) ~0.002, log ratio (sd ~0.17)
  // ~0.0012, centers (sd ~0.1) ~0.0007; the bounds are about 4 of them for the difference of two.
  const double tolerance[6] = {0.012, 0.012, 0.007, 0.004, 0.004, 0.004};
  const char* names[6] = {"area", "area^2", "log ratio", "log ratio^2", "center y", "center x"};
  for (int k = 0; k < 6; ++k) EXPECT_NEAR(ours[k], tv[k], tolerance[k]) << names[k];
}

// An image of random bytes, the hardest case for a resampler.
Image noise_image(int h, int w, int c, uint32_t seed) {
  Image im{h, w, c, std::vector<uint8_t>(size_t(h) * w * c)};
  std::mt19937 gen(seed);
  for (auto& p : im.pixels) p = uint8_t(gen() >> 24);
  return im;
}

// ATen's antialiased bilinear resize of `im`'s integer box [top, left, height, width] to out_h x
// out_w, as HWC floats: torchvision's resized_crop on a float tensor.
std::vector<float> aten_resized_crop(const Image& im, int top, int left, int height, int width, int out_h, int out_w) {
  at::Tensor t = at::from_blob(const_cast<uint8_t*>(im.pixels.data()), {im.height, im.width, im.channels}, at::kByte)
                     .to(at::kFloat)
                     .permute({2, 0, 1})
                     .slice(1, top, top + height)
                     .slice(2, left, left + width)
                     .unsqueeze(0)
                     .contiguous();
  at::Tensor r = at::_upsample_bilinear2d_aa(t, {out_h, out_w}, /*align_corners=*/false);
  r = r.squeeze(0).permute({1, 2, 0}).contiguous();
  return std::vector<float>(r.data_ptr<float>(), r.data_ptr<float>() + r.numel());
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, double(std::abs(a[i] - b[i])));
  return m;
}

// A crop then a resize (torchvision's resized_crop on a float tensor): downscaling (antialiased),
// upscaling, and both at once, against ATen's kernel, the same filter in float32 with its own
// rounding of the weights, so within a few thousandths of a level.
TEST(Resample, MatchesAtenAntialiasedBilinear) {
  const Image im = noise_image(90, 120, 3, 11);
  struct Case {
    int top, left, height, width, out_h, out_w;
  };
  for (const Case& c : {Case{0, 0, 90, 120, 32, 32}, Case{10, 20, 40, 50, 64, 80}, Case{5, 7, 80, 30, 20, 90},
                        Case{0, 0, 90, 120, 90, 120}, Case{33, 41, 17, 23, 224, 224}, Case{0, 0, 40, 50, 64, 80},
                        Case{0, 0, 90, 120, 180, 240}, Case{10, 20, 40, 50, 20, 25}}) {
    std::vector<float> ours(size_t(c.out_h) * c.out_w * 3);
    train::datasets::resample_bilinear(im, CropBox{double(c.top), double(c.left), double(c.height), double(c.width)},
                                       c.out_h, c.out_w, ours.data());
    const auto ref = aten_resized_crop(im, c.top, c.left, c.height, c.width, c.out_h, c.out_w);
    EXPECT_LT(max_abs_diff(ours, ref), 2e-3) << c.height << "x" << c.width << " -> " << c.out_h << "x" << c.out_w;
  }
  // A box the size of the output is the identity, exactly.
  std::vector<float> same(size_t(90) * 120 * 3);
  train::datasets::resample_bilinear(im, CropBox{0, 0, 90, 120}, 90, 120, same.data());
  for (size_t i = 0; i < same.size(); ++i) ASSERT_EQ(same[i], float(im.pixels[i]));
}

// torchvision's evaluation: Resize(S) of the whole image, then CenterCrop(size). Our box of the
// source, resampled directly with the image's pixels around it, gives the same pixels.
TEST(Resample, EvalBoxIsResizeThenCenterCrop) {
  EXPECT_EQ(train::datasets::eval_resize_size(224), 256);
  EXPECT_EQ(train::datasets::eval_resize_size(32), 37);  // round(36.57)
  for (auto [h, w, size] : {std::tuple{75, 100, 56}, std::tuple{100, 61, 32}, std::tuple{64, 64, 56}}) {
    const Image im = noise_image(h, w, 1, 5);
    const int s = train::datasets::eval_resize_size(size);
    const int new_h = h <= w ? s : int(double(s) * h / w), new_w = h <= w ? int(double(s) * w / h) : s;
    const auto resized = aten_resized_crop(im, 0, 0, h, w, new_h, new_w);
    const int top = int(std::nearbyint((new_h - size) / 2.0)), left = int(std::nearbyint((new_w - size) / 2.0));
    std::vector<float> ref;
    for (int y = top; y < top + size; ++y) {
      ref.insert(ref.end(), resized.begin() + size_t(y) * new_w + left, resized.begin() + size_t(y) * new_w + left + size);
    }
    std::vector<float> ours(size_t(size) * size);
    train::datasets::resample_bilinear(im, train::datasets::eval_crop_box(h, w, size), size, size, ours.data(),
                                       train::datasets::TapBounds::image);
    EXPECT_LT(max_abs_diff(ours, ref), 2e-3) << h << "x" << w << " -> " << size;
  }
}

// (x / 255 - mean) / std as the IDX reader's tensor ops compute it, on every byte and on floats.
TEST(Normalize, SameBitsAsTheTensorOps) {
  const double mean = 0.1307, std = 0.3081;
  std::vector<float> values(256 + 4096);
  std::mt19937 gen(9);
  std::uniform_real_distribution<float> level(0.0f, 255.0f);
  for (size_t i = 0; i < values.size(); ++i) values[i] = i < 256 ? float(i) : level(gen);
  const at::Tensor x = at::from_blob(values.data(), {int64_t(values.size())}, at::kFloat);
  const at::Tensor ref = x.clone().div_(255.0).sub_(mean).div_(std).contiguous();
  const float* xs = x.data_ptr<float>();
  const float* rs = ref.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float ours = train::datasets::normalize_value(xs[i], float(mean), float(std));
    ASSERT_EQ(std::memcmp(&ours, &rs[i], sizeof(float)), 0) << "x = " << xs[i] << ": " << ours << " vs " << rs[i];
  }
}

TEST(Normalize, ChwWithFlip) {
  // 2x3 pixels of 2 channels: channel c of pixel (y, x) is 10 * y + x + 100 * c.
  std::vector<float> hwc;
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 3; ++x) {
      for (int c = 0; c < 2; ++c) hwc.push_back(float(10 * y + x + 100 * c));
    }
  }
  std::vector<float> chw(12), flipped(12);
  const std::vector<float> mean = {0, 0}, std = {1, 1};
  train::datasets::normalize_to_chw(hwc.data(), 2, 3, 2, false, mean, std, chw.data());
  train::datasets::normalize_to_chw(hwc.data(), 2, 3, 2, true, mean, std, flipped.data());
  for (int c = 0; c < 2; ++c) {
    for (int y = 0; y < 2; ++y) {
      for (int x = 0; x < 3; ++x) {
        EXPECT_FLOAT_EQ(chw[(c * 2 + y) * 3 + x], (10 * y + x + 100 * c) / 255.0f);
        EXPECT_FLOAT_EQ(flipped[(c * 2 + y) * 3 + x], (10 * y + (2 - x) + 100 * c) / 255.0f);
      }
    }
  }
}

TEST(ReducedDct, ScaleForBox) {
  using train::datasets::jpeg_scale_for_box;
  EXPECT_EQ(jpeg_scale_for_box(CropBox{0, 0, 375, 500}, 224, 224), 1);   // 375 / 2 < 224
  EXPECT_EQ(jpeg_scale_for_box(CropBox{0, 0, 448, 448}, 224, 224), 2);   // exactly twice
  EXPECT_EQ(jpeg_scale_for_box(CropBox{0, 0, 1000, 2000}, 224, 224), 4);  // 1000 / 8 < 224
  EXPECT_EQ(jpeg_scale_for_box(CropBox{0, 0, 2000, 1800}, 224, 224), 8);
  EXPECT_EQ(jpeg_scale_for_box(CropBox{0, 0, 447.9, 900}, 224, 224), 1);
  const CropBox b = train::datasets::scale_box(CropBox{10, 20, 400, 600}, 4);
  EXPECT_DOUBLE_EQ(b.top, 2.5);
  EXPECT_DOUBLE_EQ(b.left, 5);
  EXPECT_DOUBLE_EQ(b.height, 100);
  EXPECT_DOUBLE_EQ(b.width, 150);
}

}  // namespace
