// Tests for the folders --data accepts (flat, torchvision's roots: MNIST/raw, FashionMNIST/raw,
// cifar-10-batches-py, cifar-10-batches-bin) and for the CIFAR-10 batches: the restricted
// unpickler on files written byte by byte (protocol 2 as cPickle, protocol 5 as Python 3.14) and by
// the venv's Python, every malformed file rejected with the file named, short batches warned
// about, and the log line saying where each split was read from.
#include "cifar_files.h"
#include "test_util.h"
#include "train/catalog/catalog.h"
#include "train/catalog/cifar_batch.h"
#include "train/datasets/cifar10.h"
#include "train/datasets/dataset.h"
#include "train/base/error.h"
#include "train/base/log.h"

#include <ATen/ops/equal.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <utility>

using train::datasets::Split;
using train::test::TempDir;
using train::test::write_file;

namespace {

void put_be32(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

// The four IDX files of `n` 28x28 images into dir, gzipped or raw (as torchvision leaves both).
void write_idx(const std::string& dir, int n, bool gz) {
  train::files::make_dirs(dir);
  for (const std::string split : {"train", "t10k"}) {
    std::vector<uint8_t> img, lab;
    put_be32(img, 2051);
    put_be32(img, n);
    put_be32(img, 28);
    put_be32(img, 28);
    for (int i = 0; i < n * 784; ++i) img.push_back(static_cast<uint8_t>(i % 251));
    put_be32(lab, 2049);
    put_be32(lab, n);
    for (int i = 0; i < n; ++i) lab.push_back(static_cast<uint8_t>(i % 10));
    for (const auto& [name, bytes] : {std::pair{split + "-images-idx3-ubyte", img}, std::pair{split + "-labels-idx1-ubyte", lab}}) {
      if (gz) {
        gzFile f = gzopen((dir + "/" + name + ".gz").c_str(), "wb");
        gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
        gzclose(f);
      } else {
        write_file(dir + "/" + name, bytes);
      }
    }
  }
}

// Expects loading cifar10 from `dir` to fail with a DataError holding every needle and a hint.
void expect_cifar_error(const std::string& dir, Split split, const std::vector<std::string>& needles) {
  try {
    train::datasets::load_dataset("cifar10", dir, split);
    ADD_FAILURE() << "expected train::DataError for " << dir;
  } catch (const train::DataError& e) {
    const std::string what = e.what();
    for (const auto& n : needles) EXPECT_NE(what.find(n), std::string::npos) << "missing '" << n << "' in: " << what;
    EXPECT_NE(what.find("expected"), std::string::npos) << what;
    EXPECT_NE(what.find("found"), std::string::npos) << what;
    EXPECT_FALSE(e.hint().empty()) << what;
  }
}

// A torchvision root with one pickled test batch holding `bytes`; returns the file's path.
std::string write_test_pickle(const TempDir& d, const std::vector<uint8_t>& bytes) {
  const std::string dir = d.file("data/cifar-10-batches-py");
  train::files::make_dirs(dir);
  write_file(dir + "/test_batch", bytes);
  return dir + "/test_batch";
}

}  // namespace

TEST(DataLayout, TorchvisionMnistRootsLoadRawAndGzip) {
  TempDir d("tv-mnist");
  write_idx(d.file("data/MNIST/raw"), 12, /*gz=*/true);
  write_idx(d.file("data/FashionMNIST/raw"), 7, /*gz=*/false);
  // torchvision's root, the dataset's folder and the raw folder itself all work.
  EXPECT_EQ(train::datasets::load_dataset("mnist", d.file("data"), Split::train).size(), 12);
  EXPECT_EQ(train::datasets::load_dataset("mnist", d.file("data/MNIST"), Split::test).size(), 12);
  EXPECT_EQ(train::datasets::load_dataset("mnist", d.file("data/MNIST/raw"), Split::train).size(), 12);
  auto fm = train::datasets::load_dataset("fashion-mnist", d.file("data"), Split::train);
  EXPECT_EQ(fm.size(), 7);
  EXPECT_EQ(fm.name, "fashion-mnist/train");
  EXPECT_EQ(fm.images.sizes(), (std::vector<int64_t>{7, 1, 28, 28}));
}

TEST(DataLayout, MissingDatasetListsEveryPlaceAndHowToGetIt) {
  TempDir d("tv-missing");
  train::files::make_dirs(d.file("data/MNIST/raw"));
  try {
    train::datasets::load_dataset("fashion-mnist", d.file("data"), Split::train);
    FAIL() << "expected DataError";
  } catch (const train::DataError& e) {
    const std::string w = e.what();
    for (const std::string& where : {d.file("data") + ": IDX", d.file("data/FashionMNIST/raw"), d.file("data/raw")}) {
      EXPECT_NE(w.find(where), std::string::npos) << where << " not in: " << w;
    }
    EXPECT_NE(w.find("train-images-idx3-ubyte"), std::string::npos) << w;
    EXPECT_NE(w.find("download=True"), std::string::npos) << w;
    EXPECT_NE(w.find("dataset-fashion-mnist"), std::string::npos) << w;
    EXPECT_NE(w.find("--dataset mnist"), std::string::npos) << w;  // data/MNIST is there: wrong --dataset
  }
  try {
    train::datasets::load_dataset("cifar10", d.file("data"), Split::train);
    FAIL() << "expected DataError";
  } catch (const train::DataError& e) {
    const std::string w = e.what();
    for (const std::string& where : {d.file("data/cifar-10-batches-py"), d.file("data/cifar-10-batches-bin"),
                                     std::string("data_batch_1.bin"), std::string("cifar-10-binary.tar.gz"),
                                     std::string("CIFAR10('data', download=True)")}) {
      EXPECT_NE(w.find(where), std::string::npos) << where << " not in: " << w;
    }
  }
}

TEST(DataLayout, IncompleteFolderNamesTheMissingFiles) {
  TempDir d("tv-partial");
  train::test::write_cifar_layout(d.file("data/cifar-10-batches-py"), /*binary=*/false, 3, 3);
  train::files::remove_file(d.file("data/cifar-10-batches-py/data_batch_4"));
  expect_cifar_error(d.file("data"), Split::train, {d.file("data/cifar-10-batches-py"), "but not data_batch_4"});
}

TEST(CifarPickle, BothLayoutsLoadTheSameSamples) {
  TempDir d("cifar-layouts");
  train::test::write_cifar_layout(d.file("data/cifar-10-batches-py"), /*binary=*/false, 6, 5);
  train::test::write_cifar_layout(d.file("data/cifar-10-batches-bin"), /*binary=*/true, 6, 5);
  train::test::write_cifar_layout(d.file("flat-bin"), /*binary=*/true, 6, 5);
  train::test::write_cifar_layout(d.file("flat-py"), /*binary=*/false, 6, 5);
  for (const Split split : {Split::train, Split::test}) {
    auto py = train::datasets::load_dataset("cifar10", d.file("data"), split);  // finds cifar-10-batches-bin first
    auto bin = train::datasets::load_cifar10(d.file("flat-bin"), split);
    auto flat_py = train::datasets::load_cifar10(d.file("flat-py"), split);
    auto tv_py = train::datasets::load_cifar10(d.file("data/cifar-10-batches-py"), split);
    ASSERT_EQ(bin.size(), split == Split::train ? 30 : 5);
    for (const auto* other : {&py, &flat_py, &tv_py}) {
      EXPECT_TRUE(at::equal(other->labels, bin.labels));
      EXPECT_TRUE(at::equal(other->images, bin.images));
    }
  }
  // The pixels are R, G, B planes, row-major: sample 0 of data_batch_1 has label 1, so its green
  // plane has the bright square (224..255) in rows 0-7, columns 8-15, on noise of 64..191.
  auto train_set = train::datasets::load_cifar10(d.file("flat-py"), Split::train, {1});
  EXPECT_EQ(train_set.labels[0].item<int64_t>(), 1);
  const auto pixel = [&](int c, int y, int x) { return train_set.images[0][c][y][x].item<float>(); };
  const float bright = (224 / 255.0f - 0.5f) / 0.5f, noise_max = (191 / 255.0f - 0.5f) / 0.5f;
  EXPECT_GE(pixel(1, 0, 8), bright);
  EXPECT_GE(pixel(1, 7, 15), bright);
  EXPECT_LE(pixel(1, 0, 7), noise_max);   // left of the square
  EXPECT_LE(pixel(1, 8, 8), noise_max);   // below it
  EXPECT_LE(pixel(0, 0, 8), noise_max);   // red and blue have no square
  EXPECT_LE(pixel(2, 0, 8), noise_max);
}

TEST(CifarPickle, FilesFromTheVenvsPythonLoad) {
  const std::string py = train::test::venv_python();
  if (py.empty()) GTEST_SKIP() << "no venv Python with torch (scripts/setup.sh makes it)";
  TempDir d("cifar-python");
  // What torchvision's files hold: protocol 2, byte-string keys, a numpy uint8 array. Python 3
  // writes bytes through _codecs.encode; protocol 4 (str keys) is what a user re-pickling gets.
  const std::string script = R"(
import pickle, sys, numpy as np
root, proto = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(3)
for name, n in [('data_batch_%d' % i, 4) for i in range(1, 6)] + [('test_batch', 3)]:
    labels = [int(x) for x in rng.integers(0, 10, n)]
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    key = (lambda k: k.encode()) if proto == 2 else (lambda k: k)
    d = {key('batch_label'): b'batch', key('labels'): labels, key('data'): data, key('filenames'): [b'a.png'] * n}
    with open(root + '/' + name, 'wb') as f:
        pickle.dump(d, f, protocol=proto)
    with open(root + '/' + name + '.bin', 'wb') as f:
        for l, row in zip(labels, data):
            f.write(bytes([l]) + row.tobytes())
)";
  for (const int proto : {2, 4}) {
    const std::string dir = d.file("p" + std::to_string(proto));
    train::files::make_dirs(dir);
    auto r = train::test::run_program({py, "-c", script, dir, std::to_string(proto)}, {}, 120);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // The same folder holds both layouts; the binary one is tried first, so compare explicitly.
    const std::string py_dir = d.file("py" + std::to_string(proto));
    train::files::make_dirs(py_dir);
    for (const std::string name : {"data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"}) {
      ASSERT_EQ(train::files::rename(dir + "/" + name, py_dir + "/" + name), "");
    }
    for (const Split split : {Split::train, Split::test}) {
      auto from_pickle = train::datasets::load_cifar10(py_dir, split);
      auto from_binary = train::datasets::load_cifar10(dir, split);
      ASSERT_EQ(from_pickle.size(), split == Split::train ? 20 : 3) << "protocol " << proto;
      EXPECT_TRUE(at::equal(from_pickle.labels, from_binary.labels)) << "protocol " << proto;
      EXPECT_TRUE(at::equal(from_pickle.images, from_binary.images)) << "protocol " << proto;
    }
  }
}

