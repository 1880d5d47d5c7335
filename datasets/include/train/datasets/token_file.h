// Token files for language models, memory-mapped: raw uint16 tokens (nanoGPT's train.bin), raw
// uint32 tokens, or llm.c's .bin (a 1024-byte header, then the tokens), served as windows of
// seq_len + 1 tokens: the input and, shifted by one, the next-token target.
#pragma once

#include "train/sample_dataset.h"

#include <cstdint>
#include <memory>
#include <string>

namespace train::datasets {

class MappedFile;

/// llm.c's header: 256 little-endian int32 (magic, version, token count, then zeros), 1024 bytes.
constexpr int64_t kLlmcHeaderInts = 256;
constexpr int64_t kLlmcHeaderBytes = kLlmcHeaderInts * 4;
/// llm.c's magic numbers: GPT-2's files hold uint16 tokens, Llama 3's uint32 tokens.
constexpr int32_t kLlmcMagicGpt2 = 20240520;
constexpr int32_t kLlmcMagicLlama3 = 20240801;

/// How a token file is laid out.
enum class TokenFormat {
  detect,  ///< llm.c's .bin when the file starts with one of its magics, else raw uint16
  uint16,  ///< raw little-endian uint16 tokens, no header (nanoGPT's prepare.py)
  uint32,  ///< raw little-endian uint32 tokens, no header
  llmc,    ///< llm.c's header, then uint16 (magic 20240520) or uint32 (magic 20240801) tokens
};

/// A token file, memory-mapped: its tokens read by position. Copies share the mapping; reading
/// from several threads at once is safe.
class TokenFile {
 public:
  /// Opens, checks and maps `path`.
  /// @throws train::DataError naming the file: one that can't be opened; an empty file; an llm.c
  ///   file shorter than its header, with an unknown magic, or whose size doesn't match its
  ///   header's token count (truncated, or trailing bytes); a raw file whose size isn't a whole
  ///   number of tokens (an odd byte count for uint16).
  explicit TokenFile(const std::string& path, TokenFormat format = TokenFormat::detect);

  const std::string& path() const { return path_; }
  /// The layout found: uint16, uint32 or llmc (never detect).
  TokenFormat format() const { return format_; }
  /// Bytes per token: 2 or 4.
  int token_bytes() const { return token_bytes_; }
  /// The number of tokens.
  int64_t size() const { return size_; }
  /// llm.c's header version (1 for GPT-2's files), 0 for a raw file.
  int llmc_version() const { return llmc_version_; }
  /// The token at `position` (0 <= position < size(), unchecked).
  uint32_t token(int64_t position) const;

 private:
  std::string path_;
  std::shared_ptr<const MappedFile> file_;
  TokenFormat format_ = TokenFormat::uint16;
  int token_bytes_ = 2;
  int64_t size_ = 0;
  int llmc_version_ = 0;
  const uint8_t* tokens_ = nullptr;
};

/// How TokenFileDataset cuts a token file into samples.
struct TokenFileOptions {
  /// Tokens per sample (the model's context), >= 1. A window reads seq_len + 1 tokens.
  int64_t seq_len = 0;
  /// Tokens between the starts of two windows; 0: seq_len (non-overlapping windows, each token
  /// a target once). A stride below seq_len gives overlapping windows.
  int64_t stride = 0;
  /// When > 0, every token of a window must be below it: get() checks each window it reads.
  int64_t vocab_size = 0;
  /// The file's layout.
  TokenFormat format = TokenFormat::detect;
};

/// A token file served as windows for next-token prediction. Sample i starts at token
/// s = i * stride: its input is tokens [s, s + seq_len), its target tokens [s + 1, s + seq_len + 1),
/// both int64 [seq_len]. size() = (tokens - seq_len - 1) / stride + 1, which is
/// (tokens - 1) / seq_len for non-overlapping windows; the tokens after the last window are not
/// read.
class TokenFileDataset : public SampleDataset {
 public:
  /// Opens and checks the file (TokenFile's checks).
  /// @throws train::ConfigError for seq_len < 1, a negative stride or vocab_size;
  ///   train::DataError naming the file for what TokenFile refuses, and for a file of fewer than
  ///   seq_len + 1 tokens (not one window).
  TokenFileDataset(const std::string& path, const TokenFileOptions& options);

  /// The number of windows.
  int64_t size() const override { return size_; }

  /// Window `index`: input and target, int64 [seq_len] each.
  /// @throws train::DataError naming the file and the sample for an index outside [0, size()), or
  ///   (with vocab_size) a token id >= vocab_size, with its position in the file.
  Sample get(int64_t index) override;

  /// "tokens:" and the file's path.
  std::string name() const override { return "tokens:" + tokens_.path(); }

  const TokenFile& tokens() const { return tokens_; }
  int64_t seq_len() const { return seq_len_; }
  int64_t stride() const { return stride_; }

 private:
  TokenFile tokens_;
  int64_t seq_len_;
  int64_t stride_;
  int64_t vocab_size_;
  int64_t size_ = 0;
};

}  // namespace train::datasets
