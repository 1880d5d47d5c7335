// The memory-mapped token files and their windows (datasets/src/token_file.cpp) on files this test
// writes: raw uint16 and uint32 tokens, llm.c's .bin (both magics), strides, and each bad input's
// message.
#include "error_checks.h"
#include "test_util.h"
#include "train/base/error.h"
#include "train/base/files.h"
#include "train/datasets/token_file.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

using train::datasets::TokenFile;
using train::datasets::TokenFileDataset;
using train::datasets::TokenFileOptions;
using train::datasets::TokenFormat;

namespace train::test {
namespace {


// Little-endian integers appended to a byte vector.
template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
}

// A token's value at position i of the files below: distinct, spread over the uint16 range.
uint32_t token_at(int64_t i) { return static_cast<uint32_t>((i * 40503 + 7) % 50257); }

std::string raw_file(const std::string& path, int64_t n, int bytes) {
  std::vector<uint8_t> b;
  for (int64_t i = 0; i < n; ++i) {
    if (bytes == 2) put<uint16_t>(b, static_cast<uint16_t>(token_at(i)));
    else put<uint32_t>(b, token_at(i) + 70000);  // above uint16's range
  }
  train::test::write_file(path, b);
  return path;
}

// llm.c's layout: 256 int32 (magic, version, count, zeros), then the tokens.
std::string llmc_file(const std::string& path, int64_t n, int32_t magic = 20240520, int32_t count = -1,
                      int32_t version = 1) {
  std::vector<uint8_t> b;
  put<int32_t>(b, magic);
  put<int32_t>(b, version);
  put<int32_t>(b, count < 0 ? static_cast<int32_t>(n) : count);
  for (int i = 3; i < 256; ++i) put<int32_t>(b, 0);
  for (int64_t i = 0; i < n; ++i) {
    if (magic == 20240801) put<uint32_t>(b, token_at(i) + 70000);
    else put<uint16_t>(b, static_cast<uint16_t>(token_at(i)));
  }
  train::test::write_file(path, b);
  return path;
}

TokenFileOptions windows(int64_t seq_len, int64_t stride = 0, int64_t vocab = 0, TokenFormat f = TokenFormat::detect) {
  TokenFileOptions o;
  o.seq_len = seq_len;
  o.stride = stride;
  o.vocab_size = vocab;
  o.format = f;
  return o;
}

// Window `i`'s input and target are the file's tokens from s = i * stride, shifted by one.
void expect_window(TokenFileDataset& ds, int64_t i, uint32_t offset = 0) {
  train::Sample s = ds.get(i);
  ASSERT_EQ(s.input.scalar_type(), at::kLong);
  ASSERT_EQ(s.target.scalar_type(), at::kLong);
  ASSERT_EQ(s.input.sizes(), at::IntArrayRef({ds.seq_len()}));
  ASSERT_EQ(s.target.sizes(), at::IntArrayRef({ds.seq_len()}));
  const int64_t start = i * ds.stride();
  for (int64_t j = 0; j < ds.seq_len(); ++j) {
    ASSERT_EQ(s.input.data_ptr<int64_t>()[j], static_cast<int64_t>(token_at(start + j) + offset)) << "sample " << i << " token " << j;
    ASSERT_EQ(s.target.data_ptr<int64_t>()[j], static_cast<int64_t>(token_at(start + j + 1) + offset)) << "sample " << i << " token " << j;
  }
}

}  // namespace

TEST(TokenFile, RawUint16IsNanoGptsTrainBin) {
  train::test::TempDir dir("token_file");
  TokenFile f(raw_file(dir.file("train.bin"), 1001, 2));
  EXPECT_EQ(f.format(), TokenFormat::uint16);
  EXPECT_EQ(f.token_bytes(), 2);
  EXPECT_EQ(f.size(), 1001);
  EXPECT_EQ(f.llmc_version(), 0);
  for (int64_t i : {0, 1, 500, 1000}) EXPECT_EQ(f.token(i), token_at(i));
}

TEST(TokenFile, RawUint32) {
  train::test::TempDir dir("token_file");
  TokenFile f(raw_file(dir.file("tokens.u32"), 100, 4), TokenFormat::uint32);
  EXPECT_EQ(f.format(), TokenFormat::uint32);
  EXPECT_EQ(f.size(), 100);
  EXPECT_EQ(f.token(99), token_at(99) + 70000);
}

