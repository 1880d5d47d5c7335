// Image folders (image_folder.h): the walk in torchvision's order, on a few threads (one class folder
// each, as a shared file system answers many small requests faster side by side), the cached list,
// and reads with open/pread/close.
#include "train/datasets/image_folder.h"

#include "index_cache.h"
#include "train/base/absolute_path.h"
#include "train/base/error.h"
#include "train/base/files.h"
#include "train/base/parallel.h"
#include "train/base/text.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

namespace train::datasets {

namespace detail {

/// What the walk found, as cached: classes, the folders' modification times, the files.
struct FolderList {
  std::string root;  // absolute, no trailing '/'
  std::vector<std::string> classes;
  std::vector<std::pair<std::string, FileTime>> dirs;  // path under root ("" = root), mtime
  std::string names;                                   // file paths under their class folder, back to back
  std::vector<uint64_t> name_end;                      // per file: where its name ends in `names`
  std::vector<uint64_t> sizes;
  std::vector<uint32_t> labels;
  int64_t ignored = 0;
};

}  // namespace detail

using detail::FileTime;
using detail::FolderList;

namespace {

constexpr int kWalkThreads = 8;
constexpr int64_t kRacySeconds = 2;
const char* const kListMagic = "libtrain imagefolder list 1\n";
const char* const kListEnd = "end\n";

FileTime mtime_of(const struct stat& st) { return FileTime{st.st_mtim.tv_sec, st.st_mtim.tv_nsec}; }

std::string strip_trailing_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

/// One folder's entries: subfolders, image files with their sizes, and how many others.
struct DirListing {
  FileTime mtime;
  std::vector<std::string> dirs;
  std::vector<std::pair<std::string, uint64_t>> images;
  int64_t ignored = 0;
};

[[noreturn]] void throw_unreadable_folder(const std::string& path, int err) {
  const std::string found = err == ENOENT    ? std::string("none")
                            : err == ENOTDIR ? std::string("a file")
                                             : std::string("an error: ") + std::strerror(err);
  throw DataError(path + ": expected a readable folder, found " + found + ".",
                  err == ENOENT ? "check the path (the folder of class folders, e.g. DIR/train), and that it is "
                                  "mounted on every node the job runs on."
                                : "check the folder's permissions for this user on every node.");
}

// Sorts one entry (by d_type where the file system gives it, else a stat that follows links, as
// os.walk's is_dir() does). Only image files are stat'ed for their size.
void add_entry(int dir_fd, const std::string& dir, const dirent* e, DirListing& out) {
  const std::string name = e->d_name;
  const bool image = is_image_file_name(name);
  if (e->d_type == DT_DIR) {
    out.dirs.push_back(name);
    return;
  }
  const bool known_file = e->d_type != DT_LNK && e->d_type != DT_UNKNOWN;
  if (known_file && !image) {
    ++out.ignored;
    return;
  }
  struct stat st {};
  if (::fstatat(dir_fd, name.c_str(), &st, 0) != 0) {
    if (!image) {
      ++out.ignored;
      return;
    }
    const int err = errno;
    throw DataError(dir + "/" + name + ": expected an image file, found " +
                        (err == ENOENT ? std::string("a broken link") : std::string(std::strerror(err))) + ".",
                    "fix or remove the link (torchvision's ImageFolder would list it and fail when reading it).");
  }
  if (S_ISDIR(st.st_mode)) {
    out.dirs.push_back(name);
  } else if (image) {
    out.images.emplace_back(name, static_cast<uint64_t>(st.st_size));
  } else {
    ++out.ignored;
  }
}

DirListing list_folder(const std::string& path, std::pair<dev_t, ino_t>* id = nullptr) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_unreadable_folder(path, errno);
  DirListing out;
  struct stat st {};
  // The folder's time before its entries are read: a change while we read makes the cache stale.
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw_unreadable_folder(path, err);
  }
  out.mtime = mtime_of(st);
  if (id != nullptr) *id = {st.st_dev, st.st_ino};
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    const int err = errno;
    ::close(fd);
    throw_unreadable_folder(path, err);
  }
  try {
    errno = 0;
    while (const dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) add_entry(fd, path, e, out);
      errno = 0;
    }
    if (errno != 0) throw_unreadable_folder(path, errno);
  } catch (...) {
    ::closedir(d);
    throw;
  }
  ::closedir(d);  // closes fd
  return out;
}

/// A class folder walked: its folders (path under the class folder, "" for itself) with their
/// listings, unsorted.
using ClassWalk = std::vector<std::pair<std::string, DirListing>>;

