// Writes CIFAR-10-shaped files for tests, in both layouts: the binary version (data_batch_N.bin)
// and the Python version (cifar-10-batches-py/data_batch_N), the latter byte by byte as Python 2's
// cPickle (protocol 2) wrote the real files and as Python 3.14 writes them by default (protocol 5),
// so no test needs Python. The classes are learnable:
// each has a bright square of its own place and colour on noise from a fixed LCG.
#pragma once

#include "test_util.h"
#include "train/base/files.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace train::test {

/// N samples: labels and N x 3072 pixel bytes (R, G, B planes).
struct CifarSamples {
  std::vector<uint8_t> labels;
  std::vector<uint8_t> pixels;
};

/// `n` samples whose label is (7 i + seed) % 10: mid-grey noise (64..191, so the normalized
/// images are centred like real photos) with a bright 8x8 square in the label's cell of a 4x4
/// grid, in the label's colour channel (label % 3).
inline CifarSamples learnable_cifar(int n, uint32_t seed) {
  CifarSamples s;
  uint32_t state = seed;
  auto noise = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<int>(state >> 25);  // 0..127
  };
  for (int i = 0; i < n; ++i) {
    const int label = (i * 7 + static_cast<int>(seed)) % 10;
    s.labels.push_back(static_cast<uint8_t>(label));
    const int top = (label / 4) * 8, left = (label % 4) * 8;
    for (int c = 0; c < 3; ++c) {
      for (int p = 0; p < 1024; ++p) {
        const int y = p / 32, x = p % 32;
        const bool square = c == label % 3 && y >= top && y < top + 8 && x >= left && x < left + 8;
        s.pixels.push_back(static_cast<uint8_t>(square ? 255 - noise() / 4 : 64 + noise()));
      }
    }
  }
  return s;
}

/// The binary version's bytes: 1 label byte + 3072 pixel bytes per record.
inline std::vector<uint8_t> cifar_binary_bytes(const CifarSamples& s) {
  std::vector<uint8_t> b;
  for (std::size_t i = 0; i < s.labels.size(); ++i) {
    b.push_back(s.labels[i]);
    b.insert(b.end(), s.pixels.begin() + i * 3072, s.pixels.begin() + (i + 1) * 3072);
  }
  return b;
}

