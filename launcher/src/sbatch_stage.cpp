// `trainctl sbatch --stage-data`'s plan (plan_staging): one tar archive to extract on every node, or
// shards (a brace pattern, a "::" list, a folder of *.tar) to copy there as they are, found, checked
// and measured here. The script's staging steps are written in sbatch_script.cpp.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "train/base/braces.h"
#include "train/base/error.h"
#include "train/base/files.h"
#include "train/base/text.h"
#include "train/launcher/sbatch.h"

namespace train {
namespace {

bool is_tar_archive(const std::string& path) {
  static const char* kSuffixes[] = {".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tbz",
                                    ".tar.xz", ".txz", ".tar.zst", ".tzst", ".tar.lz4"};
  for (const char* suffix : kSuffixes) {
    const std::string s = suffix;
    if (path.size() > s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0) return true;
  }
  return false;
}

void check_one_line(const std::string& option, const std::string& value) {
  if (value.find_first_of("\n\r") != std::string::npos) {
    throw ConfigError(option + ": expected a single line, found a line break in '" + value + "'.",
                      "give the path (or pattern) on one line.");
  }
}

/// The pattern's expansion, with errors that name the option.
std::vector<std::string> expand(const std::string& spec) {
  try {
    return expand_braces(spec);
  } catch (const ConfigError& e) {
    throw ConfigError("--stage-data " + e.message(), e.hint());
  }
}

/// --stage-mode's value ("" is auto), and how the data will go, for a request with --stage-data.
StageMode choose_mode(const SbatchOptions& o) {
  const std::string mode = o.stage_mode.empty() ? "auto" : o.stage_mode;
  if (mode != "auto" && mode != "copy" && mode != "extract") {
    throw ConfigError("--stage-mode '" + o.stage_mode + "': expected auto, copy or extract, found '" + o.stage_mode + "'.",
                      "auto (the default) extracts one archive and copies shards (a pattern or a folder) as they are.");
  }
  const bool folder = files::is_directory(o.stage_data);
  if (mode == "extract" && folder) {
    throw ConfigError("--stage-mode extract with --stage-data '" + o.stage_data +
                          "': expected one tar archive to extract, found a folder.",
                      "drop --stage-mode: a folder's *.tar shards are copied as they are; or pack the folder into "
                      "one archive (tar -cf data.tar -C PARENT FOLDER) and stage that.");
  }
  if (folder || mode == "copy") return StageMode::copy;
  if (mode == "extract" || files::is_regular_file(o.stage_data)) return StageMode::extract;
  // Not here: a pattern if its braces name other files than the text itself, else an archive that
  // may exist only where the job runs (checked there).
  return expand(o.stage_data) == std::vector<std::string>{o.stage_data} ? StageMode::extract : StageMode::copy;
}

/// One tar archive, extracted on every node (the script checks it there; it may exist only there).
void plan_extract(const SbatchOptions& o, StagePlan& plan) {
  if (split_pattern_list(o.stage_data).size() > 1 || expand(o.stage_data) != std::vector<std::string>{o.stage_data}) {
    throw ConfigError("--stage-mode extract with --stage-data '" + o.stage_data +
                          "': expected one tar archive to extract, found a pattern of " +
                          std::to_string(expand(o.stage_data).size()) + " names.",
                      "drop --stage-mode: a pattern's shards are copied as they are (train reads tar shards in place).");
  }
  if (!is_tar_archive(o.stage_data)) {
    throw ConfigError("--stage-data '" + o.stage_data + "': expected a tar archive (.tar, .tar.gz, .tgz, "
                          ".tar.bz2, .tar.xz, .tar.zst), found another name.",
                      "repack the data folder: tar -cf data.tar -C PARENT FOLDER (uncompressed extracts "
                      "fastest), then --stage-data data.tar --stage-subdir FOLDER; or --stage-mode copy to copy "
                      "the file as it is.");
  }
  if (!o.stage_subdir.empty()) {
    check_one_line("--stage-subdir", o.stage_subdir);
    bool dotdot = false;
    for (const std::string& part : text::split(o.stage_subdir, '/')) dotdot = dotdot || part == "..";
    if (o.stage_subdir[0] == '/' || dotdot) {
      throw ConfigError("--stage-subdir '" + o.stage_subdir + "': expected a folder inside the archive "
                            "(relative, without '..'), found '" + o.stage_subdir + "'.",
                        "name the folder as `tar -tf ARCHIVE` lists it, e.g. cifar-10-batches-bin.");
    }
  }
  plan.mode = StageMode::extract;
  plan.archive = o.stage_data;
}

/// A folder's *.tar files, sorted by name (as the datasets read a folder of shards).
std::vector<std::string> folder_shards(const std::string& dir) {
  std::vector<std::string> names = files::list_dir(dir);
  std::sort(names.begin(), names.end());
  std::vector<std::string> out;
  for (const std::string& name : names) {
    const std::string path = files::join(dir, name);
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tar") == 0 && files::is_regular_file(path)) {
      out.push_back(path);
    }
  }
  if (out.empty()) {
    throw ConfigError("--stage-data '" + dir + "': expected WebDataset shards (*.tar files) in the folder, found none (" +
                          std::to_string(names.size()) + " other entries).",
                      "name the shards with a pattern ('DIR/train-{000000..000127}.tar'), or pack the folder into "
                      "one archive (tar -cf data.tar -C PARENT FOLDER) and stage that: it is extracted.");
  }
  return out;
}

/// Every file exists, is a regular file and opens for reading; for a pattern, the first missing one is
/// named with how many of the others exist.
void check_files(const std::string& spec, const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      const auto present = std::count_if(paths.begin(), paths.end(), [](const std::string& p) { return files::exists(p); });
      throw ConfigError("--stage-data '" + spec + "': expected the " + std::to_string(paths.size()) + " file" +
                            (paths.size() == 1 ? "" : "s") + " it names, found no file " + path +
                            " (the first one missing; " + std::to_string(present) + " of " +
                            std::to_string(paths.size()) + " exist, relative to this folder, the submit dir).",
                        "check the folder and the range in braces ({000000..000127} names 128 files, zero-padded "
                        "to 6 digits), and quote the pattern so that the shell leaves the braces alone.");
    }
    if (!S_ISREG(st.st_mode)) {
      throw ConfigError("--stage-data '" + spec + "': expected regular files to copy, found " + path + ", " +
                            (S_ISDIR(st.st_mode) ? "a folder" : "not a regular file") + ".",
                        "a folder is staged when it is the whole --stage-data (its *.tar files); in a pattern, "
                        "name files.");
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      throw ConfigError("--stage-data '" + spec + "': expected files this user can read, found " + path +
                            " unreadable (" + std::strerror(errno) + ").",
                        "fix its permissions (chmod a+r " + path + "), or leave it out of the pattern.");
    }
    ::close(fd);
  }
}

