// `trainctl preflight`'s checks, run on every node of a job before training (seed 000 got a GPU node
// where CUDA was not available, and found out only from the training script's traceback): data
// readable here, CUDA GPUs visible where the job asked for them, one task per GPU.
#include "train/launcher/preflight.h"
#include "train/launcher/sbatch.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "train/error.h"

namespace train {
namespace {


std::string env_value(const EnvMap& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

std::string this_host() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  std::string host = buf;
  return host.substr(0, host.find('.'));
}

bool is_idx_dataset(const std::string& dataset) { return dataset == "mnist" || dataset == "fashion-mnist"; }

/// Reads the first n bytes of a file; throws DataError when it can't be opened or is shorter.
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
  if (got < n) {
    throw DataError(path + ": expected at least " + std::to_string(n) + " bytes, found " + std::to_string(got) +
                        " (truncated?).",
                    "re-extract or re-download the dataset.");
  }
  return head;
}

bool is_regular(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

/// Checks the four IDX files; returns the summary or throws DataError.
std::string check_idx(const std::string& dir, const std::string& dataset) {
  int files = 0;
  for (const char* split : {"train", "t10k"}) {
    for (const auto& [kind, magic] : {std::pair<std::string, unsigned char>{"images-idx3-ubyte", 3},
                                      std::pair<std::string, unsigned char>{"labels-idx1-ubyte", 1}}) {
      const std::string stem = std::string(split) + "-" + kind;
      std::string path = dir + "/" + stem;
      bool gz = false;
      if (!is_regular(path)) {
        path += ".gz";
        gz = true;
        if (!is_regular(path)) {
          throw DataError(stem + ": expected it (or " + stem + ".gz) in '" + dir + "' for " +
                              (dataset.empty() ? std::string("an IDX dataset") : dataset) + ", found neither.",
                          "pass train --data with the folder holding the IDX files (Debian's "
                          "dataset-fashion-mnist puts them in /usr/share/datasets/fashion-mnist).");
        }
      }
      const std::string head = read_head(path, 4);
      if (gz && (static_cast<unsigned char>(head[0]) != 0x1f || static_cast<unsigned char>(head[1]) != 0x8b)) {
        throw DataError(path + ": expected a gzip file (starting 1f 8b), found other bytes.",
                        "re-download the file, or drop the .gz suffix if it was already uncompressed.");
      }
      if (!gz && (head[0] != 0 || head[1] != 0 || static_cast<unsigned char>(head[2]) != 0x08 ||
                  static_cast<unsigned char>(head[3]) != magic)) {
        throw DataError(path + ": expected the IDX magic " + std::string(magic == 3 ? "2051" : "2049") +
                            " (00 00 08 0" + std::to_string(magic) + "), found other bytes.",
                        "this is not an uncompressed IDX file; re-extract the dataset.");
      }
      ++files;
    }
  }
  return std::to_string(files) + " IDX files" + (dataset.empty() ? "" : " (" + dataset + ")");
}

constexpr std::int64_t kCifarRecordBytes = 3073;

/// Checks the six CIFAR-10 binary batches; returns the summary or throws DataError.
std::string check_cifar(const std::string& dir) {
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  names.push_back("test_batch.bin");
  for (const std::string& name : names) {
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      throw DataError(name + ": expected it in '" + dir + "' (CIFAR-10 binary version: data_batch_1..5.bin and "
                          "test_batch.bin), found no such file.",
                      "pass train --data with the cifar-10-batches-bin folder extracted from cifar-10-binary.tar.gz.");
    }
    if (st.st_size == 0 || st.st_size % kCifarRecordBytes != 0) {
      throw DataError(path + ": expected whole records of 3073 bytes (30730000 bytes for 10000), found " +
                          std::to_string(st.st_size) + " bytes (truncated?).",
                      "re-extract cifar-10-binary.tar.gz.");
    }
    read_head(path, 1);
  }
  return "6 CIFAR-10 batch files";
}

std::string describe_visible(const EnvMap& env) {
  const auto it = env.find("CUDA_VISIBLE_DEVICES");
  return it == env.end() ? "CUDA_VISIBLE_DEVICES unset" : "CUDA_VISIBLE_DEVICES='" + it->second + "'";
}

}  // namespace

