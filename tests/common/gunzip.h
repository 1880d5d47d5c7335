// A gzip file read whole (the tests that write datasets from Debian's Fashion-MNIST .gz files).
// Header-only; needs zlib.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace train::test {

/// The bytes of the gzip file at `path`, decompressed.
/// @throws std::runtime_error when it can't be opened or its stream is damaged.
inline std::vector<uint8_t> gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open " + path);
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  int got = 0;
  while ((got = gzread(f, buf, sizeof(buf))) > 0) out.insert(out.end(), buf, buf + got);
  gzclose(f);
  if (got < 0) throw std::runtime_error("cannot decompress " + path);
  return out;
}

}  // namespace train::test
