// Image folders (torchvision's ImageFolder layout: SPLIT/CLASS/**/*.jpg) as an ImageSource: the file
// list walked once, in torchvision's order, and cached next to the run's checkpoints; a sample read
// with open/pread/close. No decoding here (image_dataset.h decodes).
#pragma once

#include "train/datasets/image_source.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace train::datasets {

namespace detail {
struct FolderList;
}

/// Which split of a dataset folder is asked for.
enum class ImageSplit { train, eval };

/// A split's folder found under a dataset folder.
struct SplitFolder {
  std::string path;  ///< DIR/train, DIR/val or DIR/test; "" when none was found (not required)
  std::string name;  ///< "train", "val" or "test"; "" when none was found
};

/// The split folder under a dataset folder `dir`: DIR/train for training; DIR/val, else DIR/test,
/// for evaluation (ImageNet's layout: DIR/train/CLASS/*.JPEG, DIR/val/CLASS/*.JPEG).
/// @param required when false, a missing split folder gives an empty SplitFolder instead of an error.
/// @throws train::DataError when `dir` is not a folder, or (required) when none of the split folders
///   exists: the message lists the folders looked for and what `dir` holds.
SplitFolder find_split_folder(const std::string& dir, ImageSplit split, bool required = true);

/// Whether `name` ends (case-insensitively) in one of the extensions the image folder keeps: .jpg,
/// .jpeg, .png (torchvision's ImageFolder extensions that our decoders read).
bool is_image_file_name(const std::string& name);

/// A folder of class folders read as torchvision's ImageFolder reads it: the classes are the
/// subfolders' names sorted byte-wise (label = position), the samples every .jpg/.jpeg/.png file
/// under each class folder (nested folders walked too, symbolic links followed), class by class, in
/// torchvision's order (folders by full path, then file names, sorted byte-wise). Other files are
/// skipped and counted. read() is safe from several threads (each opens, preads and closes).
class ImageFolder : public ImageSource {
 public:
  ~ImageFolder() override;

  int64_t size() const override;
  /// The file's bytes and its class; where = the file's full path.
  /// @throws train::DataError naming the file when it is gone, unreadable, or not the size listed
  ///   (the folder changed since it was listed), with the cache file to remove.
  EncodedImage read(int64_t index) const override;
  const std::vector<std::string>& classes() const override;
  /// "imagefolder:/abs/path/train".
  std::string name() const override;

  /// The split folder, absolute.
  const std::string& root() const;
  /// The sample's path under root() ("cat/001.jpg"), without reading it.
  std::string relative_path(int64_t index) const;
  /// The sample's full path (root() + "/" + relative_path(index)).
  std::string path(int64_t index) const;
  /// The sample's class (0 <= label < classes().size()).
  int64_t label(int64_t index) const;
  /// The sample's file size in bytes when the folder was listed.
  uint64_t file_size(int64_t index) const;
  /// Files in class folders that were skipped for their extension (not .jpg, .jpeg or .png).
  int64_t ignored_files() const;
  /// True when the file list came from the cache, false when the folder was walked.
  bool from_cache() const;
  /// The cache file ("" without a cache folder).
  const std::string& cache_file() const;
  /// How the cache was used, for the log: "read from FILE", "written to FILE", "not written
  /// (REASON)", "" without a cache folder; a stale or unreadable cache says why it was rebuilt.
  const std::string& cache_note() const;

 private:
  friend std::unique_ptr<ImageFolder> open_image_folder(const std::string&, const std::string&);
  ImageFolder();
  std::unique_ptr<detail::FolderList> list_;
  bool from_cache_ = false;
  std::string cache_file_;
  std::string cache_note_;
};

/// Lists the image folder `split_dir` (e.g. DIR/train: one subfolder per class), or reads its list
/// from `cache_dir` when the cached one is still valid: the root's and every listed folder's
/// modification time unchanged. A list walked anew is written to cache_dir (created if needed)
/// atomically, so several ranks of a node may race; one cache file per split folder, named from a
/// hash of its absolute path. `cache_dir` "" = no cache. A cache that can't be written is noted
/// (cache_note()), not an error; nor is a list written while a folder changed less than 2 s before
/// the walk (file times are coarse: a change within the same tick would go unseen), so a folder
/// being filled is listed again at the next open.
/// @throws train::DataError naming the folder when it is missing or unreadable, holds no class
///   folder, or a class folder holds no .jpg/.jpeg/.png file (torchvision's "Found no valid file for
///   the classes ..."), or an image file can't be stat'ed (a broken link).
std::unique_ptr<ImageFolder> open_image_folder(const std::string& split_dir, const std::string& cache_dir = "");

}  // namespace train::datasets