/// The copies share one folder on each node: no two files may have the same name.
void check_distinct_names(const std::string& spec, const std::vector<std::string>& paths) {
  std::map<std::string, std::string> seen;
  for (const std::string& path : paths) {
    const auto [it, fresh] = seen.emplace(files::basename(path), path);
    if (!fresh) {
      throw ConfigError("--stage-data '" + spec + "': expected distinct file names (the copies share one folder on "
                            "each node), found " + it->first + " twice: " + it->second + " and " + path + ".",
                        "stage shards whose names differ (e.g. train-000000.tar and val-000000.tar), one "
                        "--stage-data per job.");
    }
  }
}

/// train's --data under the staged folder: each "::" item's file part, as typed. Its braces must be in
/// the file name, since the folders are not kept.
std::vector<std::string> staged_names(const std::string& spec) {
  std::vector<std::string> names;
  for (const std::string& pattern : split_pattern_list(spec)) {
    const std::size_t slash = pattern.rfind('/');
    const std::string folder = slash == std::string::npos ? "" : pattern.substr(0, slash);
    if (folder.find_first_of("{}") != std::string::npos) {
      throw ConfigError("--stage-data '" + spec + "': expected braces in the file names only (the copies share one "
                            "folder on each node), found them in the folder part '" + folder + "'.",
                        "name one folder per pattern and join the patterns with '::', e.g. "
                        "'d/a/train-{0..3}.tar::d/b/val-{0..1}.tar'.");
    }
    names.push_back(slash == std::string::npos ? pattern : pattern.substr(slash + 1));
  }
  return names;
}

/// Shards copied as they are: found, checked and measured.
void plan_copy(const SbatchOptions& o, StagePlan& plan) {
  const std::string& spec = o.stage_data;
  if (!o.stage_subdir.empty()) {
    throw ConfigError("--stage-subdir '" + o.stage_subdir + "' with --stage-data '" + spec +
                          "' (shards, copied as they are): expected --stage-subdir only with an archive, which is "
                          "extracted, found shards.",
                      "drop --stage-subdir: train gets the staged shards themselves (their pattern, or the folder).");
  }
  plan.mode = StageMode::copy;
  plan.from_folder = files::is_directory(spec);
  if (!plan.from_folder) plan.data_names = staged_names(spec);
  plan.files = plan.from_folder ? folder_shards(spec) : expand(spec);
  check_files(spec, plan.files);
  check_distinct_names(spec, plan.files);
  for (const std::string& path : plan.files) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) plan.bytes += static_cast<std::int64_t>(st.st_size);
  }
}

}  // namespace

StagePlan plan_staging(const SbatchOptions& o) {
  StagePlan plan;
  if (o.stage_data.empty()) {
    if (!o.stage_subdir.empty()) {
      throw ConfigError("--stage-subdir '" + o.stage_subdir + "': expected it with --stage-data, found no archive.",
                        "add --stage-data ARCHIVE, or drop --stage-subdir.");
    }
    if (!o.stage_mode.empty()) {
      throw ConfigError("--stage-mode '" + o.stage_mode + "': expected it with --stage-data, found no data to stage.",
                        "add --stage-data (an archive, a shard pattern or a folder of shards), or drop --stage-mode.");
    }
    return plan;
  }
  check_one_line("--stage-data", o.stage_data);
  bool data_given = false;
  const std::string data = train_flag_value(o.train_args, {"--data"}, &data_given);
  if (data_given) {
    throw ConfigError("--stage-data '" + o.stage_data + "' with train's --data " + data +
                          ": expected one source for the data, found both.",
                      "drop --data from the train arguments: the script passes train the staged data.");
  }
  if (choose_mode(o) == StageMode::copy) {
    plan_copy(o, plan);
  } else {
    plan_extract(o, plan);
  }
  return plan;
}

}  // namespace train
