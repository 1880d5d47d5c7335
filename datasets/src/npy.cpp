// .npy header parsing and checks, done before a byte of the data is touched, and NpyDataset's
// per-sample conversions (npy.h).
#include "train/datasets/npy.h"

#include "uint8_table.h"

#include "train/base/error.h"
#include "train/datasets/mapped_file.h"

#include <ATen/ops/empty.h>

#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>

namespace train::datasets {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the .npy reader maps little-endian data as is");

// numpy's magic string: the byte 0x93, then "NUMPY".
constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr size_t kNpyMagicBytes = 6;
// Magic, major and minor version, then the header length: 2 bytes in version 1, 4 in 2 and 3.
constexpr size_t kNpyPreambleV1 = kNpyMagicBytes + 2 + 2;
constexpr size_t kNpyPreambleV2 = kNpyMagicBytes + 2 + 4;
// How much of a malformed header an error quotes.
constexpr size_t kQuotedHeaderChars = 160;

struct DtypeName {
  const char* name;  // without the byte order
  NpyDtype dtype;
  int bytes;
};
constexpr DtypeName kDtypes[] = {
    {"b1", NpyDtype::b1, 1}, {"i1", NpyDtype::i1, 1}, {"u1", NpyDtype::u1, 1}, {"i2", NpyDtype::i2, 2},
    {"u2", NpyDtype::u2, 2}, {"i4", NpyDtype::i4, 4}, {"u4", NpyDtype::u4, 4}, {"i8", NpyDtype::i8, 8},
    {"u8", NpyDtype::u8, 8}, {"f2", NpyDtype::f2, 2}, {"f4", NpyDtype::f4, 4}, {"f8", NpyDtype::f8, 8},
};

std::string supported_descrs() {
  std::string out;
  for (const auto& d : kDtypes) out += std::string(out.empty() ? "" : " ") + npy_descr(d.dtype);
  return out;
}

// Bytes as a C-like literal, for a magic string that isn't numpy's.
std::string quoted_bytes(const uint8_t* p, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < n; ++i) {
    if (std::isprint(p[i]) && p[i] != '\\' && p[i] != '\'') {
      out += static_cast<char>(p[i]);
    } else {
      out += "\\x";
      out += kHex[p[i] >> 4];
      out += kHex[p[i] & 15];
    }
  }
  return out + "'";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

// A value of the header's dict: numpy writes strings, True/False and tuples of integers.
struct HeaderValue {
  enum Kind { string, boolean, tuple, other } kind = other;
  std::string text;
  bool flag = false;
  std::vector<int64_t> ints;
};

// A recursive-descent reader of the Python literal numpy writes:
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class HeaderParser {
 public:
  explicit HeaderParser(const std::string& text) : s_(text) {}

  // The dict's entries in order; nullopt when the text is not such a dict.
  std::optional<std::vector<std::pair<std::string, HeaderValue>>> parse() {
    std::vector<std::pair<std::string, HeaderValue>> out;
    if (!eat('{')) return std::nullopt;
    while (true) {
      if (eat('}')) break;
      std::string key;
      if (!string_literal(&key) || !eat(':')) return std::nullopt;
      HeaderValue v;
      if (!value(&v)) return std::nullopt;
      out.emplace_back(key, v);
      if (eat(',')) continue;
      if (eat('}')) break;
      return std::nullopt;
    }
    skip_space();
    return pos_ == s_.size() ? std::optional(out) : std::nullopt;
  }

 private:
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool string_literal(std::string* out) {
    skip_space();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) return false;
    const char quote = s_[pos_++];
    const size_t end = s_.find(quote, pos_);
    if (end == std::string::npos) return false;
    *out = s_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return true;
  }
  bool integer(int64_t* out) {
    skip_space();
    const size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      const uint64_t digit = static_cast<uint64_t>(s_[pos_++] - '0');
      if (v > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - digit) / 10) return false;
      v = v * 10 + digit;
    }
    if (pos_ == start) return false;
    if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;  // Python 2's long literals, in old files
    *out = static_cast<int64_t>(v);
    return true;
  }
  bool word(const char* w) {
    skip_space();
    const size_t n = std::strlen(w);
    if (s_.compare(pos_, n, w) != 0) return false;
    pos_ += n;
    return true;
  }
  bool value(HeaderValue* v) {
    skip_space();
    if (pos_ >= s_.size()) return false;
    const char c = s_[pos_];
    if (c == '\'' || c == '"') {
      v->kind = HeaderValue::string;
      return string_literal(&v->text);
    }
    if (word("True") || word("False")) {
      v->kind = HeaderValue::boolean;
      v->flag = s_[pos_ - 2] == 'u';  // Tr(u)e, Fal(s)e
      return true;
    }
    if (c == '(') {
      ++pos_;
      v->kind = HeaderValue::tuple;
      while (true) {
        if (eat(')')) return true;
        int64_t x = 0;
        if (!integer(&x)) return false;
        v->ints.push_back(x);
        if (eat(',')) continue;
        return eat(')');
      }
    }
    // Anything else (a structured dtype's list of fields, None, ...): skipped to the next
    // top-level comma or the dict's end, bracket depth counted, quotes respected.
    v->kind = HeaderValue::other;
    const size_t start = pos_;
    int depth = 0;
    while (pos_ < s_.size()) {
      const char d = s_[pos_];
      if (d == '\'' || d == '"') {
        std::string ignored;
        if (!string_literal(&ignored)) return false;
        continue;
      }
      if (d == '[' || d == '(' || d == '{') ++depth;
      if (((d == ']' || d == ')' || d == '}') && depth-- == 0) || (d == ',' && depth == 0)) {
        v->text = s_.substr(start, pos_ - start);
        return true;
      }
      ++pos_;
    }
    return false;
  }

  const std::string& s_;
  size_t pos_ = 0;
};

