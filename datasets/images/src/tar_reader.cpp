// Tar archives' members found by their headers alone (tar_shards.h's list_tar_members): POSIX ustar
// (with its name prefix), pax extended headers and GNU long names, as Python's tarfile reads them;
// checked more strictly than tarfile, which stops silently at a damaged header after the first.
#include "index_cache.h"
#include "train/base/error.h"
#include "train/datasets/tar_shards.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>

namespace train::datasets {
namespace {

constexpr uint64_t kBlock = 512;

uint64_t padded(uint64_t size) { return (size + kBlock - 1) / kBlock * kBlock; }

// tarfile's nts: the field up to its first NUL.
std::string nts(const uint8_t* p, size_t n) {
  size_t len = 0;
  while (len < n && p[len] != 0) ++len;
  return std::string(reinterpret_cast<const char*>(p), len);
}

/// What is being read, for messages.
struct TarPlace {
  const std::string& path;
  uint64_t file_size;
  uint64_t header;        // offset of the header being read
  std::string previous;   // the last member read, for a header that can't be named itself
};

std::string after(const TarPlace& at) {
  return at.previous.empty() ? std::string(" (the first header)") : " (after member " + at.previous + ")";
}

[[noreturn]] void throw_bad_header(const TarPlace& at, const std::string& expected, const std::string& found) {
  throw DataError(at.path + ": header at offset " + std::to_string(at.header) + after(at) + ": expected " + expected +
                      ", found " + found + ".",
                  "the shard is damaged or not a tar file: write or copy it again (tar tvf " + at.path +
                      " shows how far it reads).");
}

// tarfile's nti: octal digits (spaces and NULs around them), or GNU's base-256 when the first byte
// has its high bit set.
int64_t number_field(const uint8_t* p, size_t n, const char* what, const TarPlace& at) {
  if (p[0] == 0xff) return -1;  // negative: no size or checksum is
  if (p[0] == 0x80) {
    uint64_t v = 0;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 55 != 0) throw_bad_header(at, std::string("a ") + what + " below 2^63", "a larger base-256 number");
      v = (v << 8) | p[i];
    }
    return static_cast<int64_t>(v);
  }
  const std::string s = nts(p, n);
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\n')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\n')) --e;
  int64_t v = 0;
  for (size_t i = b; i < e; ++i) {
    if (s[i] < '0' || s[i] > '7' || v > (int64_t{1} << 60)) {
      throw_bad_header(at, std::string("an octal number in its ") + what + " field", "\"" + s + "\"");
    }
    v = v * 8 + (s[i] - '0');
  }
  return v;
}

void check_checksum(const uint8_t* h, const TarPlace& at) {
  const int64_t recorded = number_field(h + 148, 8, "checksum", at);
  int64_t sum_unsigned = 0, sum_signed = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    const bool in_field = i >= 148 && i < 156;
    sum_unsigned += in_field ? ' ' : h[i];
    sum_signed += in_field ? ' ' : static_cast<int8_t>(h[i]);
  }
  if (recorded != sum_unsigned && recorded != sum_signed) {
    throw_bad_header(at, "the checksum its header records (" + std::to_string(recorded) + ")",
                     "the header's bytes summing to " + std::to_string(sum_unsigned) + " (a bad header checksum)");
  }
}

/// The fields a pax header ('x' for the next member, 'g' for all after it) may set that matter here.
struct PaxFields {
  std::optional<std::string> path;
  std::optional<uint64_t> size;
};

// pax records: "LENGTH KEY=VALUE\n", LENGTH counting the whole record.
void parse_pax(const std::string& data, PaxFields& out, const TarPlace& at) {
  size_t pos = 0;
  while (pos < data.size() && data[pos] != '\0') {
    const size_t space = data.find(' ', pos);
    uint64_t len = 0;
    for (size_t i = pos; space != std::string::npos && i < space && len < data.size(); ++i) {
      len = std::isdigit(static_cast<unsigned char>(data[i])) ? len * 10 + (data[i] - '0') : data.size() + 1;
    }
    const size_t eq = space == std::string::npos ? space : data.find('=', space);
    if (space == std::string::npos || len <= space - pos || pos + len > data.size() || eq >= pos + len ||
        data[pos + len - 1] != '\n') {
      throw_bad_header(at, "pax records \"LENGTH KEY=VALUE\\n\"", "\"" + data.substr(pos, 40) + "\" at byte " +
                                                                      std::to_string(pos) + " of the pax header");
    }
    const std::string key = data.substr(space + 1, eq - space - 1);
    std::string value = data.substr(eq + 1, pos + len - 1 - (eq + 1));
    if (key == "path" || key == "GNU.sparse.name") {
      while (!value.empty() && value.back() == '/') value.pop_back();
      out.path = value;
    } else if (key == "size" || key == "GNU.sparse.size" || key == "GNU.sparse.realsize") {
      uint64_t v = 0;
      for (char c : value) v = std::isdigit(static_cast<unsigned char>(c)) ? v * 10 + (c - '0') : v;
      out.size = v;
    }
    pos += len;
  }
}

/// The archive open for reading, with the state one header passes to the next.
struct TarWalk {
  int fd = -1;
  TarPlace at;
  std::optional<std::string> long_name;  // 'L'
  PaxFields pax;                          // 'x'
  PaxFields global;                       // 'g'
  std::string window;                     // the bytes last read ahead, from window_at
  uint64_t window_at = 0;
};

