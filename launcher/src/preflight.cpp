// `trainctl preflight`'s checks, run on every node of a job before training (a job can get a GPU node
// where CUDA was not available, and found out only from the training script's traceback): data
// readable here, CUDA GPUs visible where the job asked for them, one task per GPU.
#include "train/launcher/preflight.h"
#include "train/launcher/sbatch.h"
#include "preflight_images.h"

#include <dirent.h>
#include <sched.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "train/catalog/catalog.h"
#include "train/base/braces.h"
#include "train/base/files.h"
#include "train/base/text.h"
#include "train/base/error.h"
#include "train/base/log.h"

namespace train {
namespace {


std::string env_value(const EnvMap& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

std::string describe_visible(const EnvMap& env) {
  const auto it = env.find("CUDA_VISIBLE_DEVICES");
  return it == env.end() ? "CUDA_VISIBLE_DEVICES unset" : "CUDA_VISIBLE_DEVICES='" + it->second + "'";
}

}  // namespace

std::string check_dataset_folder(const std::string& dir, const std::string& dataset, std::vector<std::string>* warnings) {
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
  // The same search train makes (train/catalog/catalog.h), both splits; an unnamed dataset: any it knows.
  std::vector<std::string> names;
  if (!dataset.empty() && catalog::has_dataset(dataset)) {
    names.push_back(dataset);
  } else {
    for (const catalog::DatasetInfo& info : catalog::datasets()) names.push_back(info.name);
  }
  std::string first_error;
  for (const std::string& name : names) {
    try {
      int count = 0;
      std::string where;
      catalog::Format format = catalog::Format::idx;
      std::vector<std::string> found_warnings;
      for (const catalog::Split split : {catalog::Split::train, catalog::Split::test}) {
        const catalog::Located found = catalog::locate(name, dir, split);
        for (const std::string& path : found.paths) {
          const catalog::FileCheck check = catalog::check_file(path, found.format);
          if (!check.warning.empty()) found_warnings.push_back(check.warning);
        }
        count += static_cast<int>(found.paths.size());
        where = found.dir;
        format = found.format;
      }
      if (warnings != nullptr) warnings->insert(warnings->end(), found_warnings.begin(), found_warnings.end());
      const std::string sub = where.size() > dir.size() ? where.substr(dir.size() + (dir.back() == '/' ? 0 : 1)) : "";
      return std::to_string(count) + " " + catalog::format_name(format) + " files (" + name +
             (sub.empty() ? "" : ", in " + sub + "/") + ")";
    } catch (const DataError& e) {
      if (names.size() == 1) throw;
      if (first_error.empty()) first_error = e.message();
    }
  }
  throw DataError("--data '" + dir + "': expected the files of one of " + text::join(names, ", ") +
                      ", found none: " + first_error,
                  "pass train --data with the folder that holds the dataset files (or torchvision's root), and "
                  "--dataset to say which.");
}

namespace {

// run_preflight()'s checks, in the order it runs them. Each records what passed, what is worth a
// warning and what failed in the report, so one failing check doesn't hide the others.

/// The CPUs this process may run on (its affinity: a SLURM step's cgroup), at least 1.
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

/// Whether train's --data names WebDataset shards by a pattern: a "::" list, or braces that expand to
/// more than the text itself (a bad pattern counts, so that check_shard_files names its error).
bool is_shard_pattern(const std::string& data) {
  try {
    return split_pattern_list(data).size() > 1 || expand_braces(data) != std::vector<std::string>{data};
  } catch (const ConfigError&) {
    return true;
  }
}

/// WebDataset shards (a folder's *.tar files, or what a pattern names): each one here, a regular file
/// and readable. They are not read whole: train indexes them when it opens them.
std::string check_shard_files(const std::string& data) {
  std::vector<std::string> paths;
  struct stat st {};
  if (::stat(data.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    std::vector<std::string> names = files::list_dir(data);
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tar") == 0) paths.push_back(files::join(data, name));
    }
  } else {
    paths = expand_braces(data);
  }
  std::int64_t bytes = 0;
  for (const std::string& path : paths) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      const int err = fd < 0 ? errno : 0;
      if (fd >= 0) ::close(fd);
      const std::string found = err == ENOENT ? "no file " + path + " (the first one missing)"
                                              : path + " unusable (" +
                                                    (err != 0 ? std::string(std::strerror(err)) : "not a regular file") + ")";
      throw DataError("--data '" + data + "': expected the " + std::to_string(paths.size()) +
                          " WebDataset shard file(s) it names on this node, found " + found + ".",
                      "the shards must be on a file system every node mounts, or staged onto the nodes with "
                      "trainctl sbatch --stage-data 'DIR/train-{000000..000127}.tar'.");
    }
    bytes += static_cast<std::int64_t>(st.st_size);
    ::close(fd);
  }
  if (paths.empty()) {
    throw DataError("--data '" + data + "': expected WebDataset shards (*.tar files) in the folder, found none.",
                    "name the shards with a pattern, 'DIR/train-{000000..000127}.tar', or their folder.");
  }
  return std::to_string(paths.size()) + " WebDataset shard files (" + std::to_string(bytes) + " bytes)";
}

/// Data: the same folder train will read, by train's rules.
void check_data(const PreflightOptions& o, const EnvMap& env, PreflightReport& report) {
  std::string model = train_flag_value(o.train_args, {"--model"});
  if (model.empty()) model = "mnist";
  std::string dataset = train_flag_value(o.train_args, {"--dataset"});
  if (dataset.empty() && catalog::has_recipe(model)) dataset = catalog::recipe_for(model).dataset;
  std::string data = o.data_dir.empty() ? train_flag_value(o.train_args, {"--data"}) : o.data_dir;
  if (data.empty() && dataset == "fashion-mnist") {
    data = env_value(env, "TRAIN_FASHION_MNIST_DIR");
    if (data.empty()) data = kDefaultFashionMnistDir;
  }
  try {
    if (data.empty()) {
      throw ConfigError("--data: expected the folder holding the " + dataset + " files, found none given.",
                        "pass train --data DIR after '--' (or stage it with trainctl sbatch --stage-data).");
    }
    if (dataset == "webdataset" || is_shard_pattern(data)) {
      report.passed.push_back("data: " + check_shard_files(data) + " present and readable: " + data);
      if (dataset != "webdataset") return;
    }
    if (dataset == "imagefolder" || dataset == "webdataset") {
      const detail::ImageCheck c = detail::check_images(dataset, data, train_flag_value(o.train_args, {"--eval-data"}),
                                                        o.decode_images, usable_cpus());
      if (c.errors.empty()) report.passed.push_back("data: " + c.summary + ": none bad, in " + data);
      for (const std::string& e : c.errors) report.errors.push_back(e);
      return;
    }
    report.passed.push_back("data: " + check_dataset_folder(data, dataset, &report.warnings) + " checked whole in " + data);
  } catch (const Error& e) {
    report.errors.push_back(e.what());
  }
}

/// This node's task count and where it came from, for the GPU checks' messages.
struct NodeTasks {
  int tasks = 0;         ///< 0: unknown
  std::string tpn_name;  ///< --tasks-per-node or SLURM_TASKS_PER_NODE
  std::string tpn;       ///< its value
};

/// Tasks on this node, from the job (the preflight step itself runs one task per node).
NodeTasks check_node_tasks(const PreflightOptions& o, const EnvMap& env, PreflightReport& report) {
  NodeTasks t;
  t.tpn_name = o.tasks_per_node.empty() ? "SLURM_TASKS_PER_NODE" : "--tasks-per-node";
  t.tpn = o.tasks_per_node.empty() ? env_value(env, "SLURM_TASKS_PER_NODE") : o.tasks_per_node;
  const std::string& tpn_name = t.tpn_name;
  const std::string& tpn = t.tpn;
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
      t.tasks = per_node[node];
      report.passed.push_back("tasks: " + std::to_string(t.tasks) + " on this node (" + tpn_name + "=" + tpn + ")");
    }
  } catch (const Error& e) {
    report.errors.push_back(e.what());
  }
  return t;
}

