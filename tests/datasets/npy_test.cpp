// The memory-mapped .npy reader and NpyDataset (datasets/src/npy.cpp) on files this test writes:
// every dtype, the three format versions, the conversions, each bad input's message; numpy's own
// files where the venv has numpy; and Fashion-MNIST as uint8 arrays against the IDX reader, bit for bit.
#include "error_checks.h"
#include "test_util.h"
#include "train/base/error.h"
#include "train/base/files.h"
#include "train/datasets/dataset.h"
#include "train/datasets/idx.h"
#include "train/datasets/npy.h"

#include <ATen/ops/empty.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <thread>

using train::datasets::NpyArray;
using train::datasets::NpyDataset;
using train::datasets::NpyDtype;
using train::datasets::NpyOptions;

namespace train::test {
namespace {


std::string shape_literal(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// numpy's layout, written here from the format's description: magic, version, header length
// (2 bytes in 1.0, 4 in 2.0 and 3.0), the dict padded with spaces and a newline to a multiple of
// 64 bytes, the data. `dict` replaces the dict when given.
std::vector<uint8_t> npy_bytes(const std::string& descr, const std::vector<int64_t>& shape, const void* data,
                               size_t data_bytes, int version = 1, const std::string& dict = "") {
  std::string header = dict.empty() ? "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " +
                                          shape_literal(shape) + ", }"
                                    : dict;
  const size_t preamble = version == 1 ? 10 : 12;
  while ((preamble + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(version), 0};
  const uint64_t len = header.size();
  for (size_t i = 0; i < preamble - 8; ++i) out.push_back(static_cast<uint8_t>(len >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  const auto* d = static_cast<const uint8_t*>(data);
  out.insert(out.end(), d, d + data_bytes);
  return out;
}

template <typename T>
std::string write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
                      const std::vector<T>& values, int version = 1) {
  train::test::write_file(path, npy_bytes(descr, shape, values.data(), values.size() * sizeof(T), version));
  return path;
}

std::vector<uint8_t> bytes_of(const at::Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  return std::vector<uint8_t>(p, p + t.numel() * t.element_size());
}

}  // namespace

TEST(NpyArray, ReadsEveryDtypeAndItsBytes) {
  train::test::TempDir dir("npy");
  struct Case {
    std::string descr;
    NpyDtype dtype;
    int bytes;
  };
  const std::vector<Case> cases = {
      {"|b1", NpyDtype::b1, 1}, {"|i1", NpyDtype::i1, 1}, {"|u1", NpyDtype::u1, 1}, {"<i2", NpyDtype::i2, 2},
      {"<u2", NpyDtype::u2, 2}, {"<i4", NpyDtype::i4, 4}, {"<u4", NpyDtype::u4, 4}, {"<i8", NpyDtype::i8, 8},
      {"<u8", NpyDtype::u8, 8}, {"<f2", NpyDtype::f2, 2}, {"<f4", NpyDtype::f4, 4}, {"<f8", NpyDtype::f8, 8},
  };
  for (const auto& c : cases) {
    std::vector<uint8_t> data(3 * 5 * c.bytes);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 37 + 11);
    const std::string path = dir.file("a" + c.descr.substr(1) + ".npy");
    train::test::write_file(path, npy_bytes(c.descr, {3, 5}, data.data(), data.size()));
    NpyArray a(path);
    EXPECT_EQ(a.dtype(), c.dtype) << c.descr;
    EXPECT_EQ(a.descr(), c.descr);
    EXPECT_EQ(train::datasets::npy_descr(c.dtype), c.descr);
    EXPECT_EQ(a.item_bytes(), c.bytes);
    EXPECT_EQ(a.shape(), (std::vector<int64_t>{3, 5}));
    EXPECT_EQ(a.shape_string(), "(3, 5)");
    EXPECT_EQ(a.rows(), 3);
    EXPECT_EQ(a.row_elements(), 5);
    EXPECT_EQ(a.row_bytes(), 5u * c.bytes);
    EXPECT_EQ(a.data_offset() % 64, 0u);
    EXPECT_EQ(a.version(), 1);
    ASSERT_NE(a.data(), nullptr);
    EXPECT_EQ(std::memcmp(a.data(), data.data(), data.size()), 0) << c.descr;
    EXPECT_EQ(std::memcmp(a.row(2), data.data() + 2 * 5 * c.bytes, 5 * c.bytes), 0) << c.descr;
  }
}

TEST(NpyArray, ReadsVersionsTwoAndThreeAndOtherHeaderSpellings) {
  train::test::TempDir dir("npy");
  const std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.5f};
  for (int version : {2, 3}) {
    NpyArray a(write_npy(dir.file("v" + std::to_string(version) + ".npy"), "<f4", {2, 3}, v, version));
    EXPECT_EQ(a.version(), version);
    EXPECT_EQ(a.shape(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a.data_offset() % 64, 0u);
    float second_row[3];
    std::memcpy(second_row, a.row(1), sizeof(second_row));
    EXPECT_EQ(second_row[0], 0.0f);
    EXPECT_EQ(second_row[2], 8.5f);
  }
  // Double quotes, keys in another order, no trailing comma, Python 2's 3L, '=' (native order),
  // and a 1-d and a 0-d shape.
  const std::vector<std::pair<std::string, std::vector<int64_t>>> dicts = {
      {"{\"shape\": (6,), \"fortran_order\": False, \"descr\": \"<f4\"}", {6}},
      {"{'descr': '=f4', 'fortran_order': False, 'shape': (3L, 2L)}", {3, 2}},
      {"{'descr':'<f4','fortran_order':False,'shape':(1,6),}", {1, 6}},
  };
  for (size_t i = 0; i < dicts.size(); ++i) {
    const std::string path = dir.file("d" + std::to_string(i) + ".npy");
    train::test::write_file(path, npy_bytes("", {}, v.data(), v.size() * 4, 1, dicts[i].first));
    NpyArray a(path);
    EXPECT_EQ(a.shape(), dicts[i].second) << dicts[i].first;
    EXPECT_EQ(a.dtype(), NpyDtype::f4);
  }
  const std::vector<double> one = {2.5};
  NpyArray scalar(write_npy(dir.file("s.npy"), "<f8", {}, one));
  EXPECT_TRUE(scalar.shape().empty());
  EXPECT_EQ(scalar.shape_string(), "()");
  EXPECT_EQ(scalar.rows(), 1);
}

TEST(NpyDataset, FloatInputsAsTheyAreIntegerTargetsAsInt64) {
  train::test::TempDir dir("npy");
  std::vector<float> x(4 * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i) - 0.55f;
  const std::vector<int32_t> y = {3, 0, -1, 2147483647};
  NpyDataset ds(write_npy(dir.file("x.npy"), "<f4", {4, 3}, x), write_npy(dir.file("y.npy"), "<i4", {4}, y));
  EXPECT_EQ(ds.size(), 4);
  EXPECT_EQ(ds.name(), "npy:" + dir.file("x.npy"));
  for (int64_t i = 0; i < 4; ++i) {
    train::Sample s = ds.get(i);
    ASSERT_EQ(s.input.scalar_type(), at::kFloat);
    ASSERT_EQ(s.input.sizes(), at::IntArrayRef({3}));
    for (int j = 0; j < 3; ++j) EXPECT_EQ(s.input.data_ptr<float>()[j], x[i * 3 + j]);
    ASSERT_EQ(s.target.scalar_type(), at::kLong);
    ASSERT_EQ(s.target.dim(), 0);
    EXPECT_EQ(s.target.item<int64_t>(), y[i]);
  }
}

TEST(NpyDataset, ConvertsEachDtype) {
  train::test::TempDir dir("npy");
  // float64 and float16 inputs stay in their dtype; int16 and uint64 inputs become int64.
  const std::vector<double> xd = {1e-300, -3.5, 2.0, 4.0};
  const std::vector<uint16_t> y16 = {65535, 0};
  NpyDataset d64(write_npy(dir.file("xd.npy"), "<f8", {2, 2}, xd), write_npy(dir.file("y16.npy"), "<u2", {2}, y16));
  EXPECT_EQ(d64.get(0).input.scalar_type(), at::kDouble);
  EXPECT_EQ(d64.get(0).input.data_ptr<double>()[0], 1e-300);
  EXPECT_EQ(d64.get(0).target.item<int64_t>(), 65535);

  const std::vector<uint16_t> xh = {0x3C00, 0xC000};  // 1.0 and -2.0 as float16
  const std::vector<int8_t> y8 = {-5, 7};
  NpyDataset dh(write_npy(dir.file("xh.npy"), "<f2", {2, 1}, xh), write_npy(dir.file("y8.npy"), "|i1", {2}, y8));
  EXPECT_EQ(dh.get(1).input.scalar_type(), at::kHalf);
  EXPECT_EQ(dh.get(1).input.to(at::kFloat).item<float>(), -2.0f);
  EXPECT_EQ(dh.get(0).target.item<int64_t>(), -5);

  const std::vector<int16_t> xi = {-32768, 32767, 5, 6};
  const std::vector<uint64_t> yu = {uint64_t{1} << 62, 9};
  NpyDataset di(write_npy(dir.file("xi.npy"), "<i2", {2, 2}, xi), write_npy(dir.file("yu.npy"), "<u8", {2}, yu));
  train::Sample s = di.get(0);
  EXPECT_EQ(s.input.scalar_type(), at::kLong);
  EXPECT_EQ(s.input.data_ptr<int64_t>()[0], -32768);
  EXPECT_EQ(s.input.data_ptr<int64_t>()[1], 32767);
  EXPECT_EQ(s.target.item<int64_t>(), int64_t{1} << 62);

  // Float targets of [N, 2] are taken as they are (a regression).
  const std::vector<float> yf = {0.25f, -1.0f, 8.0f, 9.5f};
  NpyDataset df(dir.file("xd.npy"), write_npy(dir.file("yf.npy"), "<f4", {2, 2}, yf));
  train::Sample r = df.get(1);
  EXPECT_EQ(r.target.scalar_type(), at::kFloat);
  ASSERT_EQ(r.target.sizes(), at::IntArrayRef({2}));
  EXPECT_EQ(r.target.data_ptr<float>()[0], 8.0f);
  EXPECT_EQ(r.target.data_ptr<float>()[1], 9.5f);

  // A uint64 above int64's range is named, not wrapped to a negative label.
  const std::vector<uint64_t> too_big = {~uint64_t{0}, 1};
  NpyDataset dbig(dir.file("xd.npy"), write_npy(dir.file("ybig.npy"), "<u8", {2}, too_big));
  expect_message(error_of([&] { dbig.get(0); }), {dir.file("ybig.npy"), "sample 0", "int64"});
}

TEST(NpyDataset, Uint8InputsAreNormalizedAsTheIdxReaderDoes) {
  // Every byte value, through NpyDataset and through the IDX reader's own ops: the same bits.
  train::test::TempDir dir("npy");
  std::vector<uint8_t> x(256);
  for (int v = 0; v < 256; ++v) x[v] = static_cast<uint8_t>(255 - v);
  const std::vector<uint8_t> y = {1, 2, 3, 4};
  NpyDataset ds(write_npy(dir.file("x.npy"), "|u1", {4, 8, 8}, x), write_npy(dir.file("y.npy"), "|u1", {4}, y));
  at::Tensor raw = at::empty({4, 8, 8}, at::kByte);
  std::memcpy(raw.data_ptr(), x.data(), x.size());
  at::Tensor want = raw.to(at::kFloat).div_(255.0).sub_(train::datasets::kMnistMean).div_(train::datasets::kMnistStd);
  for (int64_t i = 0; i < 4; ++i) {
    train::Sample s = ds.get(i);
    ASSERT_EQ(s.input.scalar_type(), at::kFloat);
    ASSERT_EQ(s.input.sizes(), at::IntArrayRef({8, 8}));
    EXPECT_EQ(bytes_of(s.input), bytes_of(want[i].contiguous())) << "sample " << i;
    EXPECT_EQ(s.target.item<int64_t>(), y[i]);
  }
  // Mean 0 and std 1: plain x / 255.
  NpyOptions plain;
  plain.uint8_mean = 0;
  plain.uint8_std = 1;
  NpyDataset scaled(dir.file("x.npy"), dir.file("y.npy"), plain);
  EXPECT_EQ(scaled.get(0).input.data_ptr<float>()[0], 1.0f);
  EXPECT_EQ(scaled.get(3).input.data_ptr<float>()[63], 0.0f);
  EXPECT_EQ(scaled.get(0).input.data_ptr<float>()[1], 254.0f / 255.0f);
  NpyOptions zero_std;
  zero_std.uint8_std = 0;
  expect_message(error_of<train::ConfigError>([&] { NpyDataset(dir.file("x.npy"), dir.file("y.npy"), zero_std); }),
                 {dir.file("x.npy"), "std 0"});
}

TEST(NpyDataset, InputShapeReshapesEachSample) {
  train::test::TempDir dir("npy");
  std::vector<uint8_t> x(2 * 4 * 6, 7);
  const std::vector<int64_t> y = {0, 1};
  write_npy(dir.file("x.npy"), "|u1", {2, 4, 6}, x);
  write_npy(dir.file("y.npy"), "<i8", {2}, y);
  NpyOptions o;
  o.input_shape = {1, 4, 6};
  NpyDataset ds(dir.file("x.npy"), dir.file("y.npy"), o);
  EXPECT_EQ(ds.get(1).input.sizes(), at::IntArrayRef({1, 4, 6}));
  o.input_shape = {1, 5, 6};
  expect_message(error_of<train::ConfigError>([&] { NpyDataset(dir.file("x.npy"), dir.file("y.npy"), o); }),
                 {dir.file("x.npy"), "expected 24 elements", "(2, 4, 6)", "found (1, 5, 6) of 30"});
}

TEST(NpyDataset, NumClassesChecksEachTarget) {
  train::test::TempDir dir("npy");
  const std::vector<float> x = {1, 2, 3};
  const std::vector<int64_t> y = {0, 9, 10};
  write_npy(dir.file("x.npy"), "<f4", {3, 1}, x);
  write_npy(dir.file("y.npy"), "<i8", {3}, y);
  NpyOptions o;
  o.num_classes = 10;
  NpyDataset ds(dir.file("x.npy"), dir.file("y.npy"), o);
  EXPECT_EQ(ds.get(1).target.item<int64_t>(), 9);
  expect_message(error_of([&] { ds.get(2); }), {dir.file("y.npy"), "expected class indices in 0..9", "found 10", "sample 2"});
  // Labels saved as floats, with classes asked for: refused at once.
  const std::vector<float> yf = {0, 1, 2};
  write_npy(dir.file("yf.npy"), "<f4", {3}, yf);
  expect_message(error_of([&] { NpyDataset(dir.file("x.npy"), dir.file("yf.npy"), o); }),
                 {dir.file("yf.npy"), "integer class indices", "'<f4'"});
}

TEST(NpyDataset, BadFilesAreNamedWithWhatWasExpectedAndFound) {
  train::test::TempDir dir("npy");
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<int64_t> y = {0, 1, 2, 3};
  const std::string good_x = write_npy(dir.file("x.npy"), "<f4", {4, 3}, x);
  const std::string good_y = write_npy(dir.file("y.npy"), "<i8", {4}, y);
  auto open = [](const std::string& path) { return [path] { NpyArray a(path); }; };

  // Not an .npy file at all; an .npz archive; an empty file; a missing one.
  train::test::write_file(dir.file("text.npy"), {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '\n'});
  expect_message(error_of(open(dir.file("text.npy"))), {dir.file("text.npy"), "magic", "'hello '"});
  train::test::write_file(dir.file("z.npy"), {'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0, 0, 0});
  expect_message(error_of(open(dir.file("z.npy"))), {dir.file("z.npy"), "zip archive", ".npz"});
  train::test::write_file(dir.file("empty.npy"), {});
  expect_message(error_of(open(dir.file("empty.npy"))), {dir.file("empty.npy"), "an empty file"});
  expect_message(error_of(open(dir.file("missing.npy"))), {dir.file("missing.npy"), "No such file"});

  // A version numpy never wrote.
  std::vector<uint8_t> v4 = npy_bytes("<f4", {4, 3}, x.data(), 48);
  v4[6] = 4;
  train::test::write_file(dir.file("v4.npy"), v4);
  expect_message(error_of(open(dir.file("v4.npy"))), {dir.file("v4.npy"), "version 1.0, 2.0 or 3.0", "found 4.0"});

  // Truncated data, and trailing bytes.
  std::vector<uint8_t> cut = npy_bytes("<f4", {4, 3}, x.data(), 48);
  cut.resize(cut.size() - 8);
  train::test::write_file(dir.file("cut.npy"), cut);
  expect_message(error_of(open(dir.file("cut.npy"))),
                 {dir.file("cut.npy"), "expected 48 bytes of data for shape (4, 3) of dtype <f4, found 40 (truncated?)"});
  std::vector<uint8_t> longer = npy_bytes("<f4", {4, 3}, x.data(), 48);
  longer.push_back(0);
  train::test::write_file(dir.file("long.npy"), longer);
  expect_message(error_of(open(dir.file("long.npy"))), {dir.file("long.npy"), "found 49 (trailing bytes?)"});

  // A header longer than the file.
  std::vector<uint8_t> short_header = npy_bytes("<f4", {4, 3}, x.data(), 0);
  short_header.resize(40);
  train::test::write_file(dir.file("hdr.npy"), short_header);
  expect_message(error_of(open(dir.file("hdr.npy"))), {dir.file("hdr.npy"), "header of 118 bytes", "found a file of 40 bytes"});

  // Wrong dtypes: complex, big-endian, structured.
  train::test::write_file(dir.file("c8.npy"), npy_bytes("<c8", {4, 3}, x.data(), 48));
  expect_message(error_of(open(dir.file("c8.npy"))), {dir.file("c8.npy"), "<f4", "found '<c8'", "astype"});
  train::test::write_file(dir.file("be.npy"), npy_bytes(">f4", {4, 3}, x.data(), 48));
  expect_message(error_of(open(dir.file("be.npy"))), {dir.file("be.npy"), "little-endian data ('<f4')", "big-endian '>f4'"});
  train::test::write_file(dir.file("rec.npy"),
                          npy_bytes("", {}, x.data(), 48, 1,
                                    "{'descr': [('a', '<f4'), ('b', '<f4')], 'fortran_order': False, 'shape': (6,), }"));
  expect_message(error_of(open(dir.file("rec.npy"))), {dir.file("rec.npy"), "structured dtype [('a', '<f4')"});

  // Fortran order.
  train::test::write_file(dir.file("f.npy"),
                          npy_bytes("", {}, x.data(), 48, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (4, 3), }"));
  expect_message(error_of(open(dir.file("f.npy"))), {dir.file("f.npy"), "C order", "found fortran_order True", "ascontiguousarray"});

  // A dict that isn't numpy's: a missing key, and no dict at all.
  train::test::write_file(dir.file("nokey.npy"),
                          npy_bytes("", {}, x.data(), 48, 1, "{'descr': '<f4', 'fortran_order': False, }"));
  expect_message(error_of(open(dir.file("nokey.npy"))), {dir.file("nokey.npy"), "found no 'shape'"});
  train::test::write_file(dir.file("junk.npy"), npy_bytes("", {}, x.data(), 48, 1, "descr=<f4 shape=4,3"));
  expect_message(error_of(open(dir.file("junk.npy"))), {dir.file("junk.npy"), "header dict", "\"descr=<f4 shape=4,3\""});

  // Inputs and targets of different counts; a 0-d input; no rows.
  const std::vector<int64_t> y3 = {0, 1, 2};
  write_npy(dir.file("y3.npy"), "<i8", {3}, y3);
  expect_message(error_of([&] { NpyDataset(good_x, dir.file("y3.npy")); }),
                 {dir.file("y3.npy"), "expected 4 targets, one per row of " + good_x, "(shape (4, 3))", "found 3 (shape (3,))"});
  const std::vector<float> one = {1};
  write_npy(dir.file("x0.npy"), "<f4", {}, one);
  expect_message(error_of([&] { NpyDataset(dir.file("x0.npy"), good_y); }), {dir.file("x0.npy"), "0-d array"});
  const std::vector<float> none;
  write_npy(dir.file("xe.npy"), "<f4", {0, 3}, none);
  expect_message(error_of([&] { NpyDataset(dir.file("xe.npy"), good_y); }),
                 {dir.file("xe.npy"), "at least one sample", "found shape (0, 3)"});

  // An index outside the dataset.
  NpyDataset ds(good_x, good_y);
  expect_message(error_of([&] { ds.get(4); }), {good_x, "[0, 4)", "found 4"});
  expect_message(error_of([&] { ds.get(-1); }), {good_x, "found -1"});
}

TEST(NpyDataset, ConcurrentGetsReadTheSameSamples) {
  train::test::TempDir dir("npy");
  const int64_t n = 512;
  std::vector<uint8_t> x(n * 100);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>((i * 2654435761u) >> 24);
  std::vector<int64_t> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = i % 10;
  NpyDataset ds(write_npy(dir.file("x.npy"), "|u1", {n, 10, 10}, x), write_npy(dir.file("y.npy"), "<i8", {n}, y));
  std::vector<std::vector<uint8_t>> serial(n);
  for (int64_t i = 0; i < n; ++i) serial[i] = bytes_of(ds.get(i).input);
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t k = 0; k < n; ++k) {
        const int64_t i = (k * 7 + t * 131) % n;
        train::Sample s = ds.get(i);
        mismatches[t] += bytes_of(s.input) != serial[i] || s.target.item<int64_t>() != y[i];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

TEST(NpyDataset, NumpysOwnFiles) {
  // Files written by numpy itself (np.save, and format.write_array for version 2.0), read back:
  // the header layout is numpy's, not only this test's idea of it.
  const std::string py = train::test::venv_python();
  if (py.empty()) GTEST_SKIP() << "the venv's python is needed to write files with numpy; run scripts/setup.sh";
  train::test::TempDir dir("npy");
  const std::string script =
      "import numpy as np, sys\n"
      "d = sys.argv[1]\n"
      "x = (np.arange(5 * 2 * 3, dtype=np.float32) * 0.5 - 3).reshape(5, 2, 3)\n"
      "np.save(d + '/x.npy', x)\n"
      "np.save(d + '/y.npy', np.array([4, 3, 2, 1, 0], dtype=np.int16))\n"
      "np.save(d + '/u8.npy', (np.arange(5 * 4) * 13 % 256).astype(np.uint8).reshape(5, 4))\n"
      "with open(d + '/v2.npy', 'wb') as f: np.lib.format.write_array(f, x, version=(2, 0))\n"
      "np.save(d + '/be.npy', x.astype('>f4'))\n"
      "np.save(d + '/fortran.npy', np.asfortranarray(x))\n"
      "np.savez(d + '/both.npz', x=x)\n";
  train::test::RunResult r = train::test::run_program({py, "-c", script, dir.file("")}, {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;

  NpyDataset ds(dir.file("x.npy"), dir.file("y.npy"));
  ASSERT_EQ(ds.size(), 5);
  train::Sample s = ds.get(3);
  ASSERT_EQ(s.input.sizes(), at::IntArrayRef({2, 3}));
  for (int j = 0; j < 6; ++j) EXPECT_EQ(s.input.data_ptr<float>()[j], (3 * 6 + j) * 0.5f - 3) << j;
  EXPECT_EQ(s.target.item<int64_t>(), 1);
  NpyArray v2(dir.file("v2.npy"));
  EXPECT_EQ(v2.version(), 2);
  EXPECT_EQ(std::memcmp(v2.data(), NpyArray(dir.file("x.npy")).data(), 5 * 6 * 4), 0);
  NpyArray u8(dir.file("u8.npy"));
  EXPECT_EQ(u8.descr(), "|u1");
  EXPECT_EQ(u8.row(4)[3], static_cast<uint8_t>(19 * 13 % 256));
  expect_message(error_of([&] { NpyArray a(dir.file("be.npy")); }), {"be.npy", "big-endian '>f4'"});
  expect_message(error_of([&] { NpyArray a(dir.file("fortran.npy")); }), {"fortran.npy", "fortran_order True"});
  expect_message(error_of([&] { NpyArray a(dir.file("both.npz")); }), {"both.npz", "zip archive"});
}

TEST(NpyDataset, FashionMnistAsUint8ArraysGivesTheIdxTensors) {
  // Fashion-MNIST's IDX bytes saved here as uint8 .npy arrays, both as [N, 28, 28] (with an input
  // shape of one channel) and [N, 1, 28, 28]: every sample's floats are the IDX reader's, bit
  // for bit, and so are the labels.
  const std::string fm = train::test::fashion_mnist_dir();
  if (fm.empty()) GTEST_SKIP() << "Debian's Fashion-MNIST is not installed (apt install dataset-fashion-mnist)";
  const int64_t n = 600;
  train::datasets::LoadOptions limit;
  limit.limit = n;
  for (auto split : {train::datasets::Split::train, train::datasets::Split::test}) {
    const std::string prefix = split == train::datasets::Split::train ? "train" : "t10k";
    train::datasets::TensorDataset idx = train::datasets::load_dataset("fashion-mnist", fm, split, limit);
    ASSERT_EQ(idx.size(), n);
    const std::vector<uint8_t> images = train::datasets::read_file_bytes(fm + "/" + prefix + "-images-idx3-ubyte.gz");
    const std::vector<uint8_t> labels = train::datasets::read_file_bytes(fm + "/" + prefix + "-labels-idx1-ubyte.gz");
    train::test::TempDir dir("npy");
    train::test::write_file(dir.file("x.npy"), npy_bytes("|u1", {n, 28, 28}, images.data() + 16, n * 784));
    train::test::write_file(dir.file("x4.npy"), npy_bytes("|u1", {n, 1, 28, 28}, images.data() + 16, n * 784));
    train::test::write_file(dir.file("y.npy"), npy_bytes("|u1", {n}, labels.data() + 8, n));
    NpyOptions one_channel;
    one_channel.input_shape = {1, 28, 28};
    one_channel.num_classes = 10;
    NpyDataset flat(dir.file("x.npy"), dir.file("y.npy"), one_channel);
    NpyDataset four_d(dir.file("x4.npy"), dir.file("y.npy"));
    ASSERT_EQ(flat.size(), n);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<uint8_t> want = bytes_of(idx.images[i].contiguous());
      for (NpyDataset* ds : {&flat, &four_d}) {
        train::Sample s = ds->get(i);
        ASSERT_EQ(s.input.sizes(), at::IntArrayRef({1, 28, 28}));
        differ += bytes_of(s.input) != want;
        differ += s.target.item<int64_t>() != idx.labels[i].item<int64_t>();
      }
    }
    EXPECT_EQ(differ, 0) << prefix;
  }
}

}  // namespace train::test