namespace detail {
inline void put(std::vector<uint8_t>& b, const std::string& s) { b.insert(b.end(), s.begin(), s.end()); }
/// A string literal's bytes, embedded NULs included.
template <std::size_t N>
void lit(std::vector<uint8_t>& b, const char (&s)[N]) {
  b.insert(b.end(), s, s + N - 1);
}
inline void put_le(std::vector<uint8_t>& b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline void short_binstring(std::vector<uint8_t>& b, const std::string& s) {
  b.push_back('U');
  b.push_back(static_cast<uint8_t>(s.size()));
  put(b, s);
}
}  // namespace detail

/// What a pickle should hold; tests change one thing to make it malformed.
struct PickleShape {
  std::string data_key = "data";
  std::string labels_key = "labels";
  int64_t columns = 3072;  ///< the second dimension of `data`
  std::string dtype = "u1";
};

/// A CIFAR-10 batch pickle as Python 2's cPickle.dump(d, f, 2) writes it: a dict with
/// batch_label, labels (a list of ints), data (numpy.core.multiarray._reconstruct of an ndarray,
/// then BUILD with its raw bytes) and filenames, keys as byte strings.
inline std::vector<uint8_t> cifar_pickle_bytes(const CifarSamples& s, const PickleShape& shape = {}) {
  using namespace detail;
  const uint64_t n = s.labels.size();
  std::vector<uint8_t> b;
  lit(b, "\x80\x02}q\x01(");
  short_binstring(b, "batch_label");
  short_binstring(b, "training batch 1 of 5");
  short_binstring(b, shape.data_key);
  lit(b, "cnumpy.core.multiarray\n_reconstruct\nq\x02" "cnumpy\nndarray\nq\x03");
  lit(b, "K\x00\x85q\x04U\x01" "b\x87q\x05Rq\x06(K\x01");
  b.push_back('M');  // shape (n, columns) as BININT2
  put_le(b, n, 2);
  b.push_back('M');
  put_le(b, static_cast<uint64_t>(shape.columns), 2);
  lit(b, "\x86q\x07" "cnumpy\ndtype\nq\x08");
  short_binstring(b, shape.dtype);
  lit(b, "K\x00K\x01\x87Rq\x09(K\x03U\x01|NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89");
  b.push_back('T');  // BINSTRING: the raw bytes
  put_le(b, s.pixels.size(), 4);
  b.insert(b.end(), s.pixels.begin(), s.pixels.end());
  lit(b, "tb");
  short_binstring(b, shape.labels_key);
  lit(b, "]q\x0a(");
  for (uint8_t l : s.labels) {
    b.push_back('K');
    b.push_back(l);
  }
  b.push_back('e');
  short_binstring(b, "filenames");
  lit(b, "]q\x0b(");
  for (uint64_t i = 0; i < n; ++i) short_binstring(b, "img_" + std::to_string(i) + ".png");
  lit(b, "eu.");
  return b;
}

namespace detail {
/// Python's pickler, protocol 4 and later: a str as SHORT_BINUNICODE, then MEMOIZE.
inline void unicode_memo(std::vector<uint8_t>& b, const std::string& s) {
  b.push_back(0x8c);
  b.push_back(static_cast<uint8_t>(s.size()));
  put(b, s);
  b.push_back(0x94);
}
/// Python's pickler: a non-negative int as BININT1, BININT2 or BININT.
inline void small_int(std::vector<uint8_t>& b, uint64_t v) {
  if (v <= 0xff) {
    b.push_back('K');
    put_le(b, v, 1);
  } else if (v <= 0xffff) {
    b.push_back('M');
    put_le(b, v, 2);
  } else {
    b.push_back('J');
    put_le(b, v, 4);
  }
}
}  // namespace detail

/// A CIFAR-10 batch pickle as Python 3.14's pickle.dump(d, f) writes it by default (protocol 5)
/// with numpy 2: str keys and values, data through `numpy._core.numeric._frombuffer(bytearray,
/// dtype('u1'), (n, 3072), 'C')` with the pixels in-band as BYTEARRAY8, every str, container and
/// call memoized (MEMOIZE), labels appended in batches of 1000 (APPENDS; APPEND for one), all of it
/// in one FRAME (what Python writes while the whole pickle is under 64 KiB, i.e. up to 20 samples).
/// `module` names the module of _frombuffer (numpy 1 wrote numpy.core.numeric).
inline std::vector<uint8_t> cifar_pickle5_bytes(const CifarSamples& s, const std::string& module = "numpy._core.numeric") {
  using namespace detail;
  const uint64_t n = s.labels.size();
  const auto appends = [](std::vector<uint8_t>& b, std::size_t count, const auto& save) {
    for (std::size_t start = 0; start < count; start += 1000) {
      const std::size_t batch = std::min<std::size_t>(1000, count - start);
      if (batch > 1) b.push_back('(');
      for (std::size_t i = start; i < start + batch; ++i) save(i);
      b.push_back(batch > 1 ? 'e' : 'a');
    }
  };
  std::vector<uint8_t> f;  // the frame's bytes
  lit(f, "}\x94(");
  unicode_memo(f, "batch_label");
  unicode_memo(f, "training batch 1 of 5");
  unicode_memo(f, "labels");
  lit(f, "]\x94");
  appends(f, n, [&](std::size_t i) { small_int(f, s.labels[i]); });
  unicode_memo(f, "data");
  unicode_memo(f, module);
  unicode_memo(f, "_frombuffer");
  lit(f, "\x93\x94(");
  f.push_back(0x96);  // BYTEARRAY8: the array's buffer
  put_le(f, s.pixels.size(), 8);
  f.insert(f.end(), s.pixels.begin(), s.pixels.end());
  f.push_back(0x94);
  unicode_memo(f, "numpy");
  unicode_memo(f, "dtype");
  lit(f, "\x93\x94");
  unicode_memo(f, "u1");
  lit(f, "\x89\x88\x87\x94R\x94(K\x03");
  unicode_memo(f, "|");
  lit(f, "NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00t\x94" "b");
  small_int(f, n);
  small_int(f, 3072);
  lit(f, "\x86\x94");
  unicode_memo(f, "C");
  lit(f, "t\x94R\x94");
  unicode_memo(f, "filenames");
  lit(f, "]\x94");
  appends(f, n, [&](std::size_t i) { unicode_memo(f, "img_" + std::to_string(i) + ".png"); });
  lit(f, "u.");
  std::vector<uint8_t> b = {0x80, 0x05, 0x95};
  put_le(b, f.size(), 8);
  b.insert(b.end(), f.begin(), f.end());
  return b;
}

/// Writes the five training batches (`per_file` samples each) and the test batch (`test` samples)
/// into `dir` in the binary layout (`binary`: data_batch_N.bin) or the Python one (data_batch_N).
inline void write_cifar_layout(const std::string& dir, bool binary, int per_file, int test) {
  files::make_dirs(dir);
  for (int i = 1; i <= 6; ++i) {
    const CifarSamples s = learnable_cifar(i == 6 ? test : per_file, static_cast<uint32_t>(i));
    const std::string name = (i == 6 ? std::string("test_batch") : "data_batch_" + std::to_string(i)) + (binary ? ".bin" : "");
    write_file(files::join(dir, name), binary ? cifar_binary_bytes(s) : cifar_pickle_bytes(s));
  }
}

}  // namespace train::test