TEST(CifarPickle, WrongStructureIsRejectedNamingTheFileAndWhatWasFound) {
  TempDir d("cifar-structure");
  const auto samples = train::test::learnable_cifar(3, 1);
  train::test::PickleShape cifar100;
  cifar100.labels_key = "fine_labels";
  std::string path = write_test_pickle(d, train::test::cifar_pickle_bytes(samples, cifar100));
  expect_cifar_error(d.file("data"), Split::test, {path, "'data' and 'labels'", "'fine_labels'", "CIFAR-100"});

  train::test::PickleShape floats;
  floats.dtype = "f8";
  path = write_test_pickle(d, train::test::cifar_pickle_bytes(samples, floats));
  expect_cifar_error(d.file("data"), Split::test, {path, "dtype 'f8'"});

  // A pickle of a list, not a dict.
  path = write_test_pickle(d, {0x80, 0x02, ']', 'q', 0x00, '.'});
  expect_cifar_error(d.file("data"), Split::test, {path, "found a list"});
}

TEST(CifarPickle, WrongRecordSizeIsRejected) {
  TempDir d("cifar-size");
  train::test::PickleShape wide;
  wide.columns = 3000;
  // 3 rows of 3000 bytes: write pixel bytes to match the claimed shape.
  auto samples = train::test::learnable_cifar(3, 2);
  samples.pixels.resize(3 * 3000);
  const std::string path = write_test_pickle(d, train::test::cifar_pickle_bytes(samples, wide));
  expect_cifar_error(d.file("data"), Split::test, {path, "N x 3072", "found shape 3 x 3000"});

  // The binary version: records of 3074 bytes (CIFAR-100's two label bytes) are not whole records.
  train::files::make_dirs(d.file("bin"));
  write_file(d.file("bin/test_batch.bin"), std::vector<uint8_t>(3 * 3074, 1));
  expect_cifar_error(d.file("bin"), Split::test, {d.file("bin/test_batch.bin"), "whole records of 3073 bytes", "found 9222 bytes"});
}

