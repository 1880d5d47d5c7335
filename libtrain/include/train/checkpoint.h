// Checkpoint files: LibTorch archives written atomically (temp file, fsync, rename, fsync of the
// folder) with a SHA-256 trailer that is verified before anything is loaded.
#pragma once

#include <c10/core/Device.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace train {

/// One checkpoint file found in a folder.
struct CheckpointFile {
  std::string path;
  int64_t step = 0;  ///< global optimizer step it was taken at (from the file name)
};

/// A checkpoint folder: `ckpt-<step>.pt` files, newest = highest step.
///
/// File layout: the LibTorch archive's bytes, then a 48-byte trailer: the archive's length
/// (8 bytes, little-endian), its SHA-256 (32 bytes) and the magic "LTCKPT01". A file whose
/// trailer is missing or whose bytes don't match is reported as corrupt and never parsed.
class CheckpointDir {
 public:
  /// @param dir folder for the checkpoints (created if missing).
  /// @param keep how many checkpoints to keep (>= 1); older ones are removed only after a newer
  ///        one is safely written.
  CheckpointDir(std::string dir, int keep);

  /// Writes `archive` as the checkpoint of `step`, atomically, then prunes old ones. Throws
  /// train::CheckpointError (disk full, permission...) leaving every earlier checkpoint intact.
  /// @return the path written.
  std::string save(torch::serialize::OutputArchive& archive, int64_t step);

  /// save() in two halves, so that the slow one can run in the background: serialize() turns the
  /// archive into the bytes of the file (what they hold is fixed from then on, whatever happens to
  /// the tensors afterwards); write() stores them like save() does. write() may run on another
  /// thread while the caller goes on, one write at a time per folder. `size_hint`: the bytes to
  /// reserve (the previous checkpoint's size saves the buffer's regrowth).
  static std::string serialize(torch::serialize::OutputArchive& archive, int64_t step, size_t size_hint = 0);
  std::string write(const std::string& bytes, int64_t step);

  /// Checkpoint files, oldest first.
  std::vector<CheckpointFile> list() const;

  /// Loads the newest checkpoint whose checksum verifies. Corrupt or truncated files are skipped
  /// with a warning naming the file and the reason (they are never deleted).
  /// @return the archive and the file it came from, or nothing if no valid checkpoint exists.
  /// @param device where the archive's tensors are created (nullopt: where they were saved, the CPU).
  std::optional<std::pair<std::unique_ptr<torch::serialize::InputArchive>, CheckpointFile>>
  load_latest_valid(std::optional<c10::Device> device = std::nullopt) const;

  const std::string& dir() const { return dir_; }

  /// The file name the checkpoint of `step` has in this folder.
  std::string path_for(int64_t step) const;

  /// Verifies one file's trailer and checksum; on success returns the archive bytes, otherwise
  /// throws train::CheckpointError saying what is wrong with it.
  static std::vector<char> read_verified(const std::string& path);

  /// Loads one file (verified first), its tensors created on `device` (nullopt: the CPU).
  /// Throws train::CheckpointError.
  static std::unique_ptr<torch::serialize::InputArchive> load_file(const std::string& path,
                                                                   std::optional<c10::Device> device = std::nullopt);

 private:
  std::string dir_;
  int keep_;
};

}  // namespace train
