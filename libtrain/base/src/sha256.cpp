// SHA-256 through OpenSSL's EVP interface.
#include "train/base/sha256.h"

#include <openssl/evp.h>

#include <stdexcept>

namespace train {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("OpenSSL: SHA-256 is not available");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::update(const void* data, std::size_t size) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, size);
}

std::array<unsigned char, 32> Sha256::digest() {
  std::array<unsigned char, 32> out{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), out.data(), &len);
  return out;
}

std::string Sha256::hex() {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (unsigned char b : digest()) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

std::array<unsigned char, 32> sha256(const void* data, std::size_t size) {
  Sha256 h;
  h.update(data, size);
  return h.digest();
}

}  // namespace train