TEST(CifarPickle, TruncatedFileIsRejected) {
  TempDir d("cifar-trunc");
  auto bytes = train::test::cifar_pickle_bytes(train::test::learnable_cifar(4, 3));
  for (const std::size_t keep : {bytes.size() / 2, bytes.size() - 1, std::size_t(1)}) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + keep);
    const std::string path = write_test_pickle(d, cut);
    expect_cifar_error(d.file("data"), Split::test, {path, "truncated"});
  }
  // Trailing bytes after STOP are as suspicious as missing ones.
  bytes.push_back('.');
  const std::string path = write_test_pickle(d, bytes);
  expect_cifar_error(d.file("data"), Split::test, {path, "1 trailing bytes"});
}

TEST(CifarPickle, LabelsOutOfRangeAreRejected) {
  TempDir d("cifar-label");
  auto samples = train::test::learnable_cifar(5, 4);
  samples.labels[3] = 10;
  const std::string path = write_test_pickle(d, train::test::cifar_pickle_bytes(samples));
  expect_cifar_error(d.file("data"), Split::test, {path, "labels in 0..9", "found 10 at index 3"});

  train::files::make_dirs(d.file("bin"));
  auto bin = train::test::cifar_binary_bytes(samples);
  write_file(d.file("bin/test_batch.bin"), bin);
  expect_cifar_error(d.file("bin"), Split::test, {d.file("bin/test_batch.bin"), "found 10 in record 3"});
}

