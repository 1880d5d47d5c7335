// The catalog's tables (recipes, datasets, layouts) and the folder search that --data and
// `trainctl preflight` share, and the whole-file checks preflight makes. POSIX only: it runs next
// to LibTorch (see train/base/files.h).
#include "train/catalog/catalog.h"

#include "read_open.h"

#include "train/catalog/cifar_batch.h"
#include "train/base/error.h"
#include "train/base/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

namespace train::catalog {
namespace {

// The recipes of the cluster-wiki scripts these models come from: MNIST (Adadelta 1.0, StepLR 0.7, batch 64, 14 epochs) and CIFAR-10 (SGD
// 0.1, momentum 0.9, weight decay 1e-4, batch 256, 4 epochs).
const Recipe kMnistRecipe{"adadelta", 64, 1.0, 0.7, 0.0, 0.9, 14, "fashion-mnist"};
const Recipe kCifarRecipe{"sgd", 256, 0.1, 1.0, 1e-4, 0.9, 4, "cifar10"};
// The usual CIFAR-10 ResNet-18 recipe: SGD 0.1, Nesterov momentum 0.9, weight decay 5e-4, batch 128, a linear
// warm-up over the first 5% of the steps and then a cosine decay to 0, every step; 30 epochs.
const Recipe kResNet18Recipe{"sgd", 128, 0.1, 1.0, 5e-4, 0.9, 30, "cifar10", "warmup_cosine", true, 0.05};
// torchvision's ImageNet reference for ResNet-18 (references/classification/README.md): 32 per GPU
// on 8 GPUs, SGD 0.1, momentum 0.9, weight decay 1e-4, 90 epochs, StepLR(30, 0.1).
const Recipe kImageNetRecipe{"sgd", 32, 0.1, 0.1, 1e-4, 0.9, 90, "imagefolder", "step", false, 0, 30};

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
  const int fd = detail::open_readable(path, "check that the filesystem is mounted on every node of the job.");
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

bool has_recipe(const std::string& model) { return model == "mnist" || model == "cifar10" || model == "resnet18"; }

const Recipe& recipe_for(const std::string& model) {
  if (model == "resnet18") return kResNet18Recipe;
  return model == "cifar10" ? kCifarRecipe : kMnistRecipe;
}

const Recipe& imagenet_recipe() { return kImageNetRecipe; }

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

std::string describe_source(const std::string& split_name, const Located& found, int64_t samples,
                            int64_t kept) {
  std::string names;
  for (const std::string& p : found.paths) names += (names.empty() ? "" : ", ") + files::basename(p);
  return split_name + ": " + std::to_string(samples) + " samples from " + std::to_string(found.paths.size()) + " " +
         format_name(found.format) + " file" + (found.paths.size() == 1 ? "" : "s") + " (" + names +
         ") in " + found.dir + (kept < samples ? "; the first " + std::to_string(kept) + " kept (sample limit)" : "");
}

namespace {

uint32_t be32(const std::vector<uint8_t>& b, std::size_t off) {
  return (uint32_t(b[off]) << 24) | (uint32_t(b[off + 1]) << 16) | (uint32_t(b[off + 2]) << 8) | uint32_t(b[off + 3]);
}

// The whole file, gunzipped where it is gzip (zlib reads plain files as they are).
std::vector<uint8_t> read_all(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    throw DataError(path + ": expected a file this user can read on this node, found it unreadable (" +
                        std::strerror(errno) + ").",
                    "check that the file exists and its filesystem is mounted on this node.");
  }
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  int n = 0;
  while ((n = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()))) > 0) {
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  int errnum = 0;
  const std::string msg = gzerror(f, &errnum);
  const int rc = gzclose(f);
  if (n < 0 || (errnum != Z_OK && errnum != Z_STREAM_END) || rc == Z_BUF_ERROR) {
    throw DataError(path + ": expected a whole gzip stream, found it cut short or corrupt after " +
                        std::to_string(out.size()) + " bytes (" + (msg.empty() ? "no end marker" : msg) + ").",
                    "re-download the file (or re-copy it), or drop the .gz suffix if it is not compressed.");
  }
  return out;
}

// An IDX file's header, size and (labels file) labels, as datasets/src/idx.cpp checks them.
FileCheck check_idx(const std::string& path, const std::vector<uint8_t>& b) {
  const bool images = path.find("images") != std::string::npos;
  const std::size_t header = images ? kIdxImagesHeaderBytes : kIdxLabelsHeaderBytes;
  const uint32_t magic = images ? kIdxImagesMagic : kIdxLabelsMagic;
  const std::string what = images ? "images" : "labels";
  if (b.size() >= 4 && be32(b, 0) != magic) {
    throw DataError(path + ": expected the IDX magic " + std::to_string(magic) + " (00 00 08 0" +
                        std::to_string(magic & 0xff) + ") of an " + what + " file, found " + std::to_string(be32(b, 0)) +
                        ".",
                    "this is not an uncompressed IDX " + what + " file; re-extract the dataset.");
  }
  if (b.size() < header) {
    throw DataError(path + ": expected an IDX " + what + " header of " + std::to_string(header) +
                        " bytes, found a file of " + std::to_string(b.size()) + " bytes.",
                    "the file is empty or truncated; re-extract the dataset archive.");
  }
  const uint64_t count = be32(b, 4);
  const uint64_t per_sample = images ? uint64_t(be32(b, 8)) * be32(b, 12) : 1;
  const uint64_t expected = header + count * per_sample;
  if (count == 0 || per_sample == 0 || b.size() != expected) {
    throw DataError(path + ": expected " + std::to_string(expected) + " bytes for " + std::to_string(count) + " " +
                        what + (images ? " of " + std::to_string(be32(b, 8)) + "x" + std::to_string(be32(b, 12)) : "") +
                        " (a positive count), found " + std::to_string(b.size()) +
                        (b.size() < expected ? " (truncated?)." : b.size() > expected ? " (trailing bytes?)." : "."),
                    "re-extract the dataset archive.");
  }
  if (!images) {
    for (uint64_t i = 0; i < count; ++i) {
      if (b[header + i] >= kNumClasses) {
        throw DataError(path + ": expected labels in 0..9, found " + std::to_string(int(b[header + i])) +
                            " at index " + std::to_string(i) + ".",
                        "the labels file is corrupt; re-extract the dataset archive.");
      }
    }
  }
  return FileCheck{static_cast<int64_t>(count), ""};
}

}  // namespace

