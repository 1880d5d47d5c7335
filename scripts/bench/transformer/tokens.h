// The benchmark's data: generated "stride" sequences, x_i = (x_0 + i * d) mod vocab, with x_0
// uniform and d uniform in 1..min(16, vocab - 1) per sequence. The next token is a function of the
// two before it, so a model that attends to its context drives the loss towards 0. The same rule
// as scripts/bench/bench_models.py's stride_sequences (not the same draws: each side seeds its own).
#pragma once

#include <train/data.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/randint.h>
#include <train/base/error.h>

#include <cstdio>

#include <algorithm>
#include <memory>
#include <string>

namespace bench {

/// n sequences of `seq_len` inputs and their `seq_len` next tokens, as an InMemoryDataset
/// (inputs int64 [n, seq_len], targets int64 [n, seq_len]).
inline std::shared_ptr<train::InMemoryDataset> stride_sequences(int64_t n, int64_t seq_len, int64_t vocab,
                                                                uint64_t seed, const std::string& name) {
  at::Generator g = at::detail::createCPUGenerator(seed);
  const int64_t k = std::max<int64_t>(1, std::min<int64_t>(16, vocab - 1));
  const at::Tensor x0 = at::randint(0, vocab, {n, 1}, g, at::kLong);
  const at::Tensor d = at::randint(1, k + 1, {n, 1}, g, at::kLong);
  const at::Tensor s = (x0 + d * at::arange(seq_len + 1, at::kLong)).remainder(vocab);
  return std::make_shared<train::InMemoryDataset>(s.narrow(1, 0, seq_len).contiguous(),
                                                   s.narrow(1, 1, seq_len).contiguous(), name);
}

/// Writes `data`'s sequences as one token file: each sequence's seq_len inputs and its last target
/// (seq_len + 1 tokens), sequence after sequence, raw little-endian uint16 (uint32 above a
/// vocabulary of 65536), as nanoGPT's prepare.py writes train.bin.
inline void write_token_file(const train::InMemoryDataset& data, int64_t vocab, const std::string& path) {
  const at::Tensor inputs = data.inputs(), targets = data.targets();
  const at::Tensor all = at::cat({inputs, targets.narrow(1, targets.size(1) - 1, 1)}, 1).contiguous();
  const at::Tensor out = all.to(vocab <= 65536 ? at::kUInt16 : at::kUInt32).contiguous();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  const size_t bytes = static_cast<size_t>(out.numel()) * out.element_size();
  if (f == nullptr || std::fwrite(out.const_data_ptr(), 1, bytes, f) != bytes || std::fclose(f) != 0) {
    throw train::DataError(path + ": expected to write " + std::to_string(bytes) + " bytes of tokens, found the write "
                               "failing.", "check the folder exists, is writable and has room.");
  }
}

}  // namespace bench