// os.walk(followlinks=True) top-down; a link back to a folder being walked (a loop) is not followed.
void walk(const std::string& dir, const std::string& rel, std::vector<std::pair<dev_t, ino_t>>& ancestors,
          ClassWalk& out) {
  std::pair<dev_t, ino_t> id;
  DirListing listing = list_folder(dir, &id);
  if (std::find(ancestors.begin(), ancestors.end(), id) != ancestors.end()) return;
  const std::vector<std::string> subdirs = listing.dirs;
  out.emplace_back(rel, std::move(listing));
  ancestors.push_back(id);
  for (const std::string& sub : subdirs) walk(dir + "/" + sub, rel.empty() ? sub : rel + "/" + sub, ancestors, out);
  ancestors.pop_back();
}

/// One class folder's files in torchvision's order: sorted(os.walk(...)) orders the folders by
/// their full path, then sorted(fnames) orders each folder's files; byte-wise here, as Python
/// compares the code points of UTF-8 names.
struct ClassFiles {
  std::vector<std::pair<std::string, FileTime>> dirs;      // path under the class folder
  std::vector<std::pair<std::string, uint64_t>> files;     // path under the class folder, size
  int64_t ignored = 0;
};

ClassFiles list_class(const std::string& class_dir) {
  ClassWalk walked;
  std::vector<std::pair<dev_t, ino_t>> ancestors;
  walk(class_dir, "", ancestors, walked);
  std::sort(walked.begin(), walked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  ClassFiles out;
  for (auto& [rel, listing] : walked) {
    out.dirs.emplace_back(rel, listing.mtime);
    out.ignored += listing.ignored;
    std::sort(listing.images.begin(), listing.images.end());
    for (auto& [name, size] : listing.images) out.files.emplace_back(rel.empty() ? name : rel + "/" + name, size);
  }
  return out;
}

// The class folders on kWalkThreads threads; the first class's error (in the classes' order) is
// rethrown once all have stopped.
std::vector<ClassFiles> list_classes(const std::string& root, const std::vector<std::string>& classes) {
  std::vector<ClassFiles> out(classes.size());
  train::parallel_for(static_cast<int64_t>(classes.size()), kWalkThreads, [&](int64_t i) {
    out[static_cast<size_t>(i)] = list_class(root + "/" + classes[static_cast<size_t>(i)]);
  });
  return out;
}

void throw_empty_classes(const std::string& root, const std::vector<std::string>& empty, int64_t ignored) {
  std::vector<std::string> shown(empty.begin(), empty.begin() + std::min<size_t>(empty.size(), 20));
  if (shown.size() < empty.size()) shown.push_back("... (" + std::to_string(empty.size()) + " in all)");
  throw DataError(root + ": expected at least one .jpg, .jpeg or .png file in every class folder, found none in " +
                      text::join(shown, ", ") + " (" + std::to_string(ignored) +
                      " other files were skipped; torchvision's ImageFolder refuses this too: \"Found no valid "
                      "file for the classes " + text::join(shown, ", ") + "\").",
                  "add the class's images or remove the empty class folder (a class without images would "
                  "shift the labels of the classes after it).");
}

FolderList walk_root(const std::string& root) {
  FolderList list;
  list.root = root;
  DirListing top = list_folder(root);
  if (top.dirs.empty()) {
    throw DataError(root + ": expected one subfolder per class (ImageFolder's layout: " + root +
                        "/CLASS/IMAGE.jpg), found no folder (" + std::to_string(top.images.size() + top.ignored) +
                        " files).",
                    "name the split folder whose subfolders are the classes (e.g. DIR/train), not the folder "
                    "of images itself.");
  }
  list.classes = top.dirs;
  std::sort(list.classes.begin(), list.classes.end());
  list.dirs.emplace_back("", top.mtime);
  std::vector<ClassFiles> per_class = list_classes(root, list.classes);
  std::vector<std::string> empty;
  for (size_t c = 0; c < per_class.size(); ++c) {
    const std::string& cls = list.classes[c];
    for (const auto& [rel, t] : per_class[c].dirs) list.dirs.emplace_back(rel.empty() ? cls : cls + "/" + rel, t);
    list.ignored += per_class[c].ignored;
    if (per_class[c].files.empty()) empty.push_back(cls);
    for (const auto& [name, size] : per_class[c].files) {
      list.names += name;
      list.name_end.push_back(list.names.size());
      list.sizes.push_back(size);
      list.labels.push_back(static_cast<uint32_t>(c));
    }
    per_class[c] = ClassFiles();  // free as we go: a million names
  }
  if (!empty.empty()) throw_empty_classes(root, empty, list.ignored);
  return list;
}

std::string encode_list(const FolderList& list) {
  detail::ByteWriter w;
  w.raw(kListMagic, std::strlen(kListMagic));
  w.str(list.root);
  w.i64(list.ignored);
  w.u64(list.classes.size());
  for (const auto& c : list.classes) w.str(c);
  w.u64(list.dirs.size());
  for (const auto& [rel, t] : list.dirs) {
    w.str(rel);
    w.time(t);
  }
  w.u64(list.sizes.size());
  uint64_t start = 0;
  for (size_t i = 0; i < list.sizes.size(); ++i) {
    w.str(list.names.substr(start, list.name_end[i] - start));
    w.u64(list.sizes[i]);
    w.u32(list.labels[i]);
    start = list.name_end[i];
  }
  w.raw(kListEnd, std::strlen(kListEnd));
  return std::move(w.bytes());
}

// The cached list, if it is this root's and no listed folder changed since; else "" in `why` means
// there was no cache file, otherwise why it is not used.
bool decode_list(const std::string& bytes, const std::string& root, FolderList& list, std::string& why) {
  detail::ByteReader r(bytes);
  if (!r.expect(kListMagic)) return (why = "not a list of this version"), false;
  list.root = r.str();
  if (r.ok() && list.root != root) return (why = "another folder's list (" + list.root + ")"), false;
  list.ignored = r.i64();
  const uint64_t classes = r.u64();
  for (uint64_t i = 0; r.ok() && i < classes; ++i) list.classes.push_back(r.str());
  const uint64_t dirs = r.u64();
  for (uint64_t i = 0; r.ok() && i < dirs; ++i) {
    std::string rel = r.str();
    list.dirs.emplace_back(std::move(rel), r.time());
  }
  // Stale? One stat per folder, checked before the files are parsed.
  for (const auto& [rel, t] : list.dirs) {
    if (!r.ok()) break;
    const std::string dir = rel.empty() ? root : root + "/" + rel;
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || mtime_of(st) != t) return (why = dir + " changed"), false;
  }
  const uint64_t files = r.u64();
  if (r.ok() && files > bytes.size()) return (why = "cut short"), false;
  list.name_end.reserve(files);
  list.sizes.reserve(files);
  list.labels.reserve(files);
  for (uint64_t i = 0; r.ok() && i < files; ++i) {
    r.str_into(list.names);
    list.name_end.push_back(list.names.size());
    list.sizes.push_back(r.u64());
    list.labels.push_back(r.u32());
    if (list.labels.back() >= list.classes.size()) return (why = "a label out of range"), false;
  }
  if (!r.expect(kListEnd) || !r.at_end()) return (why = "cut short or damaged"), false;
  return true;
}

}  // namespace