uint64_t read_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

int npy_item_bytes(NpyDtype dtype) {
  for (const auto& d : kDtypes) {
    if (d.dtype == dtype) return d.bytes;
  }
  return 1;
}

std::string npy_descr(NpyDtype dtype) {
  for (const auto& d : kDtypes) {
    if (d.dtype == dtype) return std::string(d.bytes == 1 ? "|" : "<") + d.name;
  }
  return "?";
}

bool npy_is_integer(NpyDtype dtype) {
  return dtype != NpyDtype::f2 && dtype != NpyDtype::f4 && dtype != NpyDtype::f8;
}

namespace {

// The dtype a header's 'descr' names: a plain, supported, little-endian (or one-byte) one.
const DtypeName& dtype_of(const std::string& path, const HeaderValue& descr) {
  if (descr.kind != HeaderValue::string) {
    throw DataError(path + ": expected a plain dtype (one of " + supported_descrs() +
                        "), found a structured dtype " + descr.text + ".",
                    "save one plain array a file: e.g. np.save('x.npy', a['field']) for each field.");
  }
  const std::string& text = descr.text;
  std::string body = text;
  char order = '|';
  if (!body.empty() && (body[0] == '<' || body[0] == '>' || body[0] == '|' || body[0] == '=')) {
    order = body[0];
    body = body.substr(1);
  }
  const DtypeName* found = nullptr;
  for (const auto& d : kDtypes) {
    if (body == d.name) found = &d;
  }
  if (found == nullptr) {
    throw DataError(path + ": expected one of the dtypes " + supported_descrs() + ", found '" + text + "'.",
                    "convert the array before saving it, e.g. np.save(path, a.astype(np.float32)) for "
                    "features, a.astype(np.int64) for labels.");
  }
  if (order == '>' && found->bytes > 1) {
    throw DataError(path + ": expected little-endian data ('" + npy_descr(found->dtype) + "'), found big-endian '" +
                        text + "'.",
                    "convert it before saving: np.save(path, a.astype(a.dtype.newbyteorder('<'))).");
  }
  return *found;
}

// The elements of one row of an array of `shape` whose data after the header is `available` bytes
// of `item_bytes`-byte items: exactly the shape's bytes, every size checked for overflow (a corrupt
// shape must not wrap around).
int64_t row_elements_of(const std::string& path, const std::vector<int64_t>& shape, uint64_t item_bytes,
                        uint64_t available, const std::string& descr) {
  uint64_t elements = 1;
  bool overflow = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    overflow |= __builtin_mul_overflow(elements, static_cast<uint64_t>(shape[i]), &elements);
  }
  uint64_t row = 1;
  for (size_t i = 1; i < shape.size(); ++i) overflow |= __builtin_mul_overflow(row, static_cast<uint64_t>(shape[i]), &row);
  uint64_t expected = 0;
  overflow |= __builtin_mul_overflow(elements, item_bytes, &expected);
  if (overflow || expected != available) {
    throw DataError(path + ": expected " + (overflow ? std::string("more than 2^64") : std::to_string(expected)) +
                        " bytes of data for shape " + shape_text(shape) + " of dtype " + descr + ", found " +
                        std::to_string(available) + (available < expected || overflow ? " (truncated?)." : " (trailing bytes?)."),
                    available < expected || overflow
                        ? "the file was cut short (an interrupted copy or np.save?): copy or save it again."
                        : "the header's shape doesn't describe the whole file: save the array again with np.save.");
  }
  return static_cast<int64_t>(row);
}

}  // namespace

