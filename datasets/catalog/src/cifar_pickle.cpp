// The restricted unpickler behind cifar-10-batches-py. A pickle is a program for a stack machine;
// this one knows only the instructions a CIFAR-10 batch uses, builds plain values from them, and
// treats the few globals it accepts as names of values it constructs itself (an ndarray, a dtype,
// latin-1 bytes). Any other opcode or global stops the read with the file and offset named.
#include "train/catalog/catalog.h"
#include "train/catalog/cifar_batch.h"
#include "train/base/error.h"

#include <cstdio>
#include <memory>
#include <unordered_map>

namespace train::cifar {
namespace {

const char* kHint =
    "this reader accepts torchvision's CIFAR-10 batches only (cifar-10-batches-py, from cifar-10-python.tar.gz) "
    "and never runs what a pickle asks for; re-extract the archive, download it again with torchvision's "
    "download=True, or use the binary version (cifar-10-batches-bin).";

// Memo entries a real batch uses: a few thousand (the file names). Far more means a hostile file.
constexpr std::size_t kMaxMemo = 1u << 20;

struct Value;
using Ptr = std::shared_ptr<Value>;

struct Value {
  enum class Kind { none, boolean, integer, text, bytes, list, tuple, dict, global, array, dtype, mark };
  Kind kind = Kind::none;
  int64_t integer = 0;
  std::string str;             // text (UTF-8), bytes, global "module name", dtype code
  std::vector<Ptr> items;      // list, tuple; dict as key, value, key, value...
  std::vector<int64_t> shape;  // array
  std::string dtype;           // array: dtype code once built
  bool fortran = false;
  bool built = false;
};

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::none: return "None";
    case Value::Kind::boolean: return "a bool";
    case Value::Kind::integer: return "an int";
    case Value::Kind::text: return "a str";
    case Value::Kind::bytes: return "bytes";
    case Value::Kind::list: return "a list";
    case Value::Kind::tuple: return "a tuple";
    case Value::Kind::dict: return "a dict";
    case Value::Kind::global: return "a global";
    case Value::Kind::array: return "a numpy array";
    case Value::Kind::dtype: return "a numpy dtype";
    case Value::Kind::mark: return "a mark";
  }
  return "?";
}

Ptr make(Value::Kind k) {
  auto v = std::make_shared<Value>();
  v->kind = k;
  return v;
}

std::string hex(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "0x%02x", v);
  return buf;
}