/// GPUs per node the job asked for: --expect-gpus, else SLURM_GPUS_ON_NODE, else none.
int expected_gpus(const PreflightOptions& o, const EnvMap& env) {
  if (o.expect_gpus >= 0) return o.expect_gpus;
  const std::string on_node = env_value(env, "SLURM_GPUS_ON_NODE");
  return !on_node.empty() && on_node.size() < 6 && on_node.find_first_not_of("0123456789") == std::string::npos
             ? std::stoi(on_node)
             : 0;
}

/// What this node shows of its GPUs, read once for the checks below.
struct NodeGpus {
  int expect = 0;                 ///< GPUs per node the job asked for
  int visible = 0;                ///< CUDA GPUs this task sees
  bool driver_loaded = false;     ///< the NVIDIA driver's /proc folder exists
  bool per_task_binding = false;  ///< SLURM_GPUS_PER_TASK: each task sees only its own GPU
};

/// The job asked for GPUs: they must be visible to CUDA, and each task needs its own.
void check_requested_gpus(const PreflightOptions& o, const EnvMap& env, const NodeGpus& g, const NodeTasks& t,
                          PreflightReport& report) {
  const std::string gpu_hint =
      "this node can't run CUDA: check nvidia-smi in a job there; submit to a GPU partition "
      "(--partition) with --gres=gpu:N, and keep this node out with --exclude=" + report.host + " (tell the admins).";
  try {
    if (g.visible == 0) {
      throw ConfigError("CUDA GPUs on " + report.host + ": expected the " + std::to_string(g.expect) +
                            " GPU(s) per node the job asked for, found none visible (" + describe_visible(env) +
                            (g.driver_loaded ? "" : ", no NVIDIA driver: " + o.proc_gpus_dir + " missing") + ").",
                        gpu_hint);
    }
    if (!g.driver_loaded) {
      throw ConfigError("NVIDIA driver on " + report.host + ": expected " + o.proc_gpus_dir +
                            " to list the GPUs of " + describe_visible(env) + ", found no driver loaded.",
                        gpu_hint);
    }
    if (g.visible < g.expect) {
      throw ConfigError("CUDA GPUs on " + report.host + ": expected the " + std::to_string(g.expect) +
                            " GPU(s) per node the job asked for, found " + std::to_string(g.visible) + " visible (" +
                            describe_visible(env) + ").",
                        gpu_hint);
    }
    if (t.tasks > g.visible && !g.per_task_binding) {
      throw ConfigError("tasks on " + report.host + ": expected one task per GPU (" + std::to_string(g.visible) +
                            " visible), found " + std::to_string(t.tasks) + " tasks (" + t.tpn_name + "=" + t.tpn +
                            ").",
                        "NCCL needs a GPU per rank: submit with --ntasks-per-node equal to the GPUs per node "
                        "(or --gpus-per-task=1).");
    }
    if (t.tasks > 0 && t.tasks < g.visible) {
      report.warnings.push_back(std::to_string(g.visible) + " GPUs visible for " + std::to_string(t.tasks) +
                                " task(s): " + std::to_string(g.visible - t.tasks) +
                                " stay idle; submit with --ntasks-per-node=" + std::to_string(g.visible) + ".");
    }
    report.passed.push_back("GPUs: " + std::to_string(g.visible) + " visible (" + describe_visible(env) + "), " +
                            std::to_string(g.expect) + " asked for");
  } catch (const Error& e) {
    report.errors.push_back(e.what());
  }
}