std::string check_dataset_folder(const std::string& dir, const std::string& dataset) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    throw DataError("--data '" + dir + "': expected a folder with the " +
                        (dataset.empty() ? std::string("dataset") : dataset) + " files on this node, found " +
                        (err == ENOENT ? std::string("nothing at that path") : std::string(std::strerror(err))) + ".",
                    "the folder must be on a filesystem every node mounts (a login node's /tmp is not), "
                    "or stage it onto the nodes with trainctl sbatch --stage-data ARCHIVE.");
  }
  if (!S_ISDIR(st.st_mode)) {
    throw DataError("--data '" + dir + "': expected a folder, found a file.",
                    "pass the folder that holds the dataset files, not a file in it.");
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    throw DataError("--data '" + dir + "': expected a folder this user can read, found it unreadable (" +
                        std::strerror(errno) + ").",
                    "fix its permissions (chmod a+rx) or copy the data somewhere readable.");
  }
  ::closedir(d);
  if (is_idx_dataset(dataset)) return check_idx(dir, dataset);
  if (dataset == "cifar10") return check_cifar(dir);
  try {
    return check_idx(dir, dataset);
  } catch (const DataError& idx_error) {
    try {
      return check_cifar(dir);
    } catch (const DataError&) {
      throw DataError("--data '" + dir + "': expected IDX files (train-images-idx3-ubyte[.gz], ...) or CIFAR-10 "
                          "batches (data_batch_1.bin, ...), found neither: " + idx_error.message(),
                      "pass train --data with the folder that holds the dataset files.");
    }
  }
}