namespace {

// The header of the .npy file `path` (`size` bytes at `b`) after checking its magic, version and
// lengths; its format version and where its data starts.
std::string read_header(const std::string& path, const uint8_t* b, uint64_t size, int* version,
                        uint64_t* data_offset) {
  const std::string not_npy_hint = "save the array with numpy.save (np.save(path, a)), one array a file.";

  if (size < kNpyPreambleV1 || std::memcmp(b, kNpyMagic, kNpyMagicBytes) != 0) {
    if (size >= 4 && std::memcmp(b, "PK\x03\x04", 4) == 0) {
      throw DataError(path + ": expected an .npy file (magic '\\x93NUMPY'), found a zip archive "
                             "(an .npz of several arrays?).",
                      "unpack it (np.load(path) gives a dict of arrays) and save each array with np.save.");
    }
    throw DataError(path + ": expected an .npy file starting with the magic '\\x93NUMPY', found " +
                        (size == 0 ? std::string("an empty file")
                                   : quoted_bytes(b, size < kNpyMagicBytes ? size : kNpyMagicBytes) +
                                         " in a file of " + std::to_string(size) + " bytes") + ".",
                    not_npy_hint);
  }
  const int major = b[6], minor = b[7];
  if (major < 1 || major > 3 || minor != 0) {
    throw DataError(path + ": expected .npy format version 1.0, 2.0 or 3.0, found " + std::to_string(major) + "." +
                        std::to_string(minor) + ".",
                    "save it with a numpy that writes one of these versions (every numpy since 1.0 does).");
  }
  *version = major;
  const size_t preamble = major == 1 ? kNpyPreambleV1 : kNpyPreambleV2;
  if (size < preamble) {
    throw DataError(path + ": expected a " + std::to_string(preamble) + "-byte .npy preamble, found a file of " +
                        std::to_string(size) + " bytes (truncated?).",
                    "copy or save the file again.");
  }
  const uint64_t header_len = read_le(b + 8, major == 1 ? 2 : 4);
  *data_offset = preamble + header_len;
  if (*data_offset > size) {
    throw DataError(path + ": expected a header of " + std::to_string(header_len) + " bytes after the " +
                        std::to_string(preamble) + "-byte preamble, found a file of " + std::to_string(size) +
                        " bytes (truncated?).",
                    "copy or save the file again.");
  }
  return std::string(reinterpret_cast<const char*>(b + preamble), header_len);
}

}  // namespace

NpyArray::NpyArray(const std::string& path) : path_(path), file_(std::make_shared<const MappedFile>(path)) {
  const uint8_t* b = file_->data();
  const uint64_t size = file_->size();
  const std::string header = read_header(path, b, size, &version_, &data_offset_);
  std::string quoted = header;
  while (!quoted.empty() && (quoted.back() == '\n' || quoted.back() == ' ' || quoted.back() == '\0')) quoted.pop_back();
  if (quoted.size() > kQuotedHeaderChars) quoted = quoted.substr(0, kQuotedHeaderChars) + "...";

  auto entries = HeaderParser(header).parse();
  if (!entries) {
    throw DataError(path + ": expected a header dict such as {'descr': '<f4', 'fortran_order': False, "
                           "'shape': (3, 4), }, found \"" + quoted + "\".",
                    "the file is corrupt or was not written by numpy.save; save the array again.");
  }
  const HeaderValue* descr = nullptr;
  const HeaderValue* fortran = nullptr;
  const HeaderValue* shape = nullptr;
  for (const auto& [key, value] : *entries) {
    if (key == "descr") descr = &value;
    if (key == "fortran_order") fortran = &value;
    if (key == "shape") shape = &value;
  }
  if (descr == nullptr || fortran == nullptr || shape == nullptr) {
    const char* missing = descr == nullptr ? "descr" : fortran == nullptr ? "fortran_order" : "shape";
    throw DataError(path + ": expected the header keys 'descr', 'fortran_order' and 'shape', found no '" + missing +
                        "' in \"" + quoted + "\".",
                    "the file was not written by numpy.save; save the array again with np.save.");
  }

  const DtypeName& found = dtype_of(path, *descr);
  descr_ = descr->text;
  dtype_ = found.dtype;

  if (fortran->kind != HeaderValue::boolean) {
    throw DataError(path + ": expected fortran_order True or False, found " + fortran->text + " in \"" + quoted + "\".",
                    "the file was not written by numpy.save; save the array again with np.save.");
  }
  if (fortran->flag) {
    throw DataError(path + ": expected C order (fortran_order False), found fortran_order True.",
                    "save a C-ordered copy: np.save(path, np.ascontiguousarray(a)).");
  }
  if (shape->kind != HeaderValue::tuple) {
    throw DataError(path + ": expected a shape tuple of non-negative integers, found " + shape->text + " in \"" +
                        quoted + "\".",
                    "the file was not written by numpy.save; save the array again with np.save.");
  }
  shape_ = shape->ints;

  row_elements_ = row_elements_of(path, shape_, static_cast<uint64_t>(found.bytes), size - data_offset_, descr_);
}

