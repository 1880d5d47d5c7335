// Token files: the layout detected and every size checked when the file is opened; windows read
// from the mapping, checked against the vocabulary per window (token_file.h).
#include "train/datasets/token_file.h"

#include "train/base/error.h"
#include "train/datasets/mapped_file.h"

#include <ATen/ops/empty.h>

#include <cstring>

namespace train::datasets {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token files are read as little-endian integers");

int32_t read_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

const char* format_name(TokenFormat f) {
  switch (f) {
    case TokenFormat::detect: return "detect";
    case TokenFormat::uint16: return "raw uint16";
    case TokenFormat::uint32: return "raw uint32";
    case TokenFormat::llmc: return "llm.c";
  }
  return "?";
}

}  // namespace

TokenFile::TokenFile(const std::string& path, TokenFormat format)
    : path_(path), file_(std::make_shared<const MappedFile>(path)) {
  const uint8_t* b = file_->data();
  const uint64_t bytes = file_->size();
  if (bytes == 0) {
    throw DataError(path + ": expected tokens, found an empty file.",
                    "the preparation script may have failed or still be running: check its output, "
                    "and that the copy to this node finished.");
  }
  const int32_t first = bytes >= 4 ? read_i32(b) : 0;
  const bool has_magic = first == kLlmcMagicGpt2 || first == kLlmcMagicLlama3;
  format_ = format == TokenFormat::detect ? (has_magic ? TokenFormat::llmc : TokenFormat::uint16) : format;

  if (format_ == TokenFormat::llmc) {
    if (bytes < static_cast<uint64_t>(kLlmcHeaderBytes)) {
      throw DataError(path + ": expected llm.c's header of " + std::to_string(kLlmcHeaderBytes) +
                          " bytes, found a file of " + std::to_string(bytes) + " bytes (truncated?).",
                      "copy the file again, or read it as raw tokens (format uint16 or uint32).");
    }
    if (!has_magic) {
      throw DataError(path + ": expected llm.c's magic number " + std::to_string(kLlmcMagicGpt2) + " (uint16 tokens) or " +
                          std::to_string(kLlmcMagicLlama3) + " (uint32 tokens), found " + std::to_string(first) + ".",
                      "this is not an llm.c .bin file: read it as raw tokens (format uint16 or uint32).");
    }
    token_bytes_ = first == kLlmcMagicGpt2 ? 2 : 4;
    llmc_version_ = read_i32(b + 4);
    const int32_t count = read_i32(b + 8);
    const uint64_t expected = static_cast<uint64_t>(kLlmcHeaderBytes) + static_cast<uint64_t>(count) * token_bytes_;
    if (count < 0 || bytes != expected) {
      throw DataError(path + ": expected " + std::to_string(expected) + " bytes for the " + std::to_string(count) +
                          " tokens of " + std::to_string(token_bytes_) + " bytes its llm.c header counts, found " +
                          std::to_string(bytes) + (bytes < expected ? " (truncated?)." : " (trailing bytes?)."),
                      bytes < expected ? "the file was cut short (an interrupted copy or preparation run?): "
                                         "copy or prepare it again."
                                       : "the header and the tokens don't match: prepare the file again.");
    }
    size_ = count;
    tokens_ = b + kLlmcHeaderBytes;
  } else {
    token_bytes_ = format_ == TokenFormat::uint32 ? 4 : 2;
    if (bytes % token_bytes_ != 0) {
      throw DataError(path + ": expected a whole number of " + std::to_string(token_bytes_) + "-byte tokens (" +
                          format_name(format_) + "), found " + std::to_string(bytes) + " bytes (" +
                          (token_bytes_ == 2 ? "odd" : "not a multiple of 4") + ").",
                      "the file was cut mid-token (an interrupted copy?): copy or prepare it again; or it "
                      "holds tokens of another width (format uint16 or uint32).");
    }
    size_ = static_cast<int64_t>(bytes / token_bytes_);
    tokens_ = b;
  }
}

uint32_t TokenFile::token(int64_t position) const {
  const uint8_t* p = tokens_ + static_cast<uint64_t>(position) * token_bytes_;
  if (token_bytes_ == 2) {
    uint16_t v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

namespace {

// The options checked before the file is opened: a mistake in them is the user's, not the data's.
const TokenFileOptions& checked(const std::string& path, const TokenFileOptions& o) {
  if (o.seq_len < 1) {
    throw ConfigError("TokenFileOptions::seq_len for " + path + ": expected >= 1 token, found " +
                          std::to_string(o.seq_len) + ".",
                      "set the model's context length (--seq-len).");
  }
  if (o.stride < 0 || o.vocab_size < 0) {
    throw ConfigError("TokenFileOptions for " + path + ": expected stride >= 0 and vocab_size >= 0, found stride " +
                          std::to_string(o.stride) + " and vocab_size " + std::to_string(o.vocab_size) + ".",
                      "stride 0 means seq_len (non-overlapping windows); vocab_size 0 skips the check.");
  }
  return o;
}

}  // namespace

TokenFileDataset::TokenFileDataset(const std::string& path, const TokenFileOptions& options)
    : tokens_(path, checked(path, options).format),
      seq_len_(options.seq_len),
      stride_(options.stride > 0 ? options.stride : options.seq_len),
      vocab_size_(options.vocab_size) {
  if (tokens_.size() - 1 < seq_len_) {
    throw DataError(path + ": expected at least seq_len + 1 = " + std::to_string(seq_len_ + 1) +
                        " tokens for one window, found " + std::to_string(tokens_.size()) + ".",
                    "use a shorter --seq-len, or a larger file (the validation split may be small).");
  }
  size_ = (tokens_.size() - seq_len_ - 1) / stride_ + 1;
}

Sample TokenFileDataset::get(int64_t index) {
  if (index < 0 || index >= size_) {
    throw DataError(name() + ": expected a sample index in [0, " + std::to_string(size_) + "), found " +
                        std::to_string(index) + ".",
                    "the sampler and the dataset disagree on its size: build the sampler from this dataset's size().");
  }
  const int64_t start = index * stride_;
  Sample s;
  s.input = at::empty({seq_len_}, at::kLong);
  s.target = at::empty({seq_len_}, at::kLong);
  int64_t* in = s.input.data_ptr<int64_t>();
  int64_t* out = s.target.data_ptr<int64_t>();
  for (int64_t j = 0; j <= seq_len_; ++j) {
    const uint32_t t = tokens_.token(start + j);
    if (vocab_size_ > 0 && t >= static_cast<uint64_t>(vocab_size_)) {
      throw DataError(tokens_.path() + ": expected token ids below the vocabulary size " + std::to_string(vocab_size_) +
                          ", found " + std::to_string(t) + " at token " + std::to_string(start + j) + " (sample " +
                          std::to_string(index) + ").",
                      "the file was tokenized with another vocabulary: set the vocabulary size to the "
                      "tokenizer's, or tokenize the data again.");
    }
    if (j < seq_len_) in[j] = t;
    if (j > 0) out[j - 1] = t;
  }
  return s;
}

}  // namespace train::datasets
