// The built-in datasets read sample by sample (train --stream): IdxDataset and Cifar10Dataset give
// the in-memory readers' tensors bit for bit (Debian's Fashion-MNIST, CIFAR-10 files in both
// layouts written here); .gz files and pickles are unpacked once, atomically, and reused while the
// source is unchanged; bad or missing files and an unwritable cache are said with the file and a hint.
#include "cifar_files.h"
#include "error_checks.h"
#include "test_util.h"
#include "train/base/error.h"
#include "train/base/files.h"
#include "train/datasets/cifar10.h"
#include "train/datasets/dataset.h"
#include "train/datasets/idx.h"

#include <ATen/ops/equal.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <utime.h>
#include <zlib.h>

#include <thread>

using train::datasets::Split;
using train::datasets::StreamOptions;

namespace train::test {
namespace {

void put_be32(std::vector<uint8_t>& b, uint32_t v) {
  for (int shift : {24, 16, 8, 0}) b.push_back(static_cast<uint8_t>((v >> shift) & 255));
}

// `n` images of rows x cols whose bytes run through all 256 values, and labels i % 10.
void write_idx(const std::string& dir, uint32_t n, uint32_t rows, uint32_t cols, bool gz) {
  std::vector<uint8_t> images, labels;
  put_be32(images, 2051);
  put_be32(images, n);
  put_be32(images, rows);
  put_be32(images, cols);
  for (uint32_t i = 0; i < n * rows * cols; ++i) images.push_back(static_cast<uint8_t>((i * 7 + i / 255) % 256));
  put_be32(labels, 2049);
  put_be32(labels, n);
  for (uint32_t i = 0; i < n; ++i) labels.push_back(static_cast<uint8_t>(i % 10));
  const auto write = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    if (!gz) return write_file(dir + "/" + name, bytes);
    gzFile f = gzopen((dir + "/" + name + ".gz").c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  };
  train::files::make_dirs(dir);
  write("train-images-idx3-ubyte", images);
  write("train-labels-idx1-ubyte", labels);
}

// Every sample of `stream` against row i of the in-memory split.
void expect_same_samples(train::SampleDataset& stream, const train::datasets::TensorDataset& memory) {
  ASSERT_EQ(stream.size(), memory.size());
  for (int64_t i = 0; i < stream.size(); ++i) {
    const train::Sample s = stream.get(i);
    ASSERT_TRUE(at::equal(s.input, memory.images[i])) << stream.name() << " sample " << i;
    ASSERT_EQ(s.target.dim(), 0);
    ASSERT_EQ(s.target.scalar_type(), at::kLong);
    ASSERT_EQ(s.target.item<int64_t>(), memory.labels[i].item<int64_t>()) << stream.name() << " sample " << i;
  }
}

// The unpack folder's files that are copies (no temporary left behind).
std::vector<std::string> copies_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const std::string& name : train::files::list_dir(dir)) {
    EXPECT_EQ(name.find(".tmp."), std::string::npos) << "a temporary file was left: " << name;
    out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

// Debian's Fashion-MNIST (.gz): every training image and label as load_idx gives them; the images
// and labels unpacked once into the folder asked for, and a second open reuses both copies.
TEST(Stream, FashionMnistGivesTheInMemoryReadersTensors) {
  const std::string fm = train::test::fashion_mnist_dir();
  if (fm.empty()) GTEST_SKIP() << "Fashion-MNIST's IDX files are not installed ($TRAIN_FASHION_MNIST_DIR, Debian's dataset-fashion-mnist)";
  TempDir d("streamfm");
  StreamOptions o;
  o.unpack_dir = d.file("unpacked");
  for (Split split : {Split::train, Split::test}) {
    const auto memory = train::datasets::load_dataset("fashion-mnist", fm, split);
    auto stream = train::datasets::open_stream("fashion-mnist", fm, split, o);
    EXPECT_EQ(stream->name(), memory.name);
    expect_same_samples(*stream, memory);
  }
  const std::vector<std::string> made = copies_in(o.unpack_dir);
  ASSERT_EQ(made.size(), 4u) << "images and labels of both splits";
  struct stat before {};
  ASSERT_EQ(::stat((o.unpack_dir + "/" + made[0]).c_str(), &before), 0);
  train::datasets::IdxDataset again(fm, Split::train, o, "fashion-mnist");
  EXPECT_EQ(copies_in(o.unpack_dir), made);
  EXPECT_EQ(train::files::basename(again.images_path()).rfind("train-images-idx3-ubyte.", 0), 0u) << again.images_path();
  struct stat after {};
  ASSERT_EQ(::stat((o.unpack_dir + "/" + made[0]).c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino) << "reused, not written again";
}

// Raw IDX files are mapped where they lie (nothing unpacked); --limit-train-samples' first N.
TEST(Stream, RawIdxFilesAreMappedInPlace) {
  TempDir d("streamraw");
  write_idx(d.file("data"), 300, 7, 5, /*gz=*/false);
  StreamOptions o;
  o.unpack_dir = d.file("unpacked");
  train::datasets::IdxDataset stream(d.file("data"), Split::train, o);
  EXPECT_EQ(stream.images_path(), d.file("data") + "/train-images-idx3-ubyte");
  EXPECT_FALSE(train::files::exists(o.unpack_dir));
  EXPECT_EQ(stream.rows(), 7);
  EXPECT_EQ(stream.cols(), 5);
  expect_same_samples(stream, train::datasets::load_idx(d.file("data"), Split::train));
  o.limit = 120;
  train::datasets::IdxDataset first(d.file("data"), Split::train, o);
  expect_same_samples(first, train::datasets::load_idx(d.file("data"), Split::train, {120}));
  EXPECT_THROW(first.get(120), train::DataError);
}

// A source changed since (a new modification time) gets a copy of its own; ranks that race on
// an empty folder (threads here, processes in a job) all end up with a whole copy.
TEST(Stream, ACopyIsRemadeForAChangedSourceAndRacesAreSafe) {
  TempDir d("streamrace");
  write_idx(d.file("data"), 200, 4, 4, /*gz=*/true);
  StreamOptions o;
  o.unpack_dir = d.file("unpacked");
  const auto memory = train::datasets::load_idx(d.file("data"), Split::train);
  std::vector<std::thread> ranks;
  std::vector<std::string> errors(6);
  for (size_t r = 0; r < errors.size(); ++r) {
    ranks.emplace_back([&, r] {
      try {
        train::datasets::IdxDataset stream(d.file("data"), Split::train, o);
        for (int64_t i = 0; i < stream.size(); ++i) {
          if (!at::equal(stream.get(i).input, memory.images[i])) errors[r] = "sample " + std::to_string(i) + " differs";
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(copies_in(o.unpack_dir).size(), 2u);
  const std::string images = d.file("data") + "/train-images-idx3-ubyte.gz";
  struct utimbuf t {1000000000, 1000000000};  // 2001: another modification time
  ASSERT_EQ(::utime(images.c_str(), &t), 0);
  train::datasets::IdxDataset changed(d.file("data"), Split::train, o);
  EXPECT_EQ(copies_in(o.unpack_dir).size(), 3u) << "a new copy of the images file, the labels' reused";
  expect_same_samples(changed, memory);
}

// CIFAR-10 in both layouts: the binary batches mapped in place, the pickles unpacked once into
// binary batches; both give load_cifar10's tensors, train and test.
TEST(Stream, Cifar10GivesTheInMemoryReadersTensorsInBothLayouts) {
  TempDir d("streamcifar");
  train::test::write_cifar_layout(d.file("bin/cifar-10-batches-bin"), /*binary=*/true, 40, 30);
  train::test::write_cifar_layout(d.file("py/cifar-10-batches-py"), /*binary=*/false, 40, 30);
  for (const std::string layout : {"bin", "py"}) {
    StreamOptions o;
    o.unpack_dir = d.file(layout + "-unpacked");
    for (Split split : {Split::train, Split::test}) {
      const auto memory = train::datasets::load_dataset("cifar10", d.file(layout), split);
      auto stream = train::datasets::open_stream("cifar10", d.file(layout), split, o);
      EXPECT_EQ(stream->name(), memory.name);
      expect_same_samples(*stream, memory);
    }
    EXPECT_EQ(copies_in(o.unpack_dir).size(), layout == "py" ? 6u : 0u) << layout;
  }
  StreamOptions o;
  o.limit = 70;  // into the second file
  train::datasets::Cifar10Dataset first(d.file("bin"), Split::train, o);
  expect_same_samples(first, train::datasets::load_cifar10(d.file("bin"), Split::train, {70}));
}

TEST(Stream, BadFilesAreNamedWithWhatWasExpectedAndFound) {
  TempDir d("streambad");
  // Missing: every place looked.
  expect_hinted(error_of([&] { train::datasets::open_stream("fashion-mnist", d.path(), Split::train); }),
                {d.path(), "train-images-idx3-ubyte"});
  // A truncated .gz: the file, and how far it unpacked.
  write_idx(d.file("gz"), 100, 28, 28, /*gz=*/true);
  const std::string gz = d.file("gz") + "/train-images-idx3-ubyte.gz";
  std::string bytes = train::files::read_text(gz);
  write_file(gz, std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<long>(bytes.size() / 2)));
  StreamOptions o;
  o.unpack_dir = d.file("unpacked");
  expect_hinted(error_of([&] { train::datasets::IdxDataset(d.file("gz"), Split::train, o); }), {gz, "truncated"});
  EXPECT_TRUE(copies_in(o.unpack_dir).empty()) << "no copy of a bad source, no temporary left";
  // The unpack folder can't be made (a file lies in its place): the folder, and the hint's way out.
  write_idx(d.file("ok"), 10, 28, 28, /*gz=*/true);
  write_file(d.file("blocked"), {1});
  o.unpack_dir = d.file("blocked") + "/unpacked";
  expect_hinted(error_of([&] { train::datasets::IdxDataset(d.file("ok"), Split::train, o); }),
                {o.unpack_dir, "--checkpoint-dir"});
  // A binary batch cut mid-record; a label of 12 in a whole one, found when its sample is read.
  train::test::write_cifar_layout(d.file("cifar"), /*binary=*/true, 20, 10);
  const std::string batch = d.file("cifar") + "/data_batch_3.bin";
  std::string records = train::files::read_text(batch);
  write_file(batch, std::vector<uint8_t>(records.begin(), records.end() - 100));
  expect_hinted(error_of([&] { train::datasets::Cifar10Dataset(d.file("cifar"), Split::train); }),
                {batch, "whole records of 3073 bytes", std::to_string(records.size() - 100) + " bytes"});
  records[3073 * 5] = 12;  // record 5's label
  write_file(batch, std::vector<uint8_t>(records.begin(), records.end()));
  train::datasets::Cifar10Dataset cifar(d.file("cifar"), Split::train);
  EXPECT_NO_THROW(cifar.get(44));
  expect_hinted(error_of([&] { cifar.get(45); }), {batch, "found 12 in record 5 (sample 45)"});
}

// The unpack folder: the checkpoint folder's, else the job's node-local storage.
TEST(Stream, UnpacksNextToTheCheckpoints) {
  EXPECT_EQ(train::datasets::default_unpack_dir("/scratch/ck"), "/scratch/ck/unpacked");
  const char* slurm = std::getenv("SLURM_TMPDIR");
  const char* tmp = std::getenv("TMPDIR");
  const std::string fallback = train::datasets::default_unpack_dir("");
  if (slurm != nullptr && *slurm != '\0') {
    EXPECT_EQ(fallback, std::string(slurm) + "/libtrain-unpacked");
  } else if (tmp != nullptr && *tmp != '\0') {
    EXPECT_EQ(fallback, std::string(tmp) + "/libtrain-unpacked");
  } else {
    EXPECT_EQ(fallback.rfind("/tmp/libtrain-unpacked-", 0), 0u) << fallback;
  }
}

}  // namespace train::test
