// TensorBoard event files by hand: CRC-32C, TFRecord framing, protobuf wire format for the few
// Event fields scalars need, and the run folder's resume rule (see event_file.h).
#include "train/base/event_file.h"

#include "train/base/error.h"
#include "train/base/files.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace train::tensorboard {
namespace {

// The byte-at-a-time table of the reflected Castagnoli polynomial. Event files get a few records
// a second at most, so the table is plenty fast.
std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

// Protobuf wire types.
constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

uint64_t get_le(const std::string& s, std::size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

// A cursor over one protobuf message; every read checks the bounds.
class ProtoReader {
 public:
  explicit ProtoReader(const std::string& bytes) : s_(bytes) {}
  bool done() const { return pos_ >= s_.size(); }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      const auto b = static_cast<unsigned char>(s_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("a varint longer than 10 bytes");
  }
  uint64_t fixed(int bytes) {
    need(static_cast<std::size_t>(bytes));
    const uint64_t v = get_le(s_, pos_, bytes);
    pos_ += static_cast<std::size_t>(bytes);
    return v;
  }
  std::string bytes() {
    const uint64_t n = varint();
    need(n);
    std::string out = s_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  void skip(int wire_type) {
    switch (wire_type) {
      case kVarint: varint(); return;
      case kFixed64: fixed(8); return;
      case kLengthDelimited: bytes(); return;
      case kFixed32: fixed(4); return;
      default: fail("wire type " + std::to_string(wire_type) + " (groups and unknown types are not used by Event)");
    }
  }

 private:
  void need(uint64_t n) const {
    if (n > s_.size() - pos_) fail("a field running past the message's end");
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw DataError("event record: expected a protobuf Event, found " + what + " at byte " + std::to_string(pos_) +
                        " of " + std::to_string(s_.size()) + ".",
                    "the file was not written by a TensorBoard event writer, or is damaged.");
  }
  const std::string& s_;
  std::size_t pos_ = 0;
};

Scalar decode_value(const std::string& bytes) {
  Scalar v;
  ProtoReader r(bytes);
  while (!r.done()) {
    const uint64_t key = r.varint();
    const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
    if (field == 1 && type == kLengthDelimited) {
      v.tag = r.bytes();
    } else if (field == 2 && type == kFixed32) {
      const auto bits = static_cast<uint32_t>(r.fixed(4));
      float f;
      std::memcpy(&f, &bits, sizeof(f));
      v.value = f;
    } else {
      r.skip(type);
    }
  }
  return v;
}

std::string errno_text() { return std::strerror(errno); }

// The <time> field of an event file's name (events.out.tfevents.<time>.<host>...), or -1.
long long name_time(const std::string& name) {
  static const std::string kPrefix = "events.out.tfevents.";
  if (name.rfind(kPrefix, 0) != 0) return -1;
  const std::size_t dot = name.find('.', kPrefix.size());
  const std::string digits = name.substr(kPrefix.size(), dot == std::string::npos ? std::string::npos : dot - kPrefix.size());
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

}  // namespace

uint32_t crc32c(const void* data, std::size_t size) {
  static const std::array<uint32_t, 256> kTable = make_crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xffffffffu;
  for (std::size_t i = 0; i < size; ++i) c = kTable[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(const void* data, std::size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string frame_record(const std::string& payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  put_le(out, payload.size(), 8);
  put_le(out, masked_crc32c(out.data(), 8), 4);
  out += payload;
  put_le(out, masked_crc32c(payload.data(), payload.size()), 4);
  return out;
}

RecordScan read_records(const std::string& bytes) {
  RecordScan scan;
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::string where = "record " + std::to_string(scan.records.size() + 1) + " at byte " + std::to_string(at);
    if (bytes.size() - at < 12) {
      scan.error = where + ": truncated length field (" + std::to_string(bytes.size() - at) + " of 12 bytes)";
      break;
    }
    const uint64_t length = get_le(bytes, at, 8);
    if (get_le(bytes, at + 8, 4) != masked_crc32c(bytes.data() + at, 8)) {
      scan.error = where + ": the length's CRC-32C doesn't match";
      break;
    }
    if (length > bytes.size() - at - 12 || bytes.size() - at - 12 - length < 4) {
      scan.error = where + ": truncated (length " + std::to_string(length) + ", " +
                   std::to_string(bytes.size() - at - 12) + " bytes left)";
      break;
    }
    const std::size_t data = at + 12;
    if (get_le(bytes, data + length, 4) != masked_crc32c(bytes.data() + data, length)) {
      scan.error = where + ": the data's CRC-32C doesn't match";
      break;
    }
    Record r;
    r.offset = at;
    r.end = data + length + 4;
    r.payload = bytes.substr(data, length);
    scan.records.push_back(std::move(r));
    at = data + length + 4;
    scan.valid_bytes = at;
  }
  return scan;
}

std::string encode_event(const Event& e) {
  std::string out;
  put_tag(out, 1, kFixed64);
  uint64_t bits;
  std::memcpy(&bits, &e.wall_time, sizeof(bits));
  put_le(out, bits, 8);
  if (e.step != 0) {
    put_tag(out, 2, kVarint);
    put_varint(out, static_cast<uint64_t>(e.step));  // negative steps take ten bytes, as protobuf's int64 does
  }
  if (!e.file_version.empty()) put_bytes(out, 3, e.file_version);
  if (!e.scalars.empty()) {
    std::string summary;
    for (const Scalar& s : e.scalars) {
      std::string value;
      put_bytes(value, 1, s.tag);
      put_tag(value, 2, kFixed32);
      const auto f = static_cast<float>(s.value);
      uint32_t fbits;
      std::memcpy(&fbits, &f, sizeof(fbits));
      put_le(value, fbits, 4);
      put_bytes(summary, 1, value);
    }
    put_bytes(out, 5, summary);
  }
  if (e.session_status != 0) {
    std::string session_log;
    put_tag(session_log, 1, kVarint);
    put_varint(session_log, static_cast<uint64_t>(e.session_status));
    put_bytes(out, 7, session_log);
  }
  return out;
}

Event decode_event(const std::string& payload) {
  Event e;
  ProtoReader r(payload);
  while (!r.done()) {
    const uint64_t key = r.varint();
    const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
    if (field == 1 && type == kFixed64) {
      const uint64_t bits = r.fixed(8);
      std::memcpy(&e.wall_time, &bits, sizeof(bits));
    } else if (field == 2 && type == kVarint) {
      e.step = static_cast<int64_t>(r.varint());
    } else if (field == 3 && type == kLengthDelimited) {
      e.file_version = r.bytes();
    } else if (field == 5 && type == kLengthDelimited) {
      const std::string summary = r.bytes();
      ProtoReader s(summary);
      while (!s.done()) {
        const uint64_t k = s.varint();
        if ((k >> 3) == 1 && (k & 7) == kLengthDelimited) {
          e.scalars.push_back(decode_value(s.bytes()));
        } else {
          s.skip(static_cast<int>(k & 7));
        }
      }
    } else if (field == 7 && type == kLengthDelimited) {
      const std::string log = r.bytes();
      ProtoReader s(log);
      e.session_status = 0;
      while (!s.done()) {
        const uint64_t k = s.varint();
        if ((k >> 3) == 1 && (k & 7) == kVarint) {
          e.session_status = static_cast<int>(s.varint());
        } else {
          s.skip(static_cast<int>(k & 7));
        }
      }
    } else {
      r.skip(type);
    }
  }
  return e;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const std::string& name : files::list_dir(dir)) {
    const std::string path = files::join(dir, name);
    if (name.find("tfevents") != std::string::npos && files::is_regular_file(path)) out.push_back(path);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Superseded supersede_after(const std::string& dir, int64_t start_step, const std::string& option) {
  Superseded s;
  for (const std::string& path : event_files(dir)) {
    bool ok = false;
    const std::string bytes = files::read_text(path, &ok);
    if (!ok) {
      throw ConfigError(option + " " + dir + ": expected to read the earlier event file " + path +
                            ", found it unreadable (" + errno_text() + ").",
                        "check its permissions, or give this run a new folder.");
    }
    const RecordScan scan = read_records(bytes);
    // Cut at the first record past the start step (an attempt writes its steps in order), or at
    // the damage: a torn last record from a killed job, or bytes whose CRCs don't match.
    uint64_t keep = scan.valid_bytes;
    int dropped = scan.error.empty() ? 0 : 1;
    for (const Record& record : scan.records) {
      int64_t step = start_step + 1;  // an undecodable record can't be shown anyway: cut from here
      try {
        step = decode_event(record.payload).step;
      } catch (const DataError&) {
      }
      if (keep == scan.valid_bytes && step > start_step) keep = record.offset;
      if (record.offset >= keep) {
        ++dropped;
        s.last_step = std::max(s.last_step, step);
      }
    }
    if (keep == bytes.size()) continue;
    if (::truncate(path.c_str(), static_cast<off_t>(keep)) != 0) {
      throw ConfigError(option + " " + dir + ": expected to cut the earlier event file " + path + " back to step " +
                            std::to_string(start_step) + ", found it can't be written (" + errno_text() + ").",
                        "check its permissions, or give this run a new folder.");
    }
    ++s.files;
    s.records += dropped;
  }
  return s;
}

EventFileWriter::EventFileWriter(const std::string& dir, int64_t start_step, const std::string& option)
    : option_(option) {
  if (dir.empty()) {
    throw ConfigError(option + ": expected a folder for the event files, found an empty path.",
                      "e.g. " + option + " runs/mnist-1 (then: tensorboard --logdir runs).");
  }
  if (files::exists(dir) && !files::is_directory(dir)) {
    throw ConfigError(option + " " + dir + ": expected a folder for the event files, found a file.",
                      "give a folder (it is created when missing), e.g. " + option + " runs/mnist-1.");
  }
  const std::string made = files::make_dirs(dir);
  if (!made.empty()) {
    throw ConfigError(option + " " + dir + ": expected a folder that can be created, found: " + made + ".",
                      "check the parent folder's permissions, or pick a folder on a writable file system.");
  }
  superseded_ = supersede_after(dir, start_step, option);
  // The new file sorts after every earlier one (TensorBoard reads a folder's files in name order),
  // even when an earlier attempt started within the same second.
  long long t = static_cast<long long>(std::time(nullptr));
  for (const std::string& path : event_files(dir)) t = std::max(t, name_time(files::basename(path)) + 1);
  char host[256] = "host";
  ::gethostname(host, sizeof(host) - 1);
  host[sizeof(host) - 1] = '\0';
  static std::atomic<int> counter{0};
  char name[512];
  std::snprintf(name, sizeof(name), "events.out.tfevents.%010lld.%s.%d.%d", t, host, static_cast<int>(::getpid()),
                counter++);
  path_ = files::join(dir, name);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw ConfigError(option + " " + dir + ": expected a writable folder, found that " + name +
                          " can't be created there (" + errno_text() + ").",
                      "check the folder's permissions and free space, or pick another folder.");
  }
  const double now = static_cast<double>(std::time(nullptr));
  Event version;
  version.wall_time = now;
  version.file_version = kFileVersion;
  append(version);
  Event start;
  start.wall_time = now;
  start.step = start_step + 1;
  start.session_status = 1;  // SessionLog.START: TensorBoard drops what it holds from step start_step + 1 on
  append(start);
}

EventFileWriter::~EventFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void EventFileWriter::write_scalars(int64_t step, double wall_time, const std::vector<Scalar>& scalars) {
  Event e;
  e.wall_time = wall_time;
  e.step = step;
  e.scalars = scalars;
  append(e);
}

void EventFileWriter::append(const Event& event) {
  // One write(2) per record: a reader never sees half of one unless the disk fills or the job dies.
  const std::string record = frame_record(encode_event(event));
  std::size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw Error(option_ + ": writing " + path_ + " failed after " + std::to_string(done) + " of " +
                      std::to_string(record.size()) + " bytes (" + (n < 0 ? errno_text() : std::string("no progress")) +
                      ").",
                  "check the free space and that the folder still exists; a resumed run cuts the torn record.");
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace train::tensorboard