std::string NpyArray::shape_string() const { return shape_text(shape_); }

const uint8_t* NpyArray::data() const {
  return file_->size() > data_offset_ ? file_->data() + data_offset_ : nullptr;
}

namespace {

// Row elements of any integer dtype as int64. False (with the element's position) when a u8
// value doesn't fit.
template <typename T>
bool integers_to_int64(const uint8_t* src, int64_t n, int64_t* dst, int64_t* bad) {
  for (int64_t j = 0; j < n; ++j) {
    T v;
    std::memcpy(&v, src + j * sizeof(T), sizeof(T));
    if constexpr (std::is_same_v<T, uint64_t>) {
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        *bad = j;
        return false;
      }
    }
    dst[j] = static_cast<int64_t>(v);
  }
  return true;
}

bool to_int64(NpyDtype dtype, const uint8_t* src, int64_t n, int64_t* dst, int64_t* bad) {
  switch (dtype) {
    case NpyDtype::b1:
    case NpyDtype::u1: return integers_to_int64<uint8_t>(src, n, dst, bad);
    case NpyDtype::i1: return integers_to_int64<int8_t>(src, n, dst, bad);
    case NpyDtype::i2: return integers_to_int64<int16_t>(src, n, dst, bad);
    case NpyDtype::u2: return integers_to_int64<uint16_t>(src, n, dst, bad);
    case NpyDtype::i4: return integers_to_int64<int32_t>(src, n, dst, bad);
    case NpyDtype::u4: return integers_to_int64<uint32_t>(src, n, dst, bad);
    case NpyDtype::i8: return integers_to_int64<int64_t>(src, n, dst, bad);
    case NpyDtype::u8: return integers_to_int64<uint64_t>(src, n, dst, bad);
    default: return false;
  }
}

at::ScalarType float_scalar_type(NpyDtype dtype) {
  return dtype == NpyDtype::f2 ? at::kHalf : dtype == NpyDtype::f4 ? at::kFloat : at::kDouble;
}

// Where a float array is taken as is: a copy of the row, out of the mapping, so the sample owns it.
at::Tensor copy_float_row(const NpyArray& a, int64_t index, const std::vector<int64_t>& shape) {
  at::Tensor t = at::empty(shape, float_scalar_type(a.dtype()));
  if (a.row_bytes() > 0) std::memcpy(t.data_ptr(), a.row(index), a.row_bytes());
  return t;
}

std::vector<int64_t> row_shape(const NpyArray& a) {
  return std::vector<int64_t>(a.shape().begin() + 1, a.shape().end());
}

// An integer row that doesn't fit int64 (u8 values above 2^63 - 1).
[[noreturn]] void throw_too_large(const NpyArray& a, int64_t index, int64_t element) {
  throw DataError(a.path() + ": expected values that fit int64, found one above 2^63 - 1 at sample " +
                      std::to_string(index) + " (element " + std::to_string(element) + " of its row).",
                  "save the array as int64 (a.astype(np.int64)) after checking its values.");
}

}  // namespace