TEST(TokenFile, LlmcHeaderIsDetectedByItsMagic) {
  train::test::TempDir dir("token_file");
  TokenFile gpt2(llmc_file(dir.file("gpt2.bin"), 300));
  EXPECT_EQ(gpt2.format(), TokenFormat::llmc);
  EXPECT_EQ(gpt2.token_bytes(), 2);
  EXPECT_EQ(gpt2.llmc_version(), 1);
  EXPECT_EQ(gpt2.size(), 300);
  EXPECT_EQ(gpt2.token(0), token_at(0));
  EXPECT_EQ(gpt2.token(299), token_at(299));
  TokenFile llama(llmc_file(dir.file("llama3.bin"), 50, 20240801, -1, 7), TokenFormat::llmc);
  EXPECT_EQ(llama.token_bytes(), 4);
  EXPECT_EQ(llama.llmc_version(), 7);
  EXPECT_EQ(llama.token(49), token_at(49) + 70000);
  // Read as raw uint16 on request: the header's 1024 bytes are then 512 tokens.
  TokenFile raw(dir.file("gpt2.bin"), TokenFormat::uint16);
  EXPECT_EQ(raw.size(), 512 + 300);
}

TEST(TokenFileDataset, NonOverlappingWindowsByDefault) {
  train::test::TempDir dir("token_file");
  // 1001 tokens, seq_len 10: (1001 - 1) / 10 = 100 windows, the last ending on the last token.
  TokenFileDataset ds(raw_file(dir.file("train.bin"), 1001, 2), windows(10));
  EXPECT_EQ(ds.size(), 100);
  EXPECT_EQ(ds.stride(), 10);
  EXPECT_EQ(ds.name(), "tokens:" + dir.file("train.bin"));
  for (int64_t i : {0, 1, 57, 99}) expect_window(ds, i);
  // One token fewer: the last window lacks its last target.
  TokenFileDataset shorter(raw_file(dir.file("short.bin"), 1000, 2), windows(10));
  EXPECT_EQ(shorter.size(), 99);
  // Exactly one window.
  TokenFileDataset one(raw_file(dir.file("one.bin"), 11, 2), windows(10));
  EXPECT_EQ(one.size(), 1);
  expect_window(one, 0);
}

TEST(TokenFileDataset, StrideGivesOverlappingWindows) {
  train::test::TempDir dir("token_file");
  // 101 tokens, seq_len 10, stride 3: starts 0, 3, ..., 90 (90 + 11 = 101): 31 windows.
  TokenFileDataset ds(raw_file(dir.file("t.bin"), 101, 2), windows(10, 3));
  EXPECT_EQ(ds.size(), 31);
  for (int64_t i : {0, 1, 2, 30}) expect_window(ds, i);
  TokenFileDataset every(raw_file(dir.file("u.bin"), 20, 2), windows(4, 1));
  EXPECT_EQ(every.size(), 16);
  expect_window(every, 15);
}

TEST(TokenFileDataset, ReadsEveryLayout) {
  train::test::TempDir dir("token_file");
  TokenFileDataset llmc(llmc_file(dir.file("gpt2.bin"), 257), windows(16));
  EXPECT_EQ(llmc.size(), 16);
  for (int64_t i = 0; i < llmc.size(); ++i) expect_window(llmc, i);
  TokenFileDataset llama(llmc_file(dir.file("llama3.bin"), 65, 20240801, -1, 7), windows(8));
  EXPECT_EQ(llama.size(), 8);
  expect_window(llama, 7, 70000);
  TokenFileDataset u32(raw_file(dir.file("t.u32"), 65, 4), windows(8, 0, 0, TokenFormat::uint32));
  expect_window(u32, 3, 70000);
}

TEST(TokenFileDataset, VocabularyIsCheckedPerWindow) {
  train::test::TempDir dir("token_file");
  std::vector<uint8_t> b;
  for (int i = 0; i < 41; ++i) put<uint16_t>(b, static_cast<uint16_t>(i == 25 ? 50300 : i));
  train::test::write_file(dir.file("v.bin"), b);
  TokenFileDataset ds(dir.file("v.bin"), windows(10, 0, 50257));
  EXPECT_EQ(ds.size(), 4);
  EXPECT_EQ(ds.get(0).input.data_ptr<int64_t>()[9], 9);
  EXPECT_EQ(ds.get(3).target.data_ptr<int64_t>()[9], 40);
  expect_message(error_of([&] { ds.get(2); }),
                 {dir.file("v.bin"), "below the vocabulary size 50257", "found 50300 at token 25 (sample 2)"});
  // Window 1 ends with token 20 as its last target: it doesn't reach token 25.
  EXPECT_NO_THROW(ds.get(1));
  // Without a vocabulary size, nothing is checked.
  TokenFileDataset unchecked(dir.file("v.bin"), windows(10));
  EXPECT_EQ(unchecked.get(2).input.data_ptr<int64_t>()[5], 50300);
}