FileCheck check_file(const std::string& path, Format format) {
  const std::string head = read_head(path, 4);  // an unreadable file, with why
  const auto byte = [&head](std::size_t i) { return static_cast<unsigned char>(head[i]); };
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (format == Format::idx) {
    if (gz && (head.size() < 2 || byte(0) != 0x1f || byte(1) != 0x8b)) {
      throw DataError(path + ": expected a gzip file (starting 1f 8b), found other bytes.",
                      "re-download the file, or drop the .gz suffix if it was already uncompressed.");
    }
    return check_idx(path, read_all(path));
  }
  if (format == Format::cifar_pickle && (head.size() < 2 || byte(0) != 0x80 || byte(1) < 2 || byte(1) > 5)) {
    // A pickle of protocol 2 or later starts with PROTO (0x80) and its version.
    throw DataError(path + ": expected a Python pickle (protocol 2 to 5, starting 80 0N), found " +
                        (head.empty() ? std::string("an empty file") : "other bytes") + ".",
                    "this is not torchvision's cifar-10-batches-py file; re-extract cifar-10-python.tar.gz "
                    "(or download again with torchvision's download=True).");
  }
  const cifar::Batch batch = cifar::read_batch(path, format);
  return FileCheck{batch.size(), cifar::record_count_warning(path, batch.size())};
}

}  // namespace train::catalog
