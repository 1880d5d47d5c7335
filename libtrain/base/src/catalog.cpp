// The catalog's tables (recipes, datasets, layouts) and the folder search that --data and
// `trainctl preflight` share. POSIX only: it runs next to LibTorch (see train/files.h).
#include "train/catalog.h"

#include "train/error.h"
#include "train/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace train::catalog {
namespace {

// The recipes of the cluster-wiki scripts these models come from: MNIST (Adadelta 1.0, StepLR 0.7, batch 64, 14 epochs) and CIFAR-10 (SGD
// 0.1, momentum 0.9, weight decay 1e-4, batch 256, 4 epochs).
const Recipe kMnistRecipe{"adadelta", 64, 1.0, 0.7, 0.0, 0.9, 14, "fashion-mnist"};
const Recipe kCifarRecipe{"sgd", 256, 0.1, 1.0, 1e-4, 0.9, 4, "cifar10"};

const char* kMnistHowTo =
    "get the files on a machine with internet access (a login node): python -c \"from torchvision import "
    "datasets; datasets.MNIST('data', download=True)\" then pass --data data; or download "
    "train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and "
    "t10k-labels-idx1-ubyte.gz from the MNIST site into one folder.";
const char* kFashionHowTo =
    "Debian's package puts them in /usr/share/datasets/fashion-mnist (apt-get install dataset-fashion-mnist, "
    "then --data /usr/share/datasets/fashion-mnist); or, on a machine with internet access (a login node): "
    "python -c \"from torchvision import datasets; datasets.FashionMNIST('data', download=True)\" then pass "
    "--data data.";
const char* kCifarHowTo =
    "on a machine with internet access (a login node): python -c \"from torchvision import datasets; "
    "datasets.CIFAR10('data', download=True)\" then pass --data data (it finds data/cifar-10-batches-py); or "
    "download the binary version, https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz, and extract it "
    "with tar -xzf cifar-10-binary.tar.gz -C data (data/cifar-10-batches-bin).";

std::vector<DatasetInfo> make_datasets() {
  // Flat folders first (what --data always took), then torchvision's roots, then a torchvision
  // dataset folder itself (data/MNIST holds raw/).
  return {
      {"mnist", {{"", Format::idx}, {"MNIST/raw", Format::idx}, {"raw", Format::idx}}, 1, 28, 28, kMnistMean, kMnistStd, kMnistHowTo},
      {"fashion-mnist",
       {{"", Format::idx}, {"FashionMNIST/raw", Format::idx}, {"raw", Format::idx}},
       1, 28, 28, kMnistMean, kMnistStd, kFashionHowTo},
      {"cifar10",
       {{"", Format::cifar_binary},
        {"", Format::cifar_pickle},
        {"cifar-10-batches-bin", Format::cifar_binary},
        {"cifar-10-batches-py", Format::cifar_pickle}},
       3, 32, 32, kCifarMean, kCifarStd, kCifarHowTo},
  };
}

std::string list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The path of `name` in `dir`, IDX also as name.gz; "" when neither is a file.
std::string find_file(const std::string& dir, const std::string& name, Format format) {
  const std::string p = files::join(dir, name);
  if (files::is_regular_file(p)) return p;
  if (format == Format::idx && files::is_regular_file(p + ".gz")) return p + ".gz";
  return "";
}

std::string read_head(const std::string& path, std::size_t n) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw DataError(path + ": expected a file this user can read on this node, found it unreadable (" +
                        std::strerror(err) + ").",
                    err == EACCES ? "fix its permissions (chmod a+r) or read it as its owner."
                                  : "check that the filesystem is mounted on every node of the job.");
  }
  std::string head(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, &head[got], n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  ::close(fd);
  head.resize(got);
  return head;
}

}  // namespace

std::string format_name(Format format) {
  switch (format) {
    case Format::idx: return "IDX";
    case Format::cifar_binary: return "CIFAR-10 binary";
    case Format::cifar_pickle: return "CIFAR-10 Python pickle";
  }
  return "unknown";
}

bool has_recipe(const std::string& model) { return model == "mnist" || model == "cifar10"; }

const Recipe& recipe_for(const std::string& model) { return model == "cifar10" ? kCifarRecipe : kMnistRecipe; }

const std::vector<DatasetInfo>& datasets() {
  static const std::vector<DatasetInfo> kDatasets = make_datasets();
  return kDatasets;
}

bool has_dataset(const std::string& name) {
  for (const DatasetInfo& d : datasets()) {
    if (d.name == name) return true;
  }
  return false;
}

const DatasetInfo& dataset_info(const std::string& name) {
  std::vector<std::string> names;
  for (const DatasetInfo& d : datasets()) {
    if (d.name == name) return d;
    names.push_back(d.name);
  }
  throw ConfigError("--dataset: expected one of " + list(names) + ", found '" + name + "'.",
                    "MNIST-format data (including Fashion-MNIST) uses mnist or fashion-mnist.");
}

std::vector<std::string> split_files(Format format, Split split) {
  const bool train = split == Split::train;
  switch (format) {
    case Format::idx: {
      const std::string prefix = train ? "train" : "t10k";
      return {prefix + "-images-idx3-ubyte", prefix + "-labels-idx1-ubyte"};
    }
    case Format::cifar_binary:
    case Format::cifar_pickle: {
      const std::string suffix = format == Format::cifar_binary ? ".bin" : "";
      if (!train) return {"test_batch" + suffix};
      std::vector<std::string> out;
      for (int i = 1; i <= 5; ++i) out.push_back("data_batch_" + std::to_string(i) + suffix);
      return out;
    }
  }
  return {};
}