TEST(CifarPickle, NothingAPickleAsksForIsRun) {
  TempDir d("cifar-hostile");
  const std::string marker = d.file("ran");
  // os.system('touch MARKER'): the classic pickle payload. Named, refused, never run.
  std::vector<uint8_t> evil = {0x80, 0x02};
  const std::string body = "cos\nsystem\nX";
  evil.insert(evil.end(), body.begin(), body.end());
  const std::string cmd = "touch " + marker;
  for (int s = 0; s < 32; s += 8) evil.push_back(static_cast<uint8_t>(cmd.size() >> s));
  evil.insert(evil.end(), cmd.begin(), cmd.end());
  for (uint8_t c : {uint8_t(0x85), uint8_t('R'), uint8_t('.')}) evil.push_back(c);
  std::string path = write_test_pickle(d, evil);
  expect_cifar_error(d.file("data"), Split::test, {path, "global 'os.system'", "at byte 2", "not run"});
  EXPECT_FALSE(train::files::exists(marker));

  // An opcode a CIFAR-10 batch never uses (INST, protocol 0's way to call a class).
  path = write_test_pickle(d, {0x80, 0x02, 'i', 'o', 's', '\n', 's', 'y', 's', 't', 'e', 'm', '\n', '.'});
  expect_cifar_error(d.file("data"), Split::test, {path, "opcode 0x69 'i'", "at byte 2"});
  EXPECT_FALSE(train::files::exists(marker));
}

