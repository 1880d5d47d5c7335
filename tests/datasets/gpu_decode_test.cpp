// --decode gpu (ImageDecode::gpu): the records the loader's threads write (the JPEG as it is with the
// CPU path's crop and flip, or the CPU path's pixels for what nvJPEG isn't given), on any machine;
// on a GPU, nvJPEG's stage against the CPU's full decode (labels, order and crops the same, pixels
// within the decoders' difference), alone and through the loader. Without a GPU those tests skip,
// saying so.
#include "data/loader.h"
#include "gpu_records.h"
#include "image_files.h"
#include "test_util.h"
#include "train/base/error.h"
#include "train/datasets/image_dataset.h"
#include "train/datasets/image_transform.h"

#include <ATen/Context.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/stack.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>

using train::datasets::ImageDataset;
using train::datasets::ImageDecode;
using train::datasets::ImageMode;
using train::datasets::ImageOptions;
namespace d = train::datasets::detail;

namespace train::test {
namespace {

ImageOptions gpu_options(ImageMode mode, int size) {
  ImageOptions o;
  o.mode = mode;
  o.size = size;
  o.decode = ImageDecode::gpu;
  return o;
}

d::RecordHeader header_of(const Sample& s) {
  d::RecordHeader r;
  std::memcpy(&r, s.input.const_data_ptr<uint8_t>(), sizeof(r));
  return r;
}

// The largest difference, in levels of 255, between a pixel record (bytes, not yet flipped) as the
// GPU normalizes and flips it and the CPU path's float32 sample `want` [3, size, size].
double worst_level_difference(const Sample& record, const Sample& want, const ImageOptions& o) {
  const int size = o.size;
  const bool flip = header_of(record).flip != 0;
  const uint8_t* px = record.input.const_data_ptr<uint8_t>() + d::kRecordHeaderBytes;
  const float* w = want.input.const_data_ptr<float>();
  double worst = 0;
  for (int ch = 0; ch < 3; ++ch) {
    for (int y = 0; y < size; ++y) {
      for (int x = 0; x < size; ++x) {
        const int sx = flip ? size - 1 - x : x;
        const float v = datasets::normalize_value(px[(y * size + sx) * 3 + ch], float(o.mean[ch]), float(o.std[ch]));
        worst = std::max(worst, std::abs(double(v) - w[(ch * size + y) * size + x]) * o.std[ch] * 255.0);
      }
    }
  }
  return worst;
}

// Colour JPEGs (4:2:0, 4:4:4, progressive), a grey JPEG, a PNG, labels i % 3.
std::shared_ptr<MemorySource> photo_like_source() {
  auto src = std::make_shared<MemorySource>();
  src->set_classes({"a", "b", "c"});
  const auto add = [&](std::vector<uint8_t> bytes, const std::string& name) {
    const int64_t i = src->size();
    src->add(std::move(bytes), i % 3, "mem/" + std::to_string(i) + "-" + name);
  };
  for (int i = 0; i < 6; ++i) {
    add(encode_jpeg(make_image(150 + 17 * i, 200 + 13 * i, 3, uint32_t(i)), 90, i % 2 ? TJSAMP_444 : TJSAMP_420), "colour.jpg");
  }
  add(encode_jpeg(make_image(180, 240, 3, 7), 90, TJSAMP_420, TJFLAG_PROGRESSIVE), "progressive.jpg");
  add(encode_jpeg(make_image(160, 120, 1, 8), 90), "grey.jpg");
  add(encode_png(make_image(130, 170, 3, 9)), "colour.png");
  return src;
}

TEST(GpuDecode, JpegFrameWalkFindsTheFrameAndNeverThrows) {
  const auto baseline = encode_jpeg(make_image(40, 50, 3), 90);
  const auto progressive = encode_jpeg(make_image(40, 50, 3), 90, TJSAMP_420, TJFLAG_PROGRESSIVE);
  const auto grey = encode_jpeg(make_image(40, 50, 1), 90);
  EXPECT_EQ(d::jpeg_frame(baseline.data(), baseline.size()).marker, 0xC0);
  EXPECT_EQ(d::jpeg_frame(baseline.data(), baseline.size()).components, 3);
  EXPECT_EQ(d::jpeg_frame(progressive.data(), progressive.size()).marker, 0xC2);
  EXPECT_EQ(d::jpeg_frame(grey.data(), grey.size()).components, 1);
  EXPECT_FALSE(d::gpu_decodable(d::jpeg_frame(grey.data(), grey.size())));
  // Cut inside its markers, or not a JPEG at all: no frame, no throw.
  for (size_t cut : {size_t(0), size_t(3), size_t(20)}) EXPECT_EQ(d::jpeg_frame(baseline.data(), cut).marker, 0) << cut;
  std::vector<uint8_t> junk(100, 0xFF);
  junk[1] = 0xD8;
  EXPECT_EQ(d::jpeg_frame(junk.data(), junk.size()).marker, 0);
}

// A colour JPEG travels as it is, with the box and flip the CPU path draws for the same (seed,
// epoch, index): RandomResizedCrop's box in full-size pixels, then the flip.
TEST(GpuDecode, ColourJpegsTravelEncodedWithTheCpuPathsCropAndFlip) {
  auto src = photo_like_source();
  ImageDataset ds(src, gpu_options(ImageMode::train, 64));
  EXPECT_EQ(ds.record_bytes(), int64_t(d::kRecordHeaderBytes) + 256 * 1024);
  int flips = 0;
  for (int64_t epoch : {0, 3}) {
    for (int64_t i = 0; i < 7; ++i) {
      const Sample s = ds.draw(i, SampleDraw{11, epoch});
      ASSERT_EQ(s.input.numel(), ds.record_bytes());
      const d::RecordHeader r = header_of(s);
      const EncodedImage e = src->read(i);
      ASSERT_EQ(r.magic, d::kRecordMagic);
      ASSERT_EQ(r.kind, d::RecordKind::jpeg) << e.where;
      EXPECT_EQ(r.index, i);
      EXPECT_EQ(r.progressive, i == 6 ? 1 : 0) << e.where;
      ASSERT_EQ(r.bytes, e.bytes.size());
      EXPECT_EQ(std::memcmp(s.input.const_data_ptr<uint8_t>() + d::kRecordHeaderBytes, e.bytes.data(), e.bytes.size()), 0);
      EXPECT_EQ(s.target.item<int64_t>(), e.label);
      const auto h = datasets::read_image_header(e.bytes.data(), e.bytes.size(), e.where);
      EXPECT_EQ(r.height, h.height);
      EXPECT_EQ(r.width, h.width);
      datasets::SampleRng rng(11, epoch, i);
      const datasets::CropBox box = datasets::random_resized_crop_box(rng, h.height, h.width);
      EXPECT_EQ(r.crop_top, int(box.top)) << e.where;
      EXPECT_EQ(r.crop_left, int(box.left));
      EXPECT_EQ(r.crop_height, int(box.height));
      EXPECT_EQ(r.crop_width, int(box.width));
      EXPECT_EQ(r.flip, rng.uniform() < 0.5 ? 1 : 0);
      EXPECT_EQ(r.resize_h, 0);
      flips += r.flip;
    }
  }
  EXPECT_GT(flips, 0);
  EXPECT_LT(flips, 14);
  EXPECT_EQ(ds.gpu_records(), 14);
  EXPECT_EQ(ds.cpu_records(), 0);
}

// What nvJPEG isn't given (a grey JPEG, a PNG, a JPEG over gpu_jpeg_bytes) travels as the CPU
// path's pixels, its bytes: normalized and flipped as the GPU will, they are the CPU path's sample.
TEST(GpuDecode, OtherImagesTravelAsTheCpuPathsPixels) {
  auto src = photo_like_source();
  ImageOptions o = gpu_options(ImageMode::train, 48);
  o.gpu_jpeg_bytes = src->read(1).bytes.size() - 1;  // image 1 (and any larger) goes the CPU's way
  ImageDataset gpu(src, o);
  ImageOptions c = o;
  c.decode = ImageDecode::cpu;
  ImageDataset cpu(src, c);
  for (int64_t i : {1, 7, 8}) {
    const Sample s = gpu.draw(i, SampleDraw{5, 2});
    const d::RecordHeader r = header_of(s);
    ASSERT_EQ(r.kind, d::RecordKind::pixels) << src->read(i).where;
    ASSERT_EQ(r.bytes, 48u * 48u * 3u);
    const Sample want = cpu.draw(i, SampleDraw{5, 2});
    EXPECT_EQ(worst_level_difference(s, want, o), 0.0) << src->read(i).where;
    EXPECT_EQ(s.target.item<int64_t>(), want.target.item<int64_t>());
  }
  EXPECT_EQ(gpu.cpu_records(), 3);
}

// A JPEG cut short never reaches nvJPEG (which may fill it in): the CPU's decode names it.
TEST(GpuDecode, ATruncatedJpegIsNamedByTheCpuDecode) {
  auto src = std::make_shared<MemorySource>();
  src->set_classes({"a"});
  auto bytes = encode_jpeg(make_image(100, 120, 3), 90);
  bytes.resize(bytes.size() / 2);
  src->add(bytes, 0, "mem/cut.jpg");
  ImageDataset ds(src, gpu_options(ImageMode::train, 32));
  try {
    (void)ds.draw(0, SampleDraw{1, 0});
    FAIL() << "a truncated JPEG was drawn";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("mem/cut.jpg"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ends early"), std::string::npos) << e.what();
  }
}

// Evaluation: the whole image resized (the shorter side to 256/224 of the size) then the center
// window, as eval_crop_box describes it in the source's pixels.
TEST(GpuDecode, EvalRecordsHoldTheResizeAndTheCenterWindow) {
  auto src = photo_like_source();
  ImageDataset ds(src, gpu_options(ImageMode::eval, 64));
  for (int64_t i = 0; i < 6; ++i) {
    const d::RecordHeader r = header_of(ds.draw(i, SampleDraw{1, 0}));
    const EncodedImage e = src->read(i);
    const datasets::CropBox box = datasets::eval_crop_box(r.height, r.width, 64);
    EXPECT_EQ(std::min(r.resize_h, r.resize_w), datasets::eval_resize_size(64)) << e.where;
    EXPECT_NEAR(r.crop_top * double(r.height) / r.resize_h, box.top, 1e-9) << e.where;
    EXPECT_NEAR(r.crop_left * double(r.width) / r.resize_w, box.left, 1e-9) << e.where;
    EXPECT_EQ(r.crop_height, 64);
    EXPECT_EQ(r.flip, 0);
  }
}

TEST(GpuDecode, TheStageIsOnlyForACudaDevice) {
  auto src = photo_like_source();
  ImageDataset gpu(src, gpu_options(ImageMode::train, 32));
  try {
    (void)gpu.device_stage(at::kCPU);
    FAIL() << "a CPU device took --decode gpu's stage";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--decode gpu"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("found cpu"), std::string::npos) << e.what();
  }
  ImageOptions c = gpu_options(ImageMode::train, 32);
  c.decode = ImageDecode::cpu;
  EXPECT_EQ(ImageDataset(src, c).device_stage(at::kCPU), nullptr);
  ImageOptions grey = c;
  grey.decode = ImageDecode::gpu;
  grey.channels = 1;
  grey.mean = {0.5};
  grey.std = {0.5};
  EXPECT_THROW(ImageDataset(src, grey), ConfigError);
}

// --decode cpu on a GPU: once the loader asks for a CUDA device's stage, the samples travel as the
// CPU path's pixels, its bytes (a quarter of float32's), normalized on the GPU: the CPU's samples.
TEST(GpuDecode, CpuDecodedImagesTravelToAGpuAsBytes) {
  auto src = photo_like_source();
  for (ImageMode mode : {ImageMode::train, ImageMode::eval}) {
    ImageOptions o = gpu_options(mode, 40);
    o.decode = ImageDecode::cpu;
    ImageDataset floats(src, o), bytes(src, o);
    const Sample before = bytes.draw(2, SampleDraw{4, 1});
    EXPECT_EQ(before.input.scalar_type(), at::kFloat);  // until a GPU's stage is asked for
    ASSERT_NE(bytes.device_stage(at::Device(at::kCUDA, 0)), nullptr);
    EXPECT_EQ(bytes.record_bytes(), int64_t(d::kRecordHeaderBytes) + 40 * 40 * 3);
    for (int64_t i = 0; i < 9; ++i) {
      const Sample s = bytes.draw(i, SampleDraw{4, 1});
      ASSERT_EQ(s.input.numel(), bytes.record_bytes());
      const d::RecordHeader r = header_of(s);
      ASSERT_EQ(r.kind, d::RecordKind::pixels) << src->read(i).where;
      const Sample want = floats.draw(i, SampleDraw{4, 1});
      EXPECT_EQ(worst_level_difference(s, want, o), 0.0) << src->read(i).where;
      EXPECT_EQ(s.target.item<int64_t>(), want.target.item<int64_t>());
    }
  }
}

#ifndef TRAIN_TEST_HAVE_NVJPEG
TEST(GpuDecode, ABuildWithoutNvjpegSaysSo) {
  auto src = photo_like_source();
  ImageDataset gpu(src, gpu_options(ImageMode::train, 32));
  try {
    (void)gpu.device_stage(at::Device(at::kCUDA, 0));
    FAIL() << "a build without nvjpeg.h made the stage";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("nvJPEG"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--decode cpu"), std::string::npos) << e.what();
  }
}
#endif

// ---- On a GPU ------------------------------------------------------------------------------------

#define SKIP_WITHOUT_NVJPEG_GPU()                                                                        \
  do {                                                                                                  \
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA GPU visible: --decode gpu's pixels are checked on a GPU machine"; \
  } while (0)

// The difference between two batches of normalized images, in levels of 255.
struct Difference {
  double mean = 0, max = 0;
};

Difference difference(const at::Tensor& a, const at::Tensor& b, const ImageOptions& o) {
  const at::Tensor scale = at::from_blob(std::vector<float>{float(o.std[0] * 255), float(o.std[1] * 255),
                                                            float(o.std[2] * 255)}.data(), {1, 3, 1, 1}, at::kFloat).clone();
  const at::Tensor diff = at::abs(a.cpu().sub(b.cpu())).mul(scale);
  return {diff.mean().item<double>(), diff.max().item<double>()};
}

// The batch of `ids` as the CPU's full decode gives it, and as the stage gives it from the records.
std::pair<at::Tensor, at::Tensor> both_ways(const std::shared_ptr<MemorySource>& src, ImageOptions o,
                                            const std::vector<int64_t>& ids, const SampleDraw& draw,
                                            std::vector<int64_t>* labels) {
  ImageOptions cpu_o = o;
  cpu_o.decode = ImageDecode::cpu;
  cpu_o.reduced_dct = false;  // the GPU decodes whole
  ImageDataset cpu(src, cpu_o), gpu(src, o);
  std::vector<at::Tensor> want, records, targets;
  for (int64_t i : ids) {
    want.push_back(cpu.draw(i, draw).input);
    const Sample s = gpu.draw(i, draw);
    records.push_back(s.input);
    targets.push_back(s.target);
    labels->push_back(s.target.item<int64_t>());
  }
  const at::Device cuda(at::kCUDA, 0);
  Batch host{at::stack(records).pin_memory(), at::stack(targets).pin_memory()};
  Batch out = gpu.device_stage(cuda)->finish(host, cuda);
  EXPECT_EQ(out.inputs.device(), cuda);
  EXPECT_TRUE(at::equal(out.targets.cpu(), at::stack(targets)));
  return {at::stack(want), out.inputs};
}

TEST(GpuDecodeOnGpu, PixelsAreTheCpuDecodesWithinTheDecodersDifference) {
  SKIP_WITHOUT_NVJPEG_GPU();
  auto src = photo_like_source();
  for (ImageMode mode : {ImageMode::train, ImageMode::eval}) {
    const ImageOptions o = gpu_options(mode, 64);
    std::vector<int64_t> labels;
    const auto [want, got] = both_ways(src, o, {0, 1, 2, 3, 4, 5, 6, 7, 8}, SampleDraw{3, 1}, &labels);
    const Difference diff = difference(want, got, o);
    std::cout << "[ measured ] " << datasets::image_mode_name(mode) << ": nvJPEG + GPU resample vs libjpeg-turbo + CPU resample: "
              << "mean |diff| " << diff.mean << ", max " << diff.max << " levels of 255" << std::endl;
    EXPECT_LT(diff.mean, 2.0) << datasets::image_mode_name(mode);
    EXPECT_LT(diff.max, 64.0) << datasets::image_mode_name(mode);
  }
}

void loader_against_cpu(ImageDecode decode);

// Through the loader (the side stream, pinned records, the stage), an epoch's batches carry the CPU
// loader's labels in its order, and its pixels: within the decoders' difference with --decode gpu,
// the CPU's values (to float32 rounding of the GPU's division) with --decode cpu.
TEST(GpuDecodeOnGpu, TheLoaderFeedsTheCpuLoadersLabelsInItsOrder) {
  SKIP_WITHOUT_NVJPEG_GPU();
  for (ImageDecode decode : {ImageDecode::gpu, ImageDecode::cpu}) {
    SCOPED_TRACE(decode == ImageDecode::gpu ? "--decode gpu" : "--decode cpu");
    loader_against_cpu(decode);
  }
}

void loader_against_cpu(ImageDecode decode) {
  auto src = photo_like_source();
  ImageOptions o = gpu_options(ImageMode::train, 48);
  o.decode = decode;
  o.reduced_dct = false;
  ImageOptions c = o;
  c.decode = ImageDecode::cpu;
  ImageDataset gpu(src, o), cpu(src, c);
  train::detail::LoaderOptions lo;
  lo.workers = 3;
  lo.device = at::Device(at::kCUDA, 0);
  train::detail::LoaderOptions co;
  co.workers = 2;
  auto g = train::detail::make_loader_feed(gpu, 1, 0, 9, lo);
  auto f = train::detail::make_loader_feed(cpu, 1, 0, 9, co);
  for (int epoch = 1; epoch <= 2; ++epoch) {
    const int64_t n = g->start_epoch(epoch, 0, 4, epoch < 2);
    ASSERT_EQ(f->start_epoch(epoch, 0, 4, epoch < 2), n);
    for (int64_t start = 0; start < n; start += 4) {
      const int64_t len = std::min<int64_t>(4, n - start);
      train::detail::StepBatch a = g->batch(start, len);
      train::detail::StepBatch b = f->batch(start, len);
      if (a.ready) a.ready();
      EXPECT_TRUE(at::equal(a.batch.targets.cpu(), b.batch.targets)) << "epoch " << epoch << " batch at " << start;
      const Difference diff = difference(b.batch.inputs, a.batch.inputs, o);
      EXPECT_LT(diff.mean, 2.0) << "epoch " << epoch << " batch at " << start;
      if (decode == ImageDecode::cpu) EXPECT_LE(diff.max, 1e-3) << "epoch " << epoch << " batch at " << start;
    }
  }
}

}  // namespace
}  // namespace train::test