// UTF-8 text to latin-1 bytes (what _codecs.encode(s, 'latin1') gives); false for a code point
// above 255 or invalid UTF-8.
bool utf8_to_latin1(const std::string& in, std::string& out) {
  out.clear();
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const auto c = static_cast<unsigned char>(in[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if ((c & 0xe0) == 0xc0 && i + 1 < in.size()) {
      const unsigned cp = ((c & 0x1fu) << 6) | (static_cast<unsigned char>(in[i + 1]) & 0x3fu);
      if (cp > 255) return false;
      out.push_back(static_cast<char>(cp));
      ++i;
    } else {
      return false;
    }
  }
  return true;
}

class Unpickler {
 public:
  Unpickler(const std::string& path, const std::vector<uint8_t>& b) : path_(path), b_(b) {}

  Ptr run() {
    while (true) {
      op_at_ = pos_;
      const uint8_t op = u8();
      if (op == '.') return stop();
      // A group returns false, having read and pushed nothing, for an opcode it doesn't handle; one
      // that no group handles stops the read.
      if (!header_or_constant(op) && !scalar(op) && !memo_or_global(op) && !container_or_call(op)) unexpected(op, "");
    }
  }

  [[noreturn]] void fail(const std::string& expected, const std::string& found) const {
    throw DataError(path_ + ": expected " + expected + ", found " + found + " (pickle opcode at byte " +
                        std::to_string(op_at_) + ").",
                    kHint);
  }

 private:
  [[noreturn]] void unexpected(uint8_t op, const std::string& what) const {
    std::string shown = hex(op);
    if (op >= 0x20 && op < 0x7f) shown += " '" + std::string(1, static_cast<char>(op)) + "'";
    throw DataError(path_ + ": expected only the pickle opcodes of a CIFAR-10 batch, found opcode " + shown +
                        (what.empty() ? "" : " (" + what + ")") + " at byte " + std::to_string(op_at_) + ".",
                    kHint);
  }

  // PROTO, FRAME and the opcodes that push a constant (empty containers, MARK, None, bools).
  bool header_or_constant(uint8_t op) {
    switch (op) {
      case 0x80: {  // PROTO
        const uint8_t v = u8();
        if (v < 2 || v > 5) fail("pickle protocol 2 to 5", "protocol " + std::to_string(v));
        break;
      }
      case 0x95: take(8); break;  // FRAME: a length hint only
      case '}': push(make(Value::Kind::dict)); break;
      case ']': push(make(Value::Kind::list)); break;
      case ')': push(make(Value::Kind::tuple)); break;
      case '(': push(make(Value::Kind::mark)); break;
      case 'N': push(make(Value::Kind::none)); break;
      case 0x88: case 0x89: {  // NEWTRUE, NEWFALSE
        auto v = make(Value::Kind::boolean);
        v->integer = op == 0x88;
        push(v);
        break;
      }
      default: return false;
    }
    return true;
  }

  // Ints, byte strings and text, read from the operands.
  bool scalar(uint8_t op) {
    switch (op) {
      case 'K': push_int(u8()); break;                                          // BININT1
      case 'M': push_int(uint_le(2)); break;                                   // BININT2
      case 'J': push_int(static_cast<int32_t>(static_cast<uint32_t>(uint_le(4)))); break;  // BININT
      case 0x8a: {  // LONG1
        const uint8_t n = u8();
        if (n > 8) unexpected(op, "LONG1 of " + std::to_string(n) + " bytes");
        uint64_t v = n == 0 ? 0 : uint_le(n);
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t(0) << (8 * n);  // sign-extend
        push_int(static_cast<int64_t>(v));
        break;
      }
      case 'U': push_str(Value::Kind::bytes, u8()); break;        // SHORT_BINSTRING (Python 2 str)
      case 'T': push_str(Value::Kind::bytes, uint_le(4)); break;  // BINSTRING
      case 'C': push_str(Value::Kind::bytes, u8()); break;        // SHORT_BINBYTES
      case 'B': push_str(Value::Kind::bytes, uint_le(4)); break;  // BINBYTES
      case 0x8e: push_str(Value::Kind::bytes, uint_le(8)); break;  // BINBYTES8
      case 0x96: push_str(Value::Kind::bytes, uint_le(8)); break;  // BYTEARRAY8 (protocol 5: an array's buffer)
      case 0x8c: push_str(Value::Kind::text, u8()); break;        // SHORT_BINUNICODE
      case 'X': push_str(Value::Kind::text, uint_le(4)); break;   // BINUNICODE
      case 0x8d: push_str(Value::Kind::text, uint_le(8)); break;  // BINUNICODE8
      default: return false;
    }
    return true;
  }

  // The memo (values stored and fetched again by index) and the globals, checked against the few
  // this reader accepts.
  bool memo_or_global(uint8_t op) {
    switch (op) {
      case 'q': memo_put(u8()); break;                            // BINPUT
      case 'r': memo_put(uint_le(4)); break;                      // LONG_BINPUT
      case 0x94: memo_put(memo_.size()); break;                   // MEMOIZE
      case 'h': memo_get(u8()); break;                            // BINGET
      case 'j': memo_get(uint_le(4)); break;                      // LONG_BINGET
      case 'c': {  // GLOBAL "module\nname\n"
        const std::string module = line();
        const std::string name = line();
        push_global(module, name);
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        Ptr name = pop(), module = pop();
        if (module->kind != Value::Kind::text || name->kind != Value::Kind::text) {
          fail("STACK_GLOBAL with a module and a name", std::string(kind_name(module->kind)) + " and " + kind_name(name->kind));
        }
        push_global(module->str, name->str);
        break;
      }
      default: return false;
    }
    return true;
  }

  // Opcodes that combine values already on the stack: tuples, list appends, dict items, REDUCE and BUILD.
  bool container_or_call(uint8_t op) {
    switch (op) {
      case 't': {  // TUPLE
        auto t = make(Value::Kind::tuple);
        t->items = pop_to_mark();
        push(t);
        break;
      }
      case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
        auto t = make(Value::Kind::tuple);
        t->items.resize(op - 0x84);
        for (auto it = t->items.rbegin(); it != t->items.rend(); ++it) *it = pop();
        push(t);
        break;
      }
      case 'a': {  // APPEND
        Ptr v = pop();
        expect_top(Value::Kind::list, op)->items.push_back(v);
        break;
      }
      case 'e': {  // APPENDS
        std::vector<Ptr> vs = pop_to_mark();
        Ptr list = expect_top(Value::Kind::list, op);
        list->items.insert(list->items.end(), vs.begin(), vs.end());
        break;
      }
      case 's': {  // SETITEM
        Ptr v = pop(), k = pop();
        Ptr d = expect_top(Value::Kind::dict, op);
        d->items.push_back(k);
        d->items.push_back(v);
        break;
      }
      case 'u': {  // SETITEMS
        std::vector<Ptr> kv = pop_to_mark();
        if (kv.size() % 2 != 0) fail("key, value pairs before SETITEMS", std::to_string(kv.size()) + " values");
        Ptr d = expect_top(Value::Kind::dict, op);
        d->items.insert(d->items.end(), kv.begin(), kv.end());
        break;
      }
      case 'R': reduce(); break;
      case 'b': build(); break;
      default: return false;
    }
    return true;
  }

  // STOP: the one value left is the result, and nothing may follow it.
  Ptr stop() {
    Ptr top = pop();
    if (!stack_.empty()) fail("one value left at STOP", std::to_string(stack_.size() + 1) + " values");
    if (pos_ != b_.size()) {
      fail("the file to end at STOP (byte " + std::to_string(pos_) + ")",
           std::to_string(b_.size() - pos_) + " trailing bytes");
    }
    return top;
  }

  void need(uint64_t n) const {
    if (n <= b_.size() - pos_) return;
    // A batch ends as its dict is closed: SETITEMS (or SETITEM), then STOP. A file cut short almost
    // never ends in those two bytes; one that does is whole, and a length that runs past its end
    // is a corrupted byte, not missing ones.
    const std::size_t size = b_.size();
    const bool whole = size >= 2 && b_[size - 1] == '.' && (b_[size - 2] == 'u' || b_[size - 2] == 's');
    if (pos_ != op_at_ && whole) {
      throw DataError(path_ + ": expected the length " + std::to_string(n) + " of the pickle opcode at byte " +
                          std::to_string(op_at_) + " to fit in the file, found only " +
                          std::to_string(b_.size() - pos_) + " bytes left of " + std::to_string(b_.size()) +
                          "; the file ends with STOP as a whole pickle does, so it is malformed (a corrupted byte), "
                          "not truncated.",
                      "the file is damaged: re-extract cifar-10-python.tar.gz or download it again.");
    }
    throw DataError(path_ + ": expected " + std::to_string(n) + " more bytes for the pickle opcode at byte " +
                        std::to_string(op_at_) + ", found the file ending at byte " + std::to_string(b_.size()) +
                        " (truncated?).",
                    "the file is cut short: re-extract cifar-10-python.tar.gz or download it again.");
  }
  uint8_t u8() {
    need(1);
    return b_[pos_++];
  }
  uint64_t uint_le(int n) {
    need(n);
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t(b_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }
  std::string take(uint64_t n) {
    need(n);
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  std::string line() {
    std::string s;
    while (true) {
      const char c = static_cast<char>(u8());
      if (c == '\n') return s;
      if (s.size() > 200) fail("a global's name on one short line", "a line of more than 200 bytes");
      s.push_back(c);
    }
  }

  void push(Ptr v) { stack_.push_back(std::move(v)); }
  void push_int(int64_t i) {
    auto v = make(Value::Kind::integer);
    v->integer = i;
    push(v);
  }
  void push_str(Value::Kind k, uint64_t n) {
    auto v = make(k);
    v->str = take(n);
    push(v);
  }
  Ptr pop() {
    if (stack_.empty() || stack_.back()->kind == Value::Kind::mark) fail("a value on the stack", "none");
    Ptr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  std::vector<Ptr> pop_to_mark() {
    std::size_t i = stack_.size();
    while (i > 0 && stack_[i - 1]->kind != Value::Kind::mark) --i;
    if (i == 0) fail("a MARK on the stack", "none");
    std::vector<Ptr> out(stack_.begin() + i, stack_.end());
    stack_.resize(i - 1);
    return out;
  }
  Ptr expect_top(Value::Kind k, uint8_t op) {
    if (stack_.empty() || stack_.back()->kind != k) {
      fail(std::string(kind_name(k)) + " under opcode " + hex(op),
           stack_.empty() ? "an empty stack" : kind_name(stack_.back()->kind));
    }
    return stack_.back();
  }
  void memo_put(uint64_t index) {
    if (stack_.empty()) fail("a value to memoize", "an empty stack");
    if (memo_.size() >= kMaxMemo && !memo_.count(index)) fail("fewer memo entries", "more than " + std::to_string(kMaxMemo));
    memo_[index] = stack_.back();
  }
  void memo_get(uint64_t index) {
    const auto it = memo_.find(index);
    if (it == memo_.end()) fail("a memo entry " + std::to_string(index), "none stored");
    push(it->second);
  }

  void push_global(const std::string& module, const std::string& name) {
    const bool ok = ((module == "numpy.core.multiarray" || module == "numpy._core.multiarray") && name == "_reconstruct") ||
                    ((module == "numpy.core.numeric" || module == "numpy._core.numeric") && name == "_frombuffer") ||
                    (module == "numpy" && (name == "ndarray" || name == "dtype")) ||
                    (module == "_codecs" && name == "encode");
    if (!ok) {
      throw DataError(path_ + ": expected only the globals of a CIFAR-10 batch (numpy's _reconstruct, _frombuffer, "
                          "ndarray, dtype; _codecs.encode), found global '" + module + "." + name + "' at byte " +
                          std::to_string(op_at_) + "; it was not run.",
                      kHint);
    }
    auto g = make(Value::Kind::global);
    g->str = name == "_reconstruct" || name == "_frombuffer" ? name : module + "." + name;
    push(g);
  }

  // REDUCE: callable(*args), for the accepted globals only, each with the arguments numpy and
  // Python give them in these files.
  void reduce() {
    Ptr args = pop(), fn = pop();
    if (fn->kind != Value::Kind::global || args->kind != Value::Kind::tuple) {
      fail("REDUCE of an accepted global with a tuple", std::string(kind_name(fn->kind)) + " with " + kind_name(args->kind));
    }
    const auto& a = args->items;
    if (fn->str == "_codecs.encode") {  // Python 3's protocol-2 spelling of bytes: encode(text, 'latin1')
      if (a.size() != 2 || a[0]->kind != Value::Kind::text || a[1]->kind != Value::Kind::text ||
          (a[1]->str != "latin1" && a[1]->str != "latin-1")) {
        fail("_codecs.encode(str, 'latin1')", "other arguments");
      }
      auto v = make(Value::Kind::bytes);
      if (!utf8_to_latin1(a[0]->str, v->str)) fail("latin-1 text for _codecs.encode", "characters above U+00FF");
      push(v);
    } else if (fn->str == "_reconstruct") {  // _reconstruct(ndarray, (0,), b'b'): an empty array, filled by BUILD
      if (a.size() != 3 || a[0]->kind != Value::Kind::global || a[0]->str != "numpy.ndarray") {
        fail("_reconstruct(numpy.ndarray, shape, dtype)", "other arguments");
      }
      push(make(Value::Kind::array));
    } else if (fn->str == "_frombuffer") {  // protocol 5: _frombuffer(buffer, dtype, shape, order)
      frombuffer(a);
    } else if (fn->str == "numpy.dtype") {  // dtype('u1', False, True)
      if (a.empty() || (a[0]->kind != Value::Kind::text && a[0]->kind != Value::Kind::bytes)) {
        fail("numpy.dtype(code, ...)", "other arguments");
      }
      auto v = make(Value::Kind::dtype);
      v->str = a[0]->str;
      push(v);
    } else {
      fail("REDUCE of _reconstruct, _frombuffer, dtype or _codecs.encode", "REDUCE of '" + fn->str + "'");
    }
  }

  // numpy's protocol-5 spelling of an array: the raw buffer (in-band, as BYTEARRAY8), the dtype, the
  // shape and the order ('C' or 'F'; 'K' with an axis order for other layouts). The array is built
  // here, whole; BUILD never follows.
  void frombuffer(const std::vector<Ptr>& a) {
    if ((a.size() != 4 && a.size() != 5) || a[0]->kind != Value::Kind::bytes || a[1]->kind != Value::Kind::dtype ||
        a[2]->kind != Value::Kind::tuple || a[3]->kind != Value::Kind::text) {
      const bool in_band = a.empty() || a[0]->kind == Value::Kind::bytes;
      fail("_frombuffer(bytes, dtype, shape, order)",
           std::to_string(a.size()) + " other arguments" +
               (in_band ? "" : " (an out-of-band buffer? " + std::string(kind_name(a[0]->kind)) + ")"));
    }
    if (a.size() == 5 && a[4]->kind != Value::Kind::none) fail("_frombuffer without an axis order", "an axis order");
    if (a[3]->str != "C" && a[3]->str != "F") fail("_frombuffer of order 'C' or 'F'", "order '" + a[3]->str + "'");
    auto v = make(Value::Kind::array);
    for (const Ptr& d : a[2]->items) {
      if (d->kind != Value::Kind::integer || d->integer < 0) fail("a shape of non-negative ints", "other values");
      v->shape.push_back(d->integer);
    }
    v->dtype = a[1]->str;
    v->fortran = a[3]->str == "F";
    v->str = a[0]->str;
    v->built = true;
    push(v);
  }

  // BUILD: sets an object's state. Arrays get (version, shape, dtype, fortran, raw bytes); a dtype
  // gets (version, byte order, ...), of which only the byte order matters for bytes.
  void build() {
    Ptr state = pop();
    if (stack_.empty()) fail("an object under BUILD", "an empty stack");
    Ptr obj = stack_.back();
    if (obj->kind == Value::Kind::dtype) return;  // one-byte items: byte order and the rest don't matter
    if (obj->kind != Value::Kind::array || obj->built || state->kind != Value::Kind::tuple || state->items.size() != 5) {
      fail("BUILD of a numpy array from (version, shape, dtype, fortran, data)",
           std::string("BUILD of ") + kind_name(obj->kind) + " from " + kind_name(state->kind));
    }
    const auto& s = state->items;
    if (s[1]->kind != Value::Kind::tuple || s[2]->kind != Value::Kind::dtype ||
        (s[4]->kind != Value::Kind::bytes && s[4]->kind != Value::Kind::text)) {
      fail("a numpy array state (version, shape, dtype, fortran, bytes)", "other values (an object array?)");
    }
    for (const Ptr& d : s[1]->items) {
      if (d->kind != Value::Kind::integer || d->integer < 0) fail("a shape of non-negative ints", "other values");
      obj->shape.push_back(d->integer);
    }
    obj->dtype = s[2]->str;
    obj->fortran = s[3]->integer != 0;
    if (s[4]->kind == Value::Kind::text) {
      if (!utf8_to_latin1(s[4]->str, obj->str)) fail("latin-1 array data", "characters above U+00FF");
    } else {
      obj->str = std::move(s[4]->str);
    }
    obj->built = true;
  }

  const std::string& path_;
  const std::vector<uint8_t>& b_;
  std::size_t pos_ = 0;
  std::size_t op_at_ = 0;
  std::vector<Ptr> stack_;
  std::unordered_map<uint64_t, Ptr> memo_;
};

std::string key_text(const Ptr& k) {
  return k->kind == Value::Kind::text || k->kind == Value::Kind::bytes ? k->str : std::string("<") + kind_name(k->kind) + ">";
}

}  // namespace

Batch decode_pickle(const std::string& path, const std::vector<uint8_t>& bytes) {
  Unpickler u(path, bytes);
  Ptr top = u.run();
  const auto bad = [&path](const std::string& expected, const std::string& found) {
    throw DataError(path + ": expected " + expected + ", found " + found + ".", kHint);
  };
  if (top->kind != Value::Kind::dict) bad("a CIFAR-10 batch: a dict with 'data' and 'labels'", kind_name(top->kind));
  Ptr data, labels;
  std::string keys;
  for (std::size_t i = 0; i + 1 < top->items.size(); i += 2) {
    const std::string k = key_text(top->items[i]);
    keys += (keys.empty() ? "'" : ", '") + k + "'";
    if (k == "data") data = top->items[i + 1];
    if (k == "labels") labels = top->items[i + 1];
  }
  if (!data || !labels) {
    bad("a CIFAR-10 batch: a dict with 'data' and 'labels'",
        "a dict with keys " + (keys.empty() ? std::string("(none)") : keys) +
            (keys.find("fine_labels") != std::string::npos ? " (CIFAR-100?)" : ""));
  }
  if (data->kind != Value::Kind::array || !data->built) bad("'data' to be a numpy uint8 array", kind_name(data->kind));
  if (data->dtype != "u1" && data->dtype != "|u1") bad("'data' of dtype uint8 ('u1')", "dtype '" + data->dtype + "'");
  std::string shape;
  for (int64_t d : data->shape) shape += (shape.empty() ? "" : " x ") + std::to_string(d);
  if (data->shape.size() != 2 || data->shape[1] != catalog::kCifarPixelBytes || data->shape[0] < 1 || data->fortran) {
    bad("'data' of shape N x 3072 in C order (32x32 pixels, 3 planes)",
        "shape " + (shape.empty() ? std::string("()") : shape) + (data->fortran ? " in Fortran order" : ""));
  }
  const int64_t n = data->shape[0];
  if (int64_t(data->str.size()) != n * catalog::kCifarPixelBytes) {
    bad(std::to_string(n * catalog::kCifarPixelBytes) + " bytes of pixels for shape " + shape,
        std::to_string(data->str.size()) + " bytes");
  }
  if (labels->kind != Value::Kind::list) bad("'labels' to be a list of ints", kind_name(labels->kind));
  if (int64_t(labels->items.size()) != n) {
    bad(std::to_string(n) + " labels (one per row of 'data')", std::to_string(labels->items.size()));
  }
  Batch out;
  out.labels.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    const Ptr& l = labels->items[i];
    if (l->kind != Value::Kind::integer) bad("'labels' to be ints", std::string(kind_name(l->kind)) + " at index " + std::to_string(i));
    if (l->integer < 0 || l->integer >= catalog::kNumClasses) {
      bad("labels in 0..9", std::to_string(l->integer) + " at index " + std::to_string(i));
    }
    out.labels.push_back(static_cast<uint8_t>(l->integer));
  }
  out.pixels.assign(data->str.begin(), data->str.end());
  return out;
}

}  // namespace train::cifar