// Python 3.14 pickles with protocol 5 by default: numpy writes the array through
// numpy._core.numeric._frombuffer with its bytes in-band (BYTEARRAY8), and memoizes everything.
TEST(CifarPickle, Protocol5AsPython314WritesItLoads) {
  TempDir d("cifar-proto5");
  const auto samples = train::test::learnable_cifar(7, 5);
  train::files::make_dirs(d.file("bin"));
  write_file(d.file("bin/test_batch.bin"), train::test::cifar_binary_bytes(samples));
  const auto reference = train::datasets::load_cifar10(d.file("bin"), Split::test);
  for (const std::string module : {"numpy._core.numeric", "numpy.core.numeric"}) {
    write_test_pickle(d, train::test::cifar_pickle5_bytes(samples, module));
    const auto loaded = train::datasets::load_dataset("cifar10", d.file("data"), Split::test);
    ASSERT_EQ(loaded.size(), 7) << module;
    EXPECT_TRUE(at::equal(loaded.labels, reference.labels)) << module;
    EXPECT_TRUE(at::equal(loaded.images, reference.images)) << module;
  }
  // Still nothing else: a _frombuffer from another module is a global that is named, not run.
  const std::string path = write_test_pickle(d, train::test::cifar_pickle5_bytes(samples, "os"));
  expect_cifar_error(d.file("data"), Split::test, {path, "global 'os._frombuffer'", "not run"});
}

// The fixture above is byte for byte what Python's pickle writes with protocol 5 (and numpy 2),
// and Python's own protocol-5 files of more than one frame (a buffer outside the frames) load too.
TEST(CifarPickle, Protocol5FixtureIsWhatPythonWrites) {
  const std::string py = train::test::venv_python();
  if (py.empty()) GTEST_SKIP() << "no venv Python with torch (scripts/setup.sh makes it)";
  TempDir d("cifar-proto5-py");
  const std::string script = R"(
import pickle, sys, numpy as np
samples, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
raw = open(samples, 'rb').read()
labels = list(raw[:n])
data = np.frombuffer(raw[n:], dtype=np.uint8).reshape(n, 3072).copy()
d = {'batch_label': 'training batch 1 of 5', 'labels': labels, 'data': data,
     'filenames': ['img_%d.png' % i for i in range(n)]}
with open(out, 'wb') as f:
    pickle.dump(d, f, protocol=5)
)";
  for (const int n : {3, 20, 1500}) {  // 1500: several frames, the pixels outside them, labels in 2 APPENDS
    const auto samples = train::test::learnable_cifar(n, 9);
    std::vector<uint8_t> raw = samples.labels;
    raw.insert(raw.end(), samples.pixels.begin(), samples.pixels.end());
    write_file(d.file("samples"), raw);
    const std::string dir = d.file("py" + std::to_string(n));
    train::files::make_dirs(dir);
    auto r = train::test::run_program({py, "-c", script, d.file("samples"), dir + "/test_batch", std::to_string(n)}, {}, 120);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string python_bytes = train::test::read_text(dir + "/test_batch");
    if (n <= 20) {
      const auto ours = train::test::cifar_pickle5_bytes(samples);
      EXPECT_EQ(python_bytes, std::string(ours.begin(), ours.end())) << n << " samples";
    }
    const auto loaded = train::datasets::load_cifar10(dir, Split::test);
    ASSERT_EQ(loaded.size(), n);
    train::files::make_dirs(dir + "-bin");
    write_file(dir + "-bin/test_batch.bin", train::test::cifar_binary_bytes(samples));
    const auto reference = train::datasets::load_cifar10(dir + "-bin", Split::test);
    EXPECT_TRUE(at::equal(loaded.labels, reference.labels)) << n;
    EXPECT_TRUE(at::equal(loaded.images, reference.images)) << n;
  }
}

