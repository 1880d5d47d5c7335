// SHA-256, the one implementation libtrain uses (checkpoint trailers, params_sha256). No LibTorch.
#pragma once

#include <array>
#include <cstddef>
#include <string>

namespace train {

/// Incremental SHA-256 (OpenSSL's).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  /// Adds `size` bytes.
  void update(const void* data, std::size_t size);
  /// The digest of everything added; call once.
  std::array<unsigned char, 32> digest();
  /// The digest as 64 lowercase hex characters; call once (instead of digest()).
  std::string hex();

 private:
  void* ctx_;
};

/// SHA-256 of one buffer.
std::array<unsigned char, 32> sha256(const void* data, std::size_t size);

}  // namespace train