// Headers, pax records and long names are read through a window of kWindow bytes: one pread
// brings a small member's headers together (webdataset's members each have a pax header for their
// float mtime), and a page is what the file system reads anyway.
constexpr uint64_t kWindow = 4096;

std::string read_data(TarWalk& w, uint64_t offset, uint64_t size) {
  if (offset >= w.window_at && offset + size <= w.window_at + w.window.size()) {
    return w.window.substr(offset - w.window_at, size);
  }
  const uint64_t want = size <= kWindow ? std::min(kWindow, w.at.file_size - offset) : size;
  std::string data(std::max(want, size), '\0');
  const int64_t got = detail::pread_full(w.fd, offset, data.size(), reinterpret_cast<uint8_t*>(data.data()));
  if (got < static_cast<int64_t>(size)) {
    throw DataError(w.at.path + ": expected " + std::to_string(size) + " bytes at offset " + std::to_string(offset) +
                        ", found " + (got < 0 ? std::string(std::strerror(errno)) : std::to_string(got)) + ".",
                    "check that the file is readable and was not changed while it was read.");
  }
  if (size > kWindow) return data;
  data.resize(static_cast<size_t>(got));
  w.window = std::move(data);
  w.window_at = offset;
  return w.window.substr(0, size);
}

// One header at w.at.header: returns the offset of the next header, adds a regular file to `out`;
// 0 at the end of the archive (an all-zero block).
uint64_t read_member(TarWalk& w, std::vector<TarMember>& out) {
  const TarPlace& at = w.at;
  if (at.header + kBlock > at.file_size) {
    throw DataError(at.path + ": expected a 512-byte tar header at offset " + std::to_string(at.header) + after(at) +
                        (at.header == at.file_size ? ", or the end-of-archive block, found the end of the file"
                                                   : ", found the file ending at " + std::to_string(at.file_size)) +
                        " (truncated?).",
                    "the shard was cut short (an interrupted copy or writer?): copy or write it again.");
  }
  const std::string block = read_data(w, at.header, kBlock);
  const auto* h = reinterpret_cast<const uint8_t*>(block.data());
  if (block.find_first_not_of('\0') == std::string::npos) return 0;
  check_checksum(h, at);
  const char type = static_cast<char>(h[156]);
  int64_t size = number_field(h + 124, 12, "size", at);
  if (size < 0) throw_bad_header(at, "a size of 0 or more", std::to_string(size));
  std::string name = nts(h, 100);
  const bool v7_folder = type == '\0' && !name.empty() && name.back() == '/';
  const bool gnu_magic = std::memcmp(h + 257, "ustar  \0", 8) == 0;
  const std::string prefix = gnu_magic ? std::string() : nts(h + 345, 155);
  if (!prefix.empty() && type != 'L' && type != 'K' && type != 'S') name = prefix + "/" + name;
  const bool regular = type == '0' || type == '7' || (type == '\0' && !v7_folder);
  if (regular) {
    if (w.long_name) name = *w.long_name;
    if (w.global.path) name = *w.global.path;
    if (w.pax.path) name = *w.pax.path;
    if (w.global.size) size = static_cast<int64_t>(*w.global.size);
    if (w.pax.size) size = static_cast<int64_t>(*w.pax.size);
  }
  const uint64_t data = at.header + kBlock;
  if (data + static_cast<uint64_t>(size) > at.file_size) {
    throw DataError(at.path + ": member " + (regular ? name : std::string("of type '") + type + "'") + " at offset " +
                        std::to_string(at.header) + ": expected " + std::to_string(size) + " bytes of data, found " +
                        std::to_string(at.file_size - data) + " before the end of the file (truncated?).",
                    "the shard was cut short (an interrupted copy or writer?): copy or write it again.");
  }
  if (type == 'L') {
    w.long_name = nts(reinterpret_cast<const uint8_t*>(read_data(w, data, size).data()), size);
  } else if (type == 'x' || type == 'g') {
    parse_pax(read_data(w, data, size), type == 'x' ? w.pax : w.global, at);
  } else if (type == 'S') {
    throw DataError(at.path + ": member " + name + ": expected a plain file, found a GNU sparse file.",
                    "write the shard without --sparse (webdataset's ShardWriter never writes sparse members).");
  } else if (type != 'K') {
    if (regular) out.push_back(TarMember{name, data, static_cast<uint64_t>(size)});
    w.long_name.reset();
    w.pax = PaxFields();
    w.at.previous = name;
  }
  return data + padded(static_cast<uint64_t>(size));
}

}  // namespace

std::vector<TarMember> list_tar_members(const std::string& path) {
  TarWalk w{-1, TarPlace{path, 0, 0, ""}, std::nullopt, {}, {}, "", 0};
  w.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (w.fd < 0) {
    const int err = errno;
    throw DataError(path + ": expected a readable tar file, found " +
                        (err == ENOENT ? std::string("none") : std::string(std::strerror(err))) + ".",
                    "check the shard pattern and that the shards are mounted on every node the job runs on.");
  }
  struct stat st {};
  ::fstat(w.fd, &st);
  w.at.file_size = static_cast<uint64_t>(st.st_size);
  std::vector<TarMember> out;
  try {
    for (uint64_t next = read_member(w, out); next != 0; next = read_member(w, out)) w.at.header = next;
  } catch (...) {
    ::close(w.fd);
    throw;
  }
  ::close(w.fd);
  return out;
}

}  // namespace train::datasets
