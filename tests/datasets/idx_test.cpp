// Tests for the IDX and CIFAR-10 readers on files the tests write, and on Debian's Fashion-MNIST.
#include "error_checks.h"
#include "test_util.h"
#include "train/datasets/cifar10.h"
#include "train/datasets/dataset.h"
#include "train/datasets/idx.h"
#include "train/base/error.h"

#include <ATen/ops/bincount.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>

using train::datasets::LoadOptions;
using train::datasets::Split;
using train::test::TempDir;
using train::test::write_file;

namespace {

void put_be32(std::vector<uint8_t>& b, uint32_t v) {
  b.push_back(v >> 24);
  b.push_back((v >> 16) & 255);
  b.push_back((v >> 8) & 255);
  b.push_back(v & 255);
}

std::vector<uint8_t> idx_images(uint32_t n, uint32_t rows, uint32_t cols, uint32_t magic = 2051) {
  std::vector<uint8_t> b;
  put_be32(b, magic);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (uint32_t i = 0; i < n * rows * cols; ++i) b.push_back(static_cast<uint8_t>((i * 7) % 256));
  return b;
}

std::vector<uint8_t> idx_labels(uint32_t n, uint32_t magic = 2049) {
  std::vector<uint8_t> b;
  put_be32(b, magic);
  put_be32(b, n);
  for (uint32_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(i % 10));
  return b;
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

// Expects load_idx to throw DataError whose message contains every needle and a hint.
void expect_data_error(const std::string& dir, const std::vector<std::string>& needles) {
  train::test::expect_hinted(train::test::error_of([&] { train::datasets::load_idx(dir, Split::train); }), needles);
}

}  // namespace

TEST(Idx, LoadsRawFilesAndNormalizes) {
  TempDir d("idx");
  write_file(d.file("train-images-idx3-ubyte"), idx_images(5, 28, 28));
  write_file(d.file("train-labels-idx1-ubyte"), idx_labels(5));
  auto ds = train::datasets::load_idx(d.path(), Split::train);
  ASSERT_EQ(ds.size(), 5);
  EXPECT_EQ(ds.images.sizes(), (std::vector<int64_t>{5, 1, 28, 28}));
  EXPECT_EQ(ds.labels[3].item<int64_t>(), 3);
  // pixel 1 of image 0 is 7: (7/255 - 0.1307) / 0.3081
  const double want = (7.0 / 255.0 - 0.1307) / 0.3081;
  EXPECT_NEAR(ds.images.view({-1})[1].item<float>(), want, 1e-6);
}

TEST(Idx, LoadsGzipAndAppliesLimit) {
  TempDir d("idxgz");
  write_gz(d.file("t10k-images-idx3-ubyte.gz"), idx_images(20, 4, 3));
  write_gz(d.file("t10k-labels-idx1-ubyte.gz"), idx_labels(20));
  LoadOptions o;
  o.limit = 7;
  auto ds = train::datasets::load_idx(d.path(), Split::test, o);
  EXPECT_EQ(ds.size(), 7);
  EXPECT_EQ(ds.images.sizes(), (std::vector<int64_t>{7, 1, 4, 3}));
}

TEST(Idx, MissingFileNamesBothCandidates) {
  TempDir d("idxmiss");
  expect_data_error(d.path(), {"train-images-idx3-ubyte", ".gz", d.path()});
}

TEST(Idx, WrongMagic) {
  TempDir d("idxmagic");
  write_file(d.file("train-images-idx3-ubyte"), idx_images(2, 28, 28, 2049));
  write_file(d.file("train-labels-idx1-ubyte"), idx_labels(2));
  expect_data_error(d.path(), {"train-images-idx3-ubyte", "magic number 2051", "found 2049"});
}

TEST(Idx, TruncatedImages) {
  TempDir d("idxtrunc");
  auto img = idx_images(10, 28, 28);
  img.resize(img.size() - 100);
  write_file(d.file("train-images-idx3-ubyte"), img);
  write_file(d.file("train-labels-idx1-ubyte"), idx_labels(10));
  expect_data_error(d.path(), {"train-images-idx3-ubyte", "expected 7856 bytes", "found 7756", "truncated"});
}

TEST(Idx, TruncatedGzipArchive) {
  TempDir d("idxtruncgz");
  write_gz(d.file("train-images-idx3-ubyte.gz"), idx_images(50, 28, 28));
  auto bytes = train::datasets::read_file_bytes(d.file("train-images-idx3-ubyte.gz"));  // sanity
  ASSERT_EQ(bytes.size(), 16u + 50 * 784);
  // Cut the compressed file in half.
  std::string gz = train::test::read_text(d.file("train-images-idx3-ubyte.gz"));
  write_file(d.file("train-images-idx3-ubyte.gz"), std::vector<uint8_t>(gz.begin(), gz.begin() + gz.size() / 2));
  write_file(d.file("train-labels-idx1-ubyte"), idx_labels(50));
  expect_data_error(d.path(), {"train-images-idx3-ubyte.gz"});
}

TEST(Idx, TrailingBytes) {
  TempDir d("idxtrail");
  auto img = idx_images(3, 28, 28);
  img.push_back(1);
  write_file(d.file("train-images-idx3-ubyte"), img);
  write_file(d.file("train-labels-idx1-ubyte"), idx_labels(3));
  expect_data_error(d.path(), {"trailing"});
}

TEST(Idx, CountMismatch) {
  TempDir d("idxcount");
  write_file(d.file("train-images-idx3-ubyte"), idx_images(4, 28, 28));
  write_file(d.file("train-labels-idx1-ubyte"), idx_labels(3));
  expect_data_error(d.path(), {"train-labels-idx1-ubyte", "expected 4 labels", "found 3"});
}

TEST(Idx, LabelOutOfRange) {
  TempDir d("idxlabel");
  auto lab = idx_labels(4);
  lab[8 + 2] = 12;
  write_file(d.file("train-images-idx3-ubyte"), idx_images(4, 28, 28));
  write_file(d.file("train-labels-idx1-ubyte"), lab);
  expect_data_error(d.path(), {"labels in 0..9", "found 12", "index 2"});
}

TEST(Idx, ImpossibleDimensions) {
  TempDir d("idxdims");
  std::vector<uint8_t> b;
  put_be32(b, 2051);
  put_be32(b, 1);
  put_be32(b, 0);
  put_be32(b, 28);
  write_file(d.file("train-images-idx3-ubyte"), b);
  write_file(d.file("train-labels-idx1-ubyte"), idx_labels(1));
  expect_data_error(d.path(), {"1 images of 0x28"});
}

TEST(Idx, EmptyFile) {
  TempDir d("idxempty");
  write_file(d.file("train-images-idx3-ubyte"), {});
  write_file(d.file("train-labels-idx1-ubyte"), idx_labels(1));
  expect_data_error(d.path(), {"header of 16 bytes", "found a file of 0 bytes"});
}

TEST(Idx, RealFashionMnist) {
  const std::string dir = train::test::fashion_mnist_dir();
  if (dir.empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  auto train_set = train::datasets::load_dataset("fashion-mnist", dir, Split::train);
  auto test_set = train::datasets::load_dataset("fashion-mnist", dir, Split::test);
  EXPECT_EQ(train_set.size(), 60000);
  EXPECT_EQ(test_set.size(), 10000);
  // Fashion-MNIST is balanced: 6000 training images per class.
  auto counts = at::bincount(train_set.labels);
  for (int k = 0; k < 10; ++k) EXPECT_EQ(counts[k].item<int64_t>(), 6000);
  // Normalized pixel range: (0 - m)/s .. (1 - m)/s
  EXPECT_NEAR(train_set.images.min().item<float>(), -0.1307 / 0.3081, 1e-5);
  EXPECT_NEAR(train_set.images.max().item<float>(), (1 - 0.1307) / 0.3081, 1e-5);
}

// ---- CIFAR-10 ----

namespace {
std::vector<uint8_t> cifar_records(int n, int label_offset = 0) {
  std::vector<uint8_t> b;
  for (int r = 0; r < n; ++r) {
    b.push_back(static_cast<uint8_t>((r + label_offset) % 10));
    for (int c = 0; c < 3; ++c)
      for (int p = 0; p < 1024; ++p) b.push_back(static_cast<uint8_t>(c == 0 ? 255 : c == 1 ? 0 : (p % 256)));
  }
  return b;
}
void write_cifar(const TempDir& d, int per_file) {
  for (int i = 1; i <= 5; ++i) write_file(d.file("data_batch_" + std::to_string(i) + ".bin"), cifar_records(per_file, i));
  write_file(d.file("test_batch.bin"), cifar_records(per_file));
}
}  // namespace

TEST(Cifar10, LoadsPlanesInOrder) {
  TempDir d("cifar");
  write_cifar(d, 4);
  auto ds = train::datasets::load_cifar10(d.path(), Split::train);
  ASSERT_EQ(ds.size(), 20);
  EXPECT_EQ(ds.images.sizes(), (std::vector<int64_t>{20, 3, 32, 32}));
  // R plane is 255 -> 1.0, G plane 0 -> -1.0, B plane pixel (row 0, col 5) is 5 -> 5/255*2-1
  EXPECT_FLOAT_EQ(ds.images[0][0][10][10].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(ds.images[0][1][10][10].item<float>(), -1.0f);
  EXPECT_NEAR(ds.images[0][2][0][5].item<float>(), 5.0 / 255.0 * 2 - 1, 1e-6);
  EXPECT_EQ(ds.labels[0].item<int64_t>(), 1);  // data_batch_1 starts with label 1
  EXPECT_EQ(ds.labels[4].item<int64_t>(), 2);  // data_batch_2 starts with label 2
  auto test_set = train::datasets::load_cifar10(d.path(), Split::test, {3});
  EXPECT_EQ(test_set.size(), 3);
}

TEST(Cifar10, FullSizeFile) {
  TempDir d("cifarfull");
  write_file(d.file("test_batch.bin"), cifar_records(10000));
  auto ds = train::datasets::load_cifar10(d.path(), Split::test);
  EXPECT_EQ(ds.size(), 10000);
}

TEST(Cifar10, Truncated) {
  TempDir d("cifartrunc");
  write_cifar(d, 2);
  auto b = cifar_records(2);
  b.resize(b.size() - 10);
  write_file(d.file("data_batch_3.bin"), b);
  try {
    train::datasets::load_cifar10(d.path(), Split::train);
    FAIL() << "expected DataError";
  } catch (const train::DataError& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("data_batch_3.bin"), std::string::npos) << w;
    EXPECT_NE(w.find("found 6136 bytes"), std::string::npos) << w;
  }
}

TEST(Cifar10, MissingAndBadLabel) {
  TempDir d("cifarmiss");
  EXPECT_THROW(train::datasets::load_cifar10(d.path(), Split::test), train::DataError);
  auto b = cifar_records(2);
  b[train::datasets::kCifarRecordBytes] = 42;  // second record's label
  write_file(d.file("test_batch.bin"), b);
  try {
    train::datasets::load_cifar10(d.path(), Split::test);
    FAIL() << "expected DataError";
  } catch (const train::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("found 42 in record 1"), std::string::npos) << e.what();
  }
}

TEST(Datasets, UnknownNameIsConfigError) {
  EXPECT_THROW(train::datasets::load_dataset("imagenet", "/tmp", Split::train), train::ConfigError);
}