bool is_image_file_name(const std::string& name) {
  auto ends_with = [&](const char* ext) {
    const size_t n = std::strlen(ext);
    if (name.size() < n) return false;
    for (size_t i = 0; i < n; ++i) {
      if (std::tolower(static_cast<unsigned char>(name[name.size() - n + i])) != ext[i]) return false;
    }
    return true;
  };
  return ends_with(".jpg") || ends_with(".jpeg") || ends_with(".png");
}

SplitFolder find_split_folder(const std::string& dir, ImageSplit split, bool required) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    const int err = errno;
    throw DataError(dir + ": expected a dataset folder holding " +
                        (split == ImageSplit::train ? std::string("train/") : std::string("val/ or test/")) +
                        ", found " + (::stat(dir.c_str(), &st) == 0 ? std::string("a file") : std::strerror(err)) + ".",
                    "check --data: the folder above train/ and val/ (ImageNet's layout DIR/train/CLASS/*.JPEG), "
                    "mounted on every node the job runs on.");
  }
  const std::vector<std::string> names =
      split == ImageSplit::train ? std::vector<std::string>{"train"} : std::vector<std::string>{"val", "test"};
  for (const std::string& n : names) {
    const std::string path = files::join(dir, n);
    if (files::is_directory(path)) return SplitFolder{path, n};
  }
  if (!required) return SplitFolder{};
  std::vector<std::string> looked, held = files::list_dir(dir);
  for (const std::string& n : names) looked.push_back(files::join(dir, n));
  std::sort(held.begin(), held.end());
  if (held.size() > 12) held.resize(12), held.push_back("...");
  throw DataError(dir + ": expected a folder " + text::or_list(looked) + " (one subfolder per class), found none (" +
                      dir + " holds " + (held.empty() ? std::string("nothing") : text::join(held, ", ")) + ").",
                  "lay the images out as DIR/train/CLASS/IMAGE.jpg and DIR/val/CLASS/IMAGE.jpg (ImageNet's and "
                  "torchvision's layout) and pass DIR.");
}

ImageFolder::ImageFolder() = default;
ImageFolder::~ImageFolder() = default;