// A whole file (it ends as a batch pickle does) whose length byte is corrupted is malformed, not
// truncated; a file that is cut short still says truncated.
TEST(CifarPickle, CorruptedLengthInAWholeFileIsMalformedNotTruncated) {
  TempDir d("cifar-malformed");
  const auto samples = train::test::learnable_cifar(4, 6);
  auto bytes = train::test::cifar_pickle_bytes(samples);
  // The pixels' BINSTRING: 'T' and the 4-byte length 4 x 3072, little-endian; its top byte made 0x7f.
  const std::vector<uint8_t> op = {'T', 0x00, 0x30, 0x00, 0x00};
  const auto at = std::search(bytes.begin(), bytes.end(), op.begin(), op.end());
  ASSERT_NE(at, bytes.end());
  *(at + 4) = 0x7f;
  std::string path = write_test_pickle(d, bytes);
  expect_cifar_error(d.file("data"), Split::test, {path, "malformed", "not truncated", "ends with STOP"});
  try {
    train::datasets::load_cifar10(d.file("data/cifar-10-batches-py"), Split::test);
  } catch (const train::DataError& e) {
    EXPECT_EQ(std::string(e.what()).find("truncated?"), std::string::npos) << e.what();
  }
  // The same for protocol 5's BYTEARRAY8.
  auto bytes5 = train::test::cifar_pickle5_bytes(samples);
  const std::vector<uint8_t> op5 = {0x96, 0x00, 0x30, 0x00, 0x00};
  const auto at5 = std::search(bytes5.begin(), bytes5.end(), op5.begin(), op5.end());
  ASSERT_NE(at5, bytes5.end());
  *(at5 + 8) = 0x01;  // the length's 8th byte: 2^56 bytes more
  path = write_test_pickle(d, bytes5);
  expect_cifar_error(d.file("data"), Split::test, {path, "malformed"});
  // Cut in the middle of the pixels: truncated.
  bytes5 = train::test::cifar_pickle5_bytes(samples);
  bytes5.resize(bytes5.size() / 2);
  path = write_test_pickle(d, bytes5);
  expect_cifar_error(d.file("data"), Split::test, {path, "truncated?"});
}

namespace {

/// Collects what the library logs while it lives.
class LogCapture {
 public:
  LogCapture() {
    train::log::set_sink([this](train::log::Level level, const std::string& line) {
      lines_.push_back({level, line});
    });
  }
  ~LogCapture() { train::log::set_sink(nullptr); }
  /// The lines at `level` that hold `part`.
  std::vector<std::string> find(train::log::Level level, const std::string& part) const {
    std::vector<std::string> out;
    for (const auto& [l, line] : lines_) {
      if (l == level && line.find(part) != std::string::npos) out.push_back(line);
    }
    return out;
  }

 private:
  std::vector<std::pair<train::log::Level, std::string>> lines_;
};

}  // namespace

// The official batches hold 10000 records each: a batch of fewer (cut at a record boundary) is
// used, with a warning naming the file and both counts; in either layout.
TEST(CifarBatches, FewerThan10000RecordsAreWarnedAbout) {
  TempDir d("cifar-short");
  train::test::write_cifar_layout(d.file("bin"), /*binary=*/true, 5, 3);
  train::test::write_cifar_layout(d.file("py"), /*binary=*/false, 5, 3);
  for (const std::string layout : {"bin", "py"}) {
    LogCapture log;
    EXPECT_EQ(train::datasets::load_cifar10(d.file(layout), Split::train).size(), 25);
    const std::string file = d.file(layout + "/data_batch_3" + (layout == "bin" ? ".bin" : ""));
    const auto warned = log.find(train::log::Level::warn, file + ": holds 5 records");
    ASSERT_EQ(warned.size(), 1u) << layout;
    EXPECT_NE(warned.front().find("each official CIFAR-10 batch holds 10000"), std::string::npos) << warned.front();
    EXPECT_NE(warned.front().find("re-extract"), std::string::npos) << warned.front();
    EXPECT_EQ(log.find(train::log::Level::warn, ": holds 5 records").size(), 5u) << "one warning per batch file";
  }
  // A whole batch says nothing.
  EXPECT_EQ(train::cifar::record_count_warning("data_batch_1.bin", 10000), "");
}

