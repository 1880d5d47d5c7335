// WebDataset shards (tar_shards.h): the shard files a pattern names, members grouped into samples as
// webdataset's group_by_keys does, each shard's index cached (absolute path, size and modification
// time) and made on a few threads, and a sample's image read in place with pread.
#include "train/datasets/tar_shards.h"

#include "index_cache.h"
#include "train/base/absolute_path.h"
#include "train/base/braces.h"
#include "train/base/error.h"
#include "train/base/files.h"
#include "train/base/parallel.h"
#include "train/base/text.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

namespace train::datasets {

namespace detail {

/// One shard's samples: the image member's name, data offset and size, and the class.
struct ShardIndex {
  std::string path;  // absolute
  uint64_t file_size = 0;
  FileTime mtime;
  std::string members;  // image member names back to back
  std::vector<uint64_t> member_end;
  std::vector<uint64_t> offset;
  std::vector<uint64_t> size;
  std::vector<int64_t> label;

  size_t count() const { return offset.size(); }
  std::string member(size_t i) const {
    const uint64_t start = i == 0 ? 0 : member_end[i - 1];
    return members.substr(start, member_end[i] - start);
  }
};

}  // namespace detail

using detail::FileTime;
using detail::ShardIndex;

namespace {

constexpr int kIndexThreads = 8;
constexpr int kMaxOpenShards = 256;
constexpr uint64_t kMaxClsBytes = 64;
const char* const kIndexMagic = "libtrain tar index 1\n";
const char* const kIndexEnd = "end\n";
const char* const kImageExtensions[] = {"jpg", "jpeg", "png"};

const char* const kSampleHint =
    "write each sample as {\"__key__\": KEY, \"jpg\": BYTES, \"cls\": INT} (webdataset's ShardWriter stores "
    "KEY.cls, the class as decimal text, and KEY.jpg).";

// webdataset's skip_meta, r"__[^/]*__($|/)" matched at the start: a first component named __...__.
bool is_meta(const std::string& name) {
  const std::string first = name.substr(0, name.find('/'));
  return first.size() >= 4 && first.compare(0, 2, "__") == 0 && first.compare(first.size() - 2, 2, "__") == 0;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

/// The members of one sample, by lower-cased extension.
struct SampleMembers {
  std::string key;
  std::vector<std::pair<std::string, const TarMember*>> parts;

  const TarMember* find(const std::string& ext) const {
    for (const auto& [e, m] : parts) {
      if (e == ext) return m;
    }
    return nullptr;
  }
  std::string names() const {
    std::vector<std::string> out;
    for (const auto& [e, m] : parts) out.push_back(m->name);
    return text::join(out, ", ");
  }
};

// The class as Python's int() reads the .cls member's text (spaces around it allowed).
int64_t parse_label(int fd, const std::string& shard, const TarMember& cls) {
  std::string text(std::min(cls.size, kMaxClsBytes), '\0');
  const int64_t got = detail::pread_full(fd, cls.offset, text.size(), reinterpret_cast<uint8_t*>(text.data()));
  if (got != static_cast<int64_t>(text.size())) {
    throw DataError(shard + ": member " + cls.name + ": expected " + std::to_string(text.size()) + " bytes at offset " +
                        std::to_string(cls.offset) + ", found " + std::to_string(got) + ".",
                    "check that the shard is readable and was not changed while it was indexed.");
  }
  const std::string t = text::trim(text);
  const bool negative = !t.empty() && t[0] == '-';
  const std::string digits = !t.empty() && (t[0] == '-' || t[0] == '+') ? t.substr(1) : t;
  if (cls.size > kMaxClsBytes || !text::all_digits(digits) || digits.size() > 18) {
    std::string shown = cls.size > kMaxClsBytes ? std::to_string(cls.size) + " bytes" : "\"" + t + "\"";
    throw DataError(shard + ": member " + cls.name + ": expected the class as a decimal integer, found " + shown + ".",
                    kSampleHint);
  }
  const int64_t label = std::stoll(digits) * (negative ? -1 : 1);
  if (label < 0) {
    throw DataError(shard + ": member " + cls.name + ": expected a class of 0 or more, found " + std::to_string(label) +
                        ".",
                    "number the classes from 0 when writing the shards.");
  }
  return label;
}

void add_sample(int fd, const SampleMembers& s, ShardIndex& index) {
  const TarMember* image = nullptr;
  for (const char* ext : kImageExtensions) {
    if (image == nullptr) image = s.find(ext);
  }
  const TarMember* cls = s.find("cls");
  if (image == nullptr || cls == nullptr) {
    const std::string want_cls = "a class member " + s.key + ".cls";
    const std::string want_image = "an image member " + s.key + ".jpg, .jpeg or .png";
    const std::string expected = cls == nullptr && image == nullptr ? want_cls + " and " + want_image
                                 : cls == nullptr                   ? want_cls
                                                                    : want_image;
    throw DataError(index.path + ": sample " + s.key + " (members " + s.names() + "): expected " + expected +
                        ", found none.",
                    kSampleHint);
  }
  const int64_t label = parse_label(fd, index.path, *cls);
  index.members += image->name;
  index.member_end.push_back(index.members.size());
  index.offset.push_back(image->offset);
  index.size.push_back(image->size);
  index.label.push_back(label);
}

// webdataset's group_by_keys over tar_file_iterator's members: consecutive members with one key
// form a sample; a repeated extension within one is an error there too.
void group_samples(int fd, const std::vector<TarMember>& members, ShardIndex& index) {
  SampleMembers current;
  std::string key, ext;
  for (const TarMember& m : members) {
    if (is_meta(m.name) || !split_sample_name(m.name, key, ext)) continue;
    ext = lower(ext);
    if (current.parts.empty() || key != current.key) {
      if (!current.parts.empty()) add_sample(fd, current, index);
      current = SampleMembers{key, {}};
    }
    if (const TarMember* same = current.find(ext)) {
      throw DataError(index.path + ": sample " + key + ": expected one member per extension, found " + same->name +
                          " and " + m.name + " (both ." + ext + ").",
                      "webdataset refuses this too (\"duplicate file name in tar file\"): give each sample its own "
                      "key when writing the shard.");
    }
    current.parts.emplace_back(ext, &m);
  }
  if (!current.parts.empty()) add_sample(fd, current, index);
}

void index_shard(ShardIndex& index) {
  const std::vector<TarMember> members = list_tar_members(index.path);
  const int fd = ::open(index.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw DataError(index.path + ": expected a readable tar file, found " + std::strerror(errno) + ".",
                    "check that the shard is readable by this user on every node.");
  }
  try {
    group_samples(fd, members, index);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

std::string encode_index(const ShardIndex& index) {
  detail::ByteWriter w;
  w.raw(kIndexMagic, std::strlen(kIndexMagic));
  w.str(index.path);
  w.u64(index.file_size);
  w.time(index.mtime);
  w.u64(index.count());
  for (size_t i = 0; i < index.count(); ++i) {
    w.str(index.member(i));
    w.u64(index.offset[i]);
    w.u64(index.size[i]);
    w.i64(index.label[i]);
  }
  w.raw(kIndexEnd, std::strlen(kIndexEnd));
  return std::move(w.bytes());
}

// The cached index when it was made for this very file (path, size, modification time).
bool decode_index(const std::string& bytes, ShardIndex& index) {
  detail::ByteReader r(bytes);
  if (!r.expect(kIndexMagic) || r.str() != index.path || r.u64() != index.file_size || r.time() != index.mtime) {
    return false;
  }
  const uint64_t n = r.u64();
  if (!r.ok() || n > bytes.size()) return false;
  for (uint64_t i = 0; r.ok() && i < n; ++i) {
    r.str_into(index.members);
    index.member_end.push_back(index.members.size());
    index.offset.push_back(r.u64());
    index.size.push_back(r.u64());
    index.label.push_back(r.i64());
  }
  return r.expect(kIndexEnd) && r.at_end();
}

/// One shard's index, and how the cache served it.
struct IndexResult {
  std::unique_ptr<ShardIndex> index;
  bool from_cache = false;
  std::string write_error;
};

IndexResult load_or_index(const std::string& shard, const std::string& cache_dir) {
  IndexResult out;
  out.index = std::make_unique<ShardIndex>();
  ShardIndex& index = *out.index;
  index.path = files::absolute(shard);
  struct stat st {};
  if (::stat(index.path.c_str(), &st) != 0) {
    throw DataError(shard + ": expected a shard file, found " + std::strerror(errno) + ".",
                    "check the shard pattern and that the shards are mounted on every node the job runs on.");
  }
  index.file_size = static_cast<uint64_t>(st.st_size);
  index.mtime = FileTime{st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
  const std::string cache_file =
      cache_dir.empty() ? "" : detail::cache_file_name(files::join(cache_dir, "tar-index"), "tarindex", index.path, ".idx");
  std::string bytes;
  if (!cache_file.empty() && detail::read_whole_file(cache_file, bytes)) {
    if (decode_index(bytes, index)) {
      out.from_cache = true;
      return out;
    }
    index.members.clear();  // a stale or damaged index: start again
    index.member_end.clear();
    index.offset.clear();
    index.size.clear();
    index.label.clear();
  }
  index_shard(index);
  if (!cache_file.empty()) out.write_error = detail::write_atomically(cache_file, encode_index(index));
  return out;
}

// Every shard's index on kIndexThreads threads; the first shard's error (in the shards' order) is
// rethrown once all have stopped.
std::vector<IndexResult> index_all(const std::vector<std::string>& shards, const std::string& cache_dir) {
  std::vector<IndexResult> out(shards.size());
  train::parallel_for(static_cast<int64_t>(shards.size()), kIndexThreads, [&](int64_t i) {
    out[static_cast<size_t>(i)] = load_or_index(shards[static_cast<size_t>(i)], cache_dir);
  });
  return out;
}

}  // namespace

std::vector<std::string> list_shard_files(const std::string& spec) {
  if (files::is_directory(spec)) {
    std::vector<std::string> out;
    for (const std::string& name : files::list_dir(spec)) {
      const std::string path = files::join(spec, name);
      if (ends_with(name, ".tar") && files::is_regular_file(path)) out.push_back(path);
    }
    if (out.empty()) {
      throw DataError(spec + ": expected WebDataset shards (*.tar files) in the folder, found none.",
                      "name the shards' folder, or the shards with a pattern: 'DIR/train-{000000..000127}.tar'.");
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  const std::vector<std::string> out = train::expand_braces(spec);
  for (const std::string& f : out) {
    if (files::is_regular_file(f)) continue;
    const size_t present = static_cast<size_t>(
        std::count_if(out.begin(), out.end(), [](const std::string& p) { return files::is_regular_file(p); }));
    const bool remote = f.find("://") != std::string::npos || f.rfind("pipe:", 0) == 0;
    throw DataError(spec + ": expected the " + std::to_string(out.size()) + " shard file" +
                        (out.size() == 1 ? "" : "s") + " the pattern names, found no file " + f + " (the first one " +
                        "missing; " + std::to_string(present) + " of " + std::to_string(out.size()) + " exist).",
                    remote ? "only local (or mounted) files are read: copy the shards to a file system every node "
                             "mounts."
                           : "check the folder and the range in braces ({000000..000127} names 128 files, "
                             "zero-padded to 6 digits), and quote the pattern so the shell leaves the braces alone.");
  }
  return out;
}

bool split_sample_name(const std::string& name, std::string& key, std::string& extension) {
  // base_plus_ext's regex ^((?:.*/|)[^.]+)[.]([^/]*)$, case by case.
  const size_t slash = name.rfind('/');
  const size_t start = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = name.find('.', start);
  if (dot == std::string::npos) return false;
  if (dot > start) {
    key = name.substr(0, dot);
    extension = name.substr(dot + 1);
    return true;
  }
  // A last component starting with '.': [^.]+ then runs over the '/' before it, back through the
  // component before (which must hold no '.').
  if (slash == std::string::npos) return false;
  const size_t before = slash == 0 ? std::string::npos : name.rfind('/', slash - 1);
  const size_t from = before == std::string::npos ? 0 : before + 1;
  if (name.find('.', from) < slash) return false;
  key = name.substr(0, slash + 1);
  extension = name.substr(dot + 1);
  return true;
}

TarShards::TarShards() = default;

TarShards::~TarShards() {
  if (!fds_) return;
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (fds_[i] >= 0) ::close(fds_[i]);
  }
}

int64_t TarShards::size() const { return first_sample_.back(); }
const std::vector<std::string>& TarShards::classes() const { return classes_; }
std::string TarShards::name() const { return "webdataset:" + spec_; }
int64_t TarShards::shard_samples(size_t shard) const { return first_sample_.at(shard + 1) - first_sample_[shard]; }

size_t TarShards::shard_of(int64_t index) const {
  if (index < 0 || index >= size()) {
    throw DataError(name() + ": expected a sample index in [0, " + std::to_string(size()) + "), found " +
                        std::to_string(index) + ".",
                    "this is a bug in the caller: report it with the command line.");
  }
  const auto it = std::upper_bound(first_sample_.begin(), first_sample_.end(), index);
  return static_cast<size_t>(it - first_sample_.begin()) - 1;
}

int64_t TarShards::label(int64_t index) const {
  const size_t s = shard_of(index);
  return index_[s]->label[static_cast<size_t>(index - first_sample_[s])];
}

std::string TarShards::member(int64_t index) const {
  const size_t s = shard_of(index);
  return index_[s]->member(static_cast<size_t>(index - first_sample_[s]));
}

int TarShards::shard_fd(size_t shard, bool& temporary) const {
  temporary = false;
  int fd = fds_[shard].load();
  if (fd >= 0) return fd;
  fd = ::open(index_[shard]->path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fd;
  if (open_fds_.fetch_add(1) >= kMaxOpenShards) {
    --open_fds_;
    temporary = true;
    return fd;
  }
  int expected = -1;
  if (fds_[shard].compare_exchange_strong(expected, fd)) return fd;
  // Another thread opened it first: use theirs.
  --open_fds_;
  ::close(fd);
  return expected;
}

EncodedImage TarShards::read(int64_t index) const {
  const size_t s = shard_of(index);
  const ShardIndex& shard = *index_[s];
  const size_t i = static_cast<size_t>(index - first_sample_[s]);
  EncodedImage out;
  out.label = shard.label[i];
  out.where = shards_[s] + ": member " + shard.member(i);
  bool temporary = false;
  const int fd = shard_fd(s, temporary);
  if (fd < 0) {
    throw DataError(out.where + ": expected the shard indexed (" + std::to_string(shard.file_size) + " bytes), found " +
                        (errno == ENOENT ? std::string("none") : std::string(std::strerror(errno))) + ".",
                    "the shard was moved or deleted during the run: restore it.");
  }
  out.bytes.resize(shard.size[i]);
  const int64_t got = detail::pread_full(fd, shard.offset[i], shard.size[i], out.bytes.data());
  const int err = errno;
  if (temporary) ::close(fd);
  if (got != static_cast<int64_t>(shard.size[i])) {
    throw DataError(out.where + ": expected " + std::to_string(shard.size[i]) + " bytes at offset " +
                        std::to_string(shard.offset[i]) + ", found " +
                        (got < 0 ? std::string("a read error: ") + std::strerror(err) : std::to_string(got)) + ".",
                    "the shard changed or was cut short after it was indexed: restore it (a changed shard is "
                    "indexed again at the next start).");
  }
  return out;
}

std::unique_ptr<TarShards> open_tar_shards(const std::string& spec, const std::string& cache_dir) {
  std::unique_ptr<TarShards> t(new TarShards());
  t->spec_ = spec;
  t->cache_dir_ = cache_dir.empty() ? "" : files::join(cache_dir, "tar-index");
  t->shards_ = list_shard_files(spec);
  std::vector<IndexResult> results = index_all(t->shards_, cache_dir);
  t->first_sample_.push_back(0);
  int64_t max_label = -1;
  std::string write_error;
  for (IndexResult& r : results) {
    t->cached_shards_ += r.from_cache ? 1 : 0;
    if (write_error.empty()) write_error = r.write_error;
    for (int64_t l : r.index->label) max_label = std::max(max_label, l);
    t->first_sample_.push_back(t->first_sample_.back() + static_cast<int64_t>(r.index->count()));
    t->index_.push_back(std::move(r.index));
  }
  if (t->size() == 0) {
    throw DataError(spec + ": expected samples (KEY.jpg and KEY.cls members) in the " +
                        std::to_string(t->shards_.size()) + " shard(s), found none.",
                    kSampleHint);
  }
  for (int64_t l = 0; l <= max_label; ++l) t->classes_.push_back(std::to_string(l));
  t->fds_.reset(new std::atomic<int>[t->shards_.size()]);
  for (size_t i = 0; i < t->shards_.size(); ++i) t->fds_[i] = -1;
  if (!cache_dir.empty()) {
    t->cache_note_ = std::to_string(t->cached_shards_) + " of " + std::to_string(t->shards_.size()) +
                     " shard indexes read from " + t->cache_dir_ +
                     (write_error.empty() ? "" : "; some not written (" + write_error + ")");
  }
  return t;
}

}  // namespace train::datasets