int64_t ImageFolder::size() const { return static_cast<int64_t>(list_->sizes.size()); }
const std::vector<std::string>& ImageFolder::classes() const { return list_->classes; }
std::string ImageFolder::name() const { return "imagefolder:" + list_->root; }
const std::string& ImageFolder::root() const { return list_->root; }
int64_t ImageFolder::label(int64_t index) const { return list_->labels.at(static_cast<size_t>(index)); }
uint64_t ImageFolder::file_size(int64_t index) const { return list_->sizes.at(static_cast<size_t>(index)); }
int64_t ImageFolder::ignored_files() const { return list_->ignored; }
bool ImageFolder::from_cache() const { return from_cache_; }
const std::string& ImageFolder::cache_file() const { return cache_file_; }
const std::string& ImageFolder::cache_note() const { return cache_note_; }

std::string ImageFolder::relative_path(int64_t index) const {
  const size_t i = static_cast<size_t>(index);
  const uint64_t start = i == 0 ? 0 : list_->name_end.at(i - 1);
  return list_->classes[list_->labels.at(i)] + "/" + list_->names.substr(start, list_->name_end[i] - start);
}

std::string ImageFolder::path(int64_t index) const { return list_->root + "/" + relative_path(index); }

EncodedImage ImageFolder::read(int64_t index) const {
  if (index < 0 || index >= size()) {
    throw DataError(name() + ": expected a sample index in [0, " + std::to_string(size()) + "), found " +
                        std::to_string(index) + ".",
                    "this is a bug in the caller: report it with the command line.");
  }
  EncodedImage out;
  out.where = path(index);
  out.label = label(index);
  const uint64_t expected = file_size(index);
  const std::string hint =
      "the folder changed after it was listed (files moved, deleted or rewritten during the run?): restore the "
      "file, or start again" + (cache_file_.empty() ? std::string(".") : " (the list in " + cache_file_ +
      " is made again when a folder changes; remove it if a file was rewritten in place).");
  const int fd = ::open(out.where.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw DataError(out.where + ": expected the image file listed (" + std::to_string(expected) + " bytes), found " +
                        (err == ENOENT ? std::string("none") : std::string(std::strerror(err))) + ".", hint);
  }
  struct stat st {};
  const bool same_size = ::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == expected;
  out.bytes.resize(expected);
  const int64_t got = same_size ? detail::pread_full(fd, 0, expected, out.bytes.data()) : -1;
  const int err = errno;
  ::close(fd);
  if (got != static_cast<int64_t>(expected)) {
    throw DataError(out.where + ": expected " + std::to_string(expected) + " bytes (its size when the folder was " +
                        "listed), found " + (!same_size ? std::to_string(st.st_size) + " bytes"
                                             : got < 0 ? std::string("a read error: ") + std::strerror(err)
                                                       : std::to_string(got) + " bytes readable") + ".", hint);
  }
  return out;
}

namespace {

// The cached list when it is valid (noting why not otherwise), else a walk written to the cache.
std::unique_ptr<FolderList> load_or_walk(const std::string& root, const std::string& cache_file, bool& from_cache,
                                         std::string& note) {
  std::string bytes;
  std::string stale;
  if (!cache_file.empty() && detail::read_whole_file(cache_file, bytes)) {
    auto list = std::make_unique<FolderList>();
    if (decode_list(bytes, root, *list, stale)) {
      from_cache = true;
      note = "read from " + cache_file;
      return list;
    }
  }
  bytes = std::string();
  struct timespec walk_start {};
  ::clock_gettime(CLOCK_REALTIME, &walk_start);
  auto list = std::make_unique<FolderList>(walk_root(root));
  from_cache = false;
  if (cache_file.empty()) return list;
  // A folder changed just before or during the walk may change again within its clock tick (the
  // kernel's file times are coarse) without its time moving: list such a folder again next time.
  std::string racy;
  for (const auto& [rel, t] : list->dirs) {
    if (racy.empty() && t.sec >= walk_start.tv_sec - kRacySeconds) racy = rel.empty() ? root : root + "/" + rel;
  }
  const std::string err =
      racy.empty() ? detail::write_atomically(cache_file, encode_list(*list)) : racy + " changed less than " +
                                                                               std::to_string(kRacySeconds) +
                                                                               " s before the walk";
  note = err.empty() ? "written to " + cache_file : "not written (" + err + ")";
  if (!stale.empty()) note += "; the cached list was not used: " + stale;
  return list;
}

}  // namespace

std::unique_ptr<ImageFolder> open_image_folder(const std::string& split_dir, const std::string& cache_dir) {
  const std::string root = strip_trailing_slashes(files::absolute(split_dir));
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0) throw_unreadable_folder(root, errno);
  if (!S_ISDIR(st.st_mode)) throw_unreadable_folder(root, ENOTDIR);
  std::unique_ptr<ImageFolder> folder(new ImageFolder());
  if (!cache_dir.empty()) folder->cache_file_ = detail::cache_file_name(cache_dir, "imagefolder", root, ".list");
  folder->list_ = load_or_walk(root, folder->cache_file_, folder->from_cache_, folder->cache_note_);
  return folder;
}

}  // namespace train::datasets