/// GPUs nobody asked for: train's --backend auto would still pick NCCL and want one per task.
void check_unrequested_gpus(const EnvMap& env, const NodeGpus& g, const NodeTasks& t, PreflightReport& report) {
  report.warnings.push_back(std::to_string(g.visible) + " GPU(s) visible (" + describe_visible(env) +
                            ") though the job asked for none: train's --backend auto uses them with NCCL; "
                            "request them (--gres=gpu:N) or pass train --device cpu.");
  if (t.tasks > g.visible && !g.per_task_binding) {
    report.errors.push_back(
        ConfigError("tasks on " + report.host + ": expected at most one per visible GPU (" + std::to_string(g.visible) +
                        ") since train picks NCCL when it sees GPUs, found " + std::to_string(t.tasks) + ".",
                    "pass train --device cpu (Gloo on the CPU), or request one GPU per task.")
            .what());
  }
}

/// GPUs: requested ones must be visible to CUDA, and each task needs its own.
void check_gpus(const PreflightOptions& o, const EnvMap& env, const NodeTasks& t, PreflightReport& report) {
  NodeGpus g;
  g.expect = expected_gpus(o, env);
  const std::string device = train_flag_value(o.train_args, {"--device"});
  const std::string backend = train_flag_value(o.train_args, {"--backend"});
  const bool cpu_only = device == "cpu" || backend == "gloo";
  g.visible = count_visible_gpus(env, o.proc_gpus_dir);
  DIR* driver = ::opendir(o.proc_gpus_dir.c_str());
  g.driver_loaded = driver != nullptr;
  if (driver != nullptr) ::closedir(driver);
  g.per_task_binding = !env_value(env, "SLURM_GPUS_PER_TASK").empty();
  if (cpu_only) {
    if (g.expect > 0) {
      report.warnings.push_back("the job asked for " + std::to_string(g.expect) + " GPU(s) per node, but train runs "
                                "on the CPU (--device " + device + (backend.empty() ? "" : ", --backend " + backend) +
                                "): they stay idle.");
    }
    report.passed.push_back("device: CPU (train " + std::string(device == "cpu" ? "--device cpu" : "--backend gloo") + ")");
  } else if (g.expect > 0) {
    check_requested_gpus(o, env, g, t, report);
  } else if (g.visible > 0) {
    check_unrequested_gpus(env, g, t, report);
  } else {
    report.passed.push_back("GPUs: none asked for, none visible: train uses Gloo on the CPU");
  }
}

}  // namespace

PreflightReport run_preflight(const PreflightOptions& o, const EnvMap& env) {
  PreflightReport report;
  report.host = log::hostname();
  check_data(o, env, report);
  const NodeTasks tasks = check_node_tasks(o, env, report);
  check_gpus(o, env, tasks, report);
  return report;
}

}  // namespace train