Located locate(const std::string& dataset, const std::string& data_dir, Split split) {
  const DatasetInfo& info = dataset_info(dataset);
  const std::string split_name = split == Split::train ? "train" : "test";
  if (!files::is_directory(data_dir)) {
    throw DataError("--data '" + data_dir + "': expected a folder with the " + dataset + " files on this node, found " +
                        (files::exists(data_dir) ? "a file" : "nothing at that path") + ".",
                    "pass the folder that holds the dataset (or torchvision's root folder, e.g. ./data). " +
                        info.how_to_get);
  }
  std::string looked;
  for (const Layout& layout : info.layouts) {
    const std::string dir = layout.subfolder.empty() ? data_dir : files::join(data_dir, layout.subfolder);
    const std::vector<std::string> names = split_files(layout.format, split);
    std::string what = list(names);
    if (layout.format == Format::idx) what += " (each raw or .gz)";
    looked += "\n  " + dir + ": " + format_name(layout.format) + " " + what;
    if (!files::is_directory(dir)) {
      looked += " -- no such folder";
      continue;
    }
    Located found{dir, layout.format, {}};
    std::vector<std::string> missing;
    for (const std::string& name : names) {
      const std::string p = find_file(dir, name, layout.format);
      if (p.empty()) {
        missing.push_back(name);
      } else {
        found.paths.push_back(p);
      }
    }
    if (missing.empty()) return found;
    if (!found.paths.empty()) {
      throw DataError(dir + ": expected the " + dataset + " " + split_name + " split in the " +
                          format_name(layout.format) + " layout (" + what + "), found " + list(found.paths) +
                          " but not " + list(missing) + ".",
                      "the folder is incomplete: re-extract or re-download the dataset. " + info.how_to_get);
    }
    looked += " -- none there";
  }
  // Another dataset's torchvision folder there, of images the same model takes (data/MNIST/raw
  // while training Fashion-MNIST), means the wrong --dataset, not missing files.
  std::string other;
  for (const DatasetInfo& d : datasets()) {
    const bool same_shape = d.channels == info.channels && d.height == info.height && d.width == info.width;
    for (const Layout& l : d.layouts) {
      if (d.name != dataset && same_shape && !l.subfolder.empty() && l.subfolder != "raw" &&
          files::is_directory(files::join(data_dir, l.subfolder))) {
        other += " " + files::join(data_dir, l.subfolder) + " holds " + d.name + ": pass --dataset " + d.name +
                 " to train on it.";
      }
    }
  }
  throw DataError("--data '" + data_dir + "': expected the " + dataset + " " + split_name +
                      " files, found them in none of the places looked:" + looked,
                  (other.empty() ? "" : other.substr(1) + " Otherwise, ") + info.how_to_get);
}

void check_file_head(const std::string& path, Format format) {
  const std::string head = read_head(path, 4);
  const auto byte = [&head](std::size_t i) { return static_cast<unsigned char>(head[i]); };
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (format == Format::idx) {
    const bool images = path.find("images") != std::string::npos;
    const uint32_t magic = images ? kIdxImagesMagic : kIdxLabelsMagic;
    if (gz) {
      if (head.size() < 2 || byte(0) != 0x1f || byte(1) != 0x8b) {
        throw DataError(path + ": expected a gzip file (starting 1f 8b), found other bytes.",
                        "re-download the file, or drop the .gz suffix if it was already uncompressed.");
      }
      return;
    }
    if (head.size() < 4 || byte(0) != 0 || byte(1) != 0 || byte(2) != 0x08 || byte(3) != (magic & 0xff)) {
      throw DataError(path + ": expected the IDX magic " + std::to_string(magic) + " (00 00 08 0" +
                          std::to_string(magic & 0xff) + "), found " +
                          (head.size() < 4 ? "a file of " + std::to_string(head.size()) + " bytes" : "other bytes") + ".",
                      "this is not an uncompressed IDX file; re-extract the dataset.");
    }
    return;
  }
  if (format == Format::cifar_binary) {
    struct stat st {};
    ::stat(path.c_str(), &st);
    if (st.st_size == 0 || st.st_size % kCifarRecordBytes != 0) {
      throw DataError(path + ": expected whole records of " + std::to_string(kCifarRecordBytes) + " bytes (" +
                          std::to_string(kCifarRecordBytes * kCifarRecordsPerFile) + " bytes for " +
                          std::to_string(kCifarRecordsPerFile) + "), found " + std::to_string(st.st_size) +
                          " bytes (truncated?).",
                      "re-extract cifar-10-binary.tar.gz.");
    }
    return;
  }
  // A pickle of protocol 2 or later starts with PROTO (0x80) and its version.
  if (head.size() < 2 || byte(0) != 0x80 || byte(1) < 2 || byte(1) > 5) {
    throw DataError(path + ": expected a Python pickle (protocol 2 to 5, starting 80 0N), found " +
                        (head.empty() ? std::string("an empty file") : "other bytes") + ".",
                    "this is not torchvision's cifar-10-batches-py file; re-extract cifar-10-python.tar.gz "
                    "(or download again with torchvision's download=True).");
  }
}

}  // namespace train::catalog