NpyDataset::NpyDataset(const std::string& inputs_path, const std::string& targets_path, const NpyOptions& options)
    : inputs_(inputs_path), targets_(targets_path), options_(options) {
  for (const NpyArray* a : {&inputs_, &targets_}) {
    const char* what = a == &inputs_ ? "inputs" : "targets";
    if (a->shape().empty()) {
      throw DataError(a->path() + ": expected an array of " + what + " with the samples along its first dimension " +
                          "([N, ...]), found a 0-d array (shape ()).",
                      "save the whole array of samples, not one value.");
    }
    if (a->rows() == 0) {
      throw DataError(a->path() + ": expected at least one sample, found shape " + a->shape_string() + ".",
                      "the array is empty: check the script that saved it.");
    }
  }
  if (targets_.rows() != inputs_.rows()) {
    throw DataError(targets_.path() + ": expected " + std::to_string(inputs_.rows()) + " targets, one per row of " +
                        inputs_.path() + " (shape " + inputs_.shape_string() + "), found " +
                        std::to_string(targets_.rows()) + " (shape " + targets_.shape_string() + ").",
                    "the two files hold different arrays or splits: save x and y of the same split, "
                    "samples along the first dimension of both.");
  }
  if (options_.num_classes > 0 && !npy_is_integer(targets_.dtype())) {
    throw DataError(targets_.path() + ": expected integer class indices (for " + std::to_string(options_.num_classes) +
                        " classes), found dtype '" + targets_.descr() + "'.",
                    "save the labels as integers: np.save(path, y.astype(np.int64)).");
  }
  input_shape_ = row_shape(inputs_);
  target_shape_ = row_shape(targets_);
  if (!options_.input_shape.empty()) {
    int64_t elements = 1;
    bool valid = true;
    for (int64_t d : options_.input_shape) {
      valid &= d >= 0;
      elements *= d;
    }
    if (!valid || elements != inputs_.row_elements()) {
      throw ConfigError("NpyOptions::input_shape for " + inputs_.path() + ": expected " +
                            std::to_string(inputs_.row_elements()) + " elements (a row of shape " +
                            inputs_.shape_string() + "), found " + shape_text(options_.input_shape) + " of " +
                            std::to_string(elements) + ".",
                        "give the shape of one sample with the same number of elements, e.g. (1, H, W) "
                        "for [N, H, W] images.");
    }
    input_shape_ = options_.input_shape;
  }
  if (inputs_.dtype() == NpyDtype::u1) {
    if (!(options_.uint8_std != 0.0) || !std::isfinite(options_.uint8_std) || !std::isfinite(options_.uint8_mean)) {
      throw ConfigError("NpyOptions for " + inputs_.path() + ": expected a finite uint8_mean and a finite, non-zero "
                            "uint8_std, found mean " + std::to_string(options_.uint8_mean) + " and std " +
                            std::to_string(options_.uint8_std) + ".",
                        "mean 0 and std 1 scale the bytes to [0, 1] without normalizing.");
    }
    // The table is computed by the IDX reader's own ops on the 256 byte values (x / 255 - mean) /
    // std, as float32 ATen ops: each element's result depends only on its byte, so a sample's
    // floats are the IDX path's, bit for bit, and get() is a lookup with no ATen op (no
    // intra-op threads started from the loader's threads).
    const std::array<float, 256> table = detail::normalized_uint8_table(options_.uint8_mean, options_.uint8_std);
    std::memcpy(uint8_table_, table.data(), sizeof(uint8_table_));
  }
}

Sample NpyDataset::get(int64_t index) {
  if (index < 0 || index >= size()) {
    throw DataError(name() + ": expected a sample index in [0, " + std::to_string(size()) + "), found " +
                        std::to_string(index) + ".",
                    "the sampler and the dataset disagree on its size: build the sampler from this dataset's size().");
  }
  Sample s;
  const int64_t n_in = inputs_.row_elements();
  const uint8_t* in = inputs_.row(index);
  if (inputs_.dtype() == NpyDtype::u1) {
    s.input = at::empty(input_shape_, at::kFloat);
    float* dst = s.input.data_ptr<float>();
    for (int64_t j = 0; j < n_in; ++j) dst[j] = uint8_table_[in[j]];
  } else if (npy_is_integer(inputs_.dtype())) {
    s.input = at::empty(input_shape_, at::kLong);
    int64_t bad = 0;
    if (!to_int64(inputs_.dtype(), in, n_in, s.input.data_ptr<int64_t>(), &bad)) throw_too_large(inputs_, index, bad);
  } else {
    s.input = copy_float_row(inputs_, index, input_shape_);
  }

  const int64_t n_t = targets_.row_elements();
  if (npy_is_integer(targets_.dtype())) {
    s.target = at::empty(target_shape_, at::kLong);
    int64_t* dst = s.target.data_ptr<int64_t>();
    int64_t bad = 0;
    if (!to_int64(targets_.dtype(), targets_.row(index), n_t, dst, &bad)) throw_too_large(targets_, index, bad);
    if (options_.num_classes > 0) {
      for (int64_t j = 0; j < n_t; ++j) {
        if (dst[j] < 0 || dst[j] >= options_.num_classes) {
          throw DataError(targets_.path() + ": expected class indices in 0.." + std::to_string(options_.num_classes - 1) +
                              ", found " + std::to_string(dst[j]) + " at sample " + std::to_string(index) + ".",
                          "the labels don't match the number of classes: check the classes the model is built "
                          "for, or the script that saved the labels.");
        }
      }
    }
  } else {
    s.target = copy_float_row(targets_, index, target_shape_);
  }
  return s;
}

}  // namespace train::datasets
