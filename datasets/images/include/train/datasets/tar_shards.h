// WebDataset's tar shards as an ImageSource: shards named by a brace pattern, each indexed once (its
// tar headers walked, members grouped into samples as WebDataset groups them) and the index cached;
// a sample's image read in place with pread, no extraction. No decoding here (image_dataset.h decodes).
#pragma once

#include "train/datasets/image_source.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace train::datasets {

namespace detail {
struct ShardIndex;
}

/// The shard files `spec` names: a folder gives its *.tar files sorted by name; anything else is a
/// WebDataset pattern ("DIR/train-{000000..000127}.tar", "{a,b}", "A::B"), expanded by
/// train::expand_braces (train/base/braces.h), in that order.
/// @throws train::DataError naming the first file that doesn't exist and the pattern, or a folder
///   holding no *.tar file; train::ConfigError for a pattern that doesn't expand (unbalanced braces).
std::vector<std::string> list_shard_files(const std::string& spec);

/// One regular file in a tar archive.
struct TarMember {
  std::string name;     ///< its name: a GNU long name ('L'), a pax path or a ustar prefix applied
  uint64_t offset = 0;  ///< where its data starts in the archive
  uint64_t size = 0;    ///< its data's size
};

/// The regular files of a tar archive (POSIX ustar, pax and GNU tar, as Python's tarfile writes them),
/// in archive order, found by reading the headers with pread (the data is not read). Folders and links
/// are skipped. The archive ends at its first all-zero block.
/// @throws train::DataError naming the archive and member for: a file that can't be read, a header
///   or data past the end of the file (truncated), no end-of-archive block, a bad header checksum, a
///   number field that isn't one, a malformed pax header, a sparse member.
std::vector<TarMember> list_tar_members(const std::string& path);

/// WebDataset's sample key and extension of a member name (its base_plus_ext): key = the name up to
/// the first '.' of its last component, extension = the rest ("a/b.seg.png" gives "a/b" and
/// "seg.png"). False for names WebDataset skips (no '.' in the last component).
bool split_sample_name(const std::string& name, std::string& key, std::string& extension);

/// WebDataset tar shards read as webdataset reads them: members grouped into samples by key
/// (consecutive members with one key form a sample; the extension lower-cased; members named
/// __...__ skipped), shard by shard in member order. A sample needs an image (.jpg, .jpeg or .png,
/// taken in that order of preference) and a class (.cls: the integer as text, as webdataset's
/// ShardWriter writes an int). read() is safe from several threads (pread on a descriptor per shard,
/// kept open).
class TarShards : public ImageSource {
 public:
  ~TarShards() override;

  int64_t size() const override;
  /// The image member's bytes, read in place; where = "SHARD: member KEY.jpg".
  /// @throws train::DataError naming shard and member when it can't be read or is cut short.
  EncodedImage read(int64_t index) const override;
  /// "0" .. the largest label, as strings.
  const std::vector<std::string>& classes() const override;
  /// "webdataset:PATTERN".
  std::string name() const override;

  /// The shard files, in order.
  const std::vector<std::string>& shards() const { return shards_; }
  /// Samples in shard `shard`.
  int64_t shard_samples(size_t shard) const;
  /// The sample's class, without reading it.
  int64_t label(int64_t index) const;
  /// The sample's image member name ("0042.jpg").
  std::string member(int64_t index) const;
  /// The sample's shard (index into shards()).
  size_t shard_of(int64_t index) const;
  /// How many shards' indexes came from the cache (the others were indexed now).
  int64_t cached_shards() const { return cached_shards_; }
  /// Where the indexes are cached ("" without a cache folder).
  const std::string& cache_dir() const { return cache_dir_; }
  /// How the cache was used, for the log: "N of M shard indexes read from DIR", or why some
  /// weren't written; "" without a cache folder.
  const std::string& cache_note() const { return cache_note_; }

 private:
  friend std::unique_ptr<TarShards> open_tar_shards(const std::string&, const std::string&);
  TarShards();
  /// The shard's descriptor, opened on first use and kept (up to a limit of open shards; past it
  /// `temporary` is set and the caller closes it).
  int shard_fd(size_t shard, bool& temporary) const;

  std::string spec_;
  std::vector<std::string> shards_;
  std::vector<std::unique_ptr<detail::ShardIndex>> index_;
  std::vector<int64_t> first_sample_;  // per shard, then the total
  std::vector<std::string> classes_;
  int64_t cached_shards_ = 0;
  std::string cache_dir_;
  std::string cache_note_;
  mutable std::unique_ptr<std::atomic<int>[]> fds_;  // -1 until a read opens the shard
  mutable std::atomic<int> open_fds_{0};
};

/// Opens the shards `spec` names (list_shard_files: a brace pattern or a folder) and indexes each, on
/// a few threads; a shard's index is read from `cache_dir` when it was made for the same file (absolute
/// path, size and modification time), else made and written there (cache_dir/tar-index/, atomically:
/// ranks may race). `cache_dir` "" = no cache. A cache that can't be written is noted (cache_note()).
/// @throws train::DataError naming shard and member (expected, found, hint) for: a missing shard, a
///   damaged tar (list_tar_members), a sample without its .cls or without an image, two members of one
///   sample with the same extension, a .cls that isn't an integer or is negative; or no sample at all.
std::unique_ptr<TarShards> open_tar_shards(const std::string& spec, const std::string& cache_dir = "");

}  // namespace train::datasets