TEST(TokenFileDataset, BadFilesAreNamedWithWhatWasExpectedAndFound) {
  train::test::TempDir dir("token_file");
  // An empty file; a missing one.
  train::test::write_file(dir.file("empty.bin"), {});
  expect_message(error_of([&] { TokenFile f(dir.file("empty.bin")); }), {dir.file("empty.bin"), "an empty file"});
  expect_message(error_of([&] { TokenFile f(dir.file("missing.bin")); }), {dir.file("missing.bin"), "No such file"});

  // An odd byte count for uint16; not a multiple of 4 for uint32.
  std::vector<uint8_t> odd = {1, 0, 2, 0, 3};
  train::test::write_file(dir.file("odd.bin"), odd);
  expect_message(error_of([&] { TokenFile f(dir.file("odd.bin")); }),
                 {dir.file("odd.bin"), "whole number of 2-byte tokens", "found 5 bytes (odd)"});
  std::vector<uint8_t> six = {1, 0, 0, 0, 2, 0};
  train::test::write_file(dir.file("six.bin"), six);
  expect_message(error_of([&] { TokenFile f(dir.file("six.bin"), TokenFormat::uint32); }),
                 {dir.file("six.bin"), "4-byte tokens", "found 6 bytes (not a multiple of 4)"});

  // llm.c files: truncated (its header counts more), trailing bytes, a header cut short, no magic.
  llmc_file(dir.file("cut.bin"), 100, 20240520, 120);
  expect_message(error_of([&] { TokenFile f(dir.file("cut.bin")); }),
                 {dir.file("cut.bin"), "expected 1264 bytes for the 120 tokens", "found 1224 (truncated?)"});
  llmc_file(dir.file("more.bin"), 100, 20240520, 90);
  expect_message(error_of([&] { TokenFile f(dir.file("more.bin")); }),
                 {dir.file("more.bin"), "expected 1204 bytes for the 90 tokens", "found 1224 (trailing bytes?)"});
  std::vector<uint8_t> header_only;
  put<int32_t>(header_only, 20240520);
  put<int32_t>(header_only, 1);
  train::test::write_file(dir.file("hdr.bin"), header_only);
  expect_message(error_of([&] { TokenFile f(dir.file("hdr.bin")); }),
                 {dir.file("hdr.bin"), "llm.c's header of 1024 bytes", "found a file of 8 bytes"});
  raw_file(dir.file("raw.bin"), 600, 2);
  expect_message(error_of([&] { TokenFile f(dir.file("raw.bin"), TokenFormat::llmc); }),
                 {dir.file("raw.bin"), "magic number 20240520", "found " + std::to_string(static_cast<int32_t>(token_at(0) | (token_at(1) << 16)))});

  // seq_len larger than the file.
  raw_file(dir.file("small.bin"), 64, 2);
  expect_message(error_of([&] { TokenFileDataset ds(dir.file("small.bin"), windows(64)); }),
                 {dir.file("small.bin"), "at least seq_len + 1 = 65 tokens", "found 64"});

  // Options: seq_len 0, a negative stride.
  expect_message(error_of<train::ConfigError>([&] { TokenFileDataset ds(dir.file("small.bin"), windows(0)); }),
                 {"seq_len", dir.file("small.bin"), "found 0"});
  expect_message(error_of<train::ConfigError>([&] { TokenFileDataset ds(dir.file("small.bin"), windows(8, -1)); }),
                 {"stride -1", dir.file("small.bin")});

  // An index outside the dataset.
  TokenFileDataset ds(dir.file("small.bin"), windows(8));
  EXPECT_EQ(ds.size(), 7);
  expect_message(error_of([&] { ds.get(7); }), {dir.file("small.bin"), "[0, 7)", "found 7"});
}

TEST(TokenFileDataset, ConcurrentGetsReadTheSameWindows) {
  train::test::TempDir dir("token_file");
  TokenFileDataset ds(raw_file(dir.file("train.bin"), 64 * 257 + 1, 2), windows(64, 0, 50257));
  ASSERT_EQ(ds.size(), 257);
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t k = 0; k < ds.size(); ++k) {
        const int64_t i = (k * 5 + t * 61) % ds.size();
        train::Sample s = ds.get(i);
        for (int64_t j = 0; j < 64; ++j) {
          wrong[t] += s.input.data_ptr<int64_t>()[j] != token_at(i * 64 + j);
          wrong[t] += s.target.data_ptr<int64_t>()[j] != token_at(i * 64 + j + 1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

}  // namespace train::test