// With a sample limit the first file holds enough, but every file is still read and checked: a
// broken data_batch_5 fails a short run too.
TEST(CifarBatches, ABrokenLaterFileFailsWithASampleLimit) {
  TempDir d("cifar-limit");
  train::test::write_cifar_layout(d.file("bin"), /*binary=*/true, 6, 3);
  write_file(d.file("bin/data_batch_5.bin"), std::vector<uint8_t>(3073 * 2 + 100, 1));
  train::datasets::LoadOptions first_two;
  first_two.limit = 2;
  try {
    train::datasets::load_cifar10(d.file("bin"), Split::train, first_two);
    ADD_FAILURE() << "expected DataError for data_batch_5.bin";
  } catch (const train::DataError& e) {
    EXPECT_NE(std::string(e.what()).find(d.file("bin/data_batch_5.bin") + ": expected whole records"), std::string::npos)
        << e.what();
  }
  train::test::write_cifar_layout(d.file("py"), /*binary=*/false, 6, 3);
  auto cut = train::test::cifar_pickle_bytes(train::test::learnable_cifar(6, 5));
  cut.resize(cut.size() - 40);
  write_file(d.file("py/data_batch_5"), cut);
  EXPECT_EQ(train::datasets::load_cifar10(d.file("py"), Split::test).size(), 3);  // the test split has no data_batch_5
  try {
    train::datasets::load_cifar10(d.file("py"), Split::train, first_two);
    ADD_FAILURE() << "expected DataError for data_batch_5";
  } catch (const train::DataError& e) {
    EXPECT_NE(std::string(e.what()).find(d.file("py/data_batch_5") + ": expected"), std::string::npos) << e.what();
  }
}

// Each split's log line says which layout and folder it was read from, and how much was kept.
TEST(DataLayout, EachSplitLogsItsLayoutAndFolder) {
  TempDir d("layout-log");
  train::test::write_cifar_layout(d.file("data/cifar-10-batches-py"), /*binary=*/false, 4, 3);
  write_idx(d.file("data/FashionMNIST/raw"), 12, /*gz=*/true);
  LogCapture log;
  train::datasets::LoadOptions limit;
  limit.limit = 10;
  train::datasets::load_dataset("cifar10", d.file("data"), Split::train, limit);
  train::datasets::load_dataset("cifar10", d.file("data"), Split::test);
  train::datasets::load_dataset("fashion-mnist", d.file("data"), Split::test);
  EXPECT_EQ(log.find(train::log::Level::info,
                     "cifar10/train: 20 samples from 5 CIFAR-10 Python pickle files (data_batch_1, data_batch_2, "
                     "data_batch_3, data_batch_4, data_batch_5) in " + d.file("data/cifar-10-batches-py") +
                         "; the first 10 kept (sample limit)").size(), 1u);
  EXPECT_EQ(log.find(train::log::Level::info, "cifar10/test: 3 samples from 1 CIFAR-10 Python pickle file (test_batch) in " +
                                                  d.file("data/cifar-10-batches-py")).size(), 1u);
  EXPECT_EQ(log.find(train::log::Level::info,
                     "fashion-mnist/test: 12 samples from 2 IDX files (t10k-images-idx3-ubyte.gz, "
                     "t10k-labels-idx1-ubyte.gz) in " + d.file("data/FashionMNIST/raw")).size(), 1u);
}