PreflightReport run_preflight(const PreflightOptions& o, const EnvMap& env) {
  PreflightReport report;
  report.host = this_host();
  auto fail = [&](const Error& e) { report.errors.push_back(e.what()); };

  // Data: the same folder train will read, by train's rules.
  std::string model = detail::last_flag_value(o.train_args, {"--model"});
  if (model.empty()) model = "mnist";
  std::string dataset = detail::last_flag_value(o.train_args, {"--dataset"});
  if (dataset.empty()) dataset = model == "cifar10" ? "cifar10" : model == "mnist" ? "fashion-mnist" : "";
  std::string data = o.data_dir.empty() ? detail::last_flag_value(o.train_args, {"--data"}) : o.data_dir;
  if (data.empty() && dataset == "fashion-mnist") {
    data = env_value(env, "TRAIN_FASHION_MNIST_DIR");
    if (data.empty()) data = kDefaultFashionMnistDir;
  }
  try {
    if (data.empty()) {
      throw ConfigError("--data: expected the folder holding the " + dataset + " files, found none given.",
                        "pass train --data DIR after '--' (or stage it with trainctl sbatch --stage-data).");
    }
    report.passed.push_back("data: " + check_dataset_folder(data, dataset) + " readable in " + data);
  } catch (const Error& e) {
    fail(e);
  }

  // Tasks on this node, from the job (the preflight step itself runs one task per node).
  int tasks = 0;
  const std::string tpn_name = o.tasks_per_node.empty() ? "SLURM_TASKS_PER_NODE" : "--tasks-per-node";
  const std::string tpn = o.tasks_per_node.empty() ? env_value(env, "SLURM_TASKS_PER_NODE") : o.tasks_per_node;
  try {
    if (!tpn.empty()) {
      const std::vector<int> per_node = parse_tasks_per_node(tpn_name, tpn);
      const std::string node_id = env_value(env, "SLURM_NODEID");
      std::size_t node = 0;
      if (!node_id.empty() && node_id.find_first_not_of("0123456789") == std::string::npos && node_id.size() < 9) {
        node = static_cast<std::size_t>(std::stoul(node_id));
      }
      if (node >= per_node.size()) {
        throw ConfigError(tpn_name + "='" + tpn + "': expected an entry for node " + std::to_string(node) +
                              " (SLURM_NODEID), found " + std::to_string(per_node.size()) + " node(s).",
                          "pass the job's SLURM_TASKS_PER_NODE from the batch script, not the step's.");
      }
      tasks = per_node[node];
      report.passed.push_back("tasks: " + std::to_string(tasks) + " on this node (" + tpn_name + "=" + tpn + ")");
    }
  } catch (const Error& e) {
    fail(e);
  }

  // GPUs: requested ones must be visible to CUDA, and each task needs its own.
  int expect = o.expect_gpus;
  if (expect < 0) {
    const std::string on_node = env_value(env, "SLURM_GPUS_ON_NODE");
    expect = !on_node.empty() && on_node.size() < 6 && on_node.find_first_not_of("0123456789") == std::string::npos
                 ? std::stoi(on_node)
                 : 0;
  }
  const std::string device = detail::last_flag_value(o.train_args, {"--device"});
  const std::string backend = detail::last_flag_value(o.train_args, {"--backend"});
  const bool cpu_only = device == "cpu" || backend == "gloo";
  const int visible = count_visible_gpus(env, o.proc_gpus_dir);
  DIR* driver = ::opendir(o.proc_gpus_dir.c_str());
  const bool driver_loaded = driver != nullptr;
  if (driver != nullptr) ::closedir(driver);
  const bool per_task_binding = !env_value(env, "SLURM_GPUS_PER_TASK").empty();
  const std::string gpu_hint =
      "this node can't run CUDA (seed 000's case): check nvidia-smi in a job there; submit to a GPU partition "
      "(--partition) with --gres=gpu:N, and keep this node out with --exclude=" + report.host + " (tell the admins).";
  if (cpu_only) {
    if (expect > 0) {
      report.warnings.push_back("the job asked for " + std::to_string(expect) + " GPU(s) per node, but train runs on "
                                "the CPU (--device " + device + (backend.empty() ? "" : ", --backend " + backend) +
                                "): they stay idle.");
    }
    report.passed.push_back("device: CPU (train " + std::string(device == "cpu" ? "--device cpu" : "--backend gloo") + ")");
  } else if (expect > 0) {
    try {
      if (visible == 0) {
        throw ConfigError("CUDA GPUs on " + report.host + ": expected the " + std::to_string(expect) +
                              " GPU(s) per node the job asked for, found none visible (" + describe_visible(env) +
                              (driver_loaded ? "" : ", no NVIDIA driver: " + o.proc_gpus_dir + " missing") + ").",
                          gpu_hint);
      }
      if (!driver_loaded) {
        throw ConfigError("NVIDIA driver on " + report.host + ": expected " + o.proc_gpus_dir +
                              " to list the GPUs of " + describe_visible(env) + ", found no driver loaded.",
                          gpu_hint);
      }
      if (visible < expect) {
        throw ConfigError("CUDA GPUs on " + report.host + ": expected the " + std::to_string(expect) +
                              " GPU(s) per node the job asked for, found " + std::to_string(visible) + " visible (" +
                              describe_visible(env) + ").",
                          gpu_hint);
      }
      if (tasks > visible && !per_task_binding) {
        throw ConfigError("tasks on " + report.host + ": expected one task per GPU (" + std::to_string(visible) +
                              " visible), found " + std::to_string(tasks) + " tasks (" + tpn_name + "=" + tpn + ").",
                          "NCCL needs a GPU per rank: submit with --ntasks-per-node equal to the GPUs per node "
                          "(or --gpus-per-task=1).");
      }
      if (tasks > 0 && tasks < visible) {
        report.warnings.push_back(std::to_string(visible) + " GPUs visible for " + std::to_string(tasks) +
                                  " task(s): " + std::to_string(visible - tasks) +
                                  " stay idle; submit with --ntasks-per-node=" + std::to_string(visible) + ".");
      }
      report.passed.push_back("GPUs: " + std::to_string(visible) + " visible (" + describe_visible(env) + "), " +
                              std::to_string(expect) + " asked for");
    } catch (const Error& e) {
      fail(e);
    }
  } else if (visible > 0) {
    report.warnings.push_back(std::to_string(visible) + " GPU(s) visible (" + describe_visible(env) +
                              ") though the job asked for none: train's --backend auto uses them with NCCL; "
                              "request them (--gres=gpu:N) or pass train --device cpu.");
    if (tasks > visible && !per_task_binding) {
      fail(ConfigError("tasks on " + report.host + ": expected at most one per visible GPU (" + std::to_string(visible) +
                           ") since train picks NCCL when it sees GPUs, found " + std::to_string(tasks) + ".",
                       "pass train --device cpu (Gloo on the CPU), or request one GPU per task."));
    }
  } else {
    report.passed.push_back("GPUs: none asked for, none visible: train uses Gloo on the CPU");
  }
  return report;
}

}  // namespace train
