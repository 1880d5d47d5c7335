// Backend and device choice without CUDA: counts visible GPUs from CUDA_VISIBLE_DEVICES and the
// NVIDIA driver's /proc entries, then maps local ranks onto them.
#include "train/base/device.h"

#include <dirent.h>

#include <set>
#include <string>

#include "train/base/error.h"
#include "train/base/text.h"

namespace train {
namespace {

using text::trim;

constexpr char kVisibleDevices[] = "CUDA_VISIBLE_DEVICES";

/// Entries of the driver's GPU folder, or -1 when it can't be read (no NVIDIA driver loaded).
int count_proc_gpus(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return -1;
  int count = 0;
  while (const dirent* entry = readdir(d)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") ++count;
  }
  closedir(d);
  return count;
}

/// Whether an entry of CUDA_VISIBLE_DEVICES names a device CUDA would accept.
bool valid_entry(const std::string& entry, int physical) {
  if (entry.rfind("GPU-", 0) == 0 || entry.rfind("MIG-", 0) == 0) return entry.size() > 4;
  if (entry.empty() || entry.size() > 9) return false;
  for (const char c : entry) {
    if (c < '0' || c > '9') return false;
  }
  return physical < 0 || std::stoi(entry) < physical;
}

std::string describe_visibility(const EnvMap& env) {
  const auto it = env.find(kVisibleDevices);
  if (it == env.end()) return std::string(kVisibleDevices) + " unset";
  return std::string(kVisibleDevices) + "='" + it->second + "'";
}

}  // namespace

int count_visible_gpus(const EnvMap& env, const std::string& proc_gpus_dir) {
  const int physical = count_proc_gpus(proc_gpus_dir);
  const auto it = env.find(kVisibleDevices);
  if (it == env.end()) return physical < 0 ? 0 : physical;
  // CUDA enumerates the listed devices up to the first invalid or repeated entry.
  std::set<std::string> seen;
  int count = 0;
  std::size_t start = 0;
  const std::string& value = it->second;
  while (start <= value.size()) {
    std::size_t comma = value.find(',', start);
    if (comma == std::string::npos) comma = value.size();
    const std::string entry = trim(value.substr(start, comma - start));
    if (!valid_entry(entry, physical) || !seen.insert(entry).second) break;
    ++count;
    start = comma + 1;
  }
  return count;
}

DeviceChoice choose_device(const DistEnv& dist, int visible_gpus, const std::string& requested_backend,
                           const EnvMap& env) {
  if (requested_backend != "auto" && requested_backend != "gloo" && requested_backend != "nccl") {
    throw ConfigError("backend '" + requested_backend + "': expected one of auto, gloo, nccl.",
                      "use nccl for GPUs, gloo for CPUs, or auto to pick by the GPUs visible.");
  }
  DeviceChoice choice;
  choice.visible_gpus = visible_gpus;
  const std::string visibility = std::to_string(visible_gpus) + " GPU(s) visible on " +
                                 (dist.host.empty() ? std::string("this host") : "host '" + dist.host + "'") +
                                 " (" + describe_visibility(env) + ")";
  if (requested_backend == "gloo") {
    choice.backend = "gloo";
    choice.device = "cpu";
    choice.reason = "backend gloo requested; " + visibility;
    return choice;
  }
  if (visible_gpus <= 0) {
    if (requested_backend == "nccl") {
      throw ConfigError("backend 'nccl': expected at least one visible GPU, found " + visibility + ".",
                        "request GPUs for the job (sbatch --gres=gpu:N or --gpus-per-node=N) and check "
                        "`nvidia-smi` on the node, or use --backend gloo to train on the CPU.");
    }
    choice.backend = "gloo";
    choice.device = "cpu";
    choice.reason = "no GPU visible: " + visibility;
    return choice;
  }
  choice.backend = "nccl";
  if (dist.local_world_size <= visible_gpus) {
    choice.device = "cuda:" + std::to_string(dist.local_rank);
    choice.reason = "local rank " + std::to_string(dist.local_rank) + " of " +
                    std::to_string(dist.local_world_size) + " on " + visibility;
    return choice;
  }
  const auto per_task = env.find("SLURM_GPUS_PER_TASK");
  if (dist.source == EnvSource::slurm && per_task != env.end() && !per_task->second.empty()) {
    // SLURM binds GPUs per task: each task's CUDA_VISIBLE_DEVICES lists only its own GPUs.
    choice.device = "cuda:0";
    choice.reason = "SLURM binds GPUs per task (SLURM_GPUS_PER_TASK=" + per_task->second + "); " + visibility;
    return choice;
  }
  throw ConfigError(
      "local world size " + std::to_string(dist.local_world_size) +
          ": expected at most one task per visible GPU, found " + std::to_string(dist.local_world_size) +
          " tasks on this node and " + visibility + ".",
      "start at most " + std::to_string(visible_gpus) + " task(s) per node (--ntasks-per-node / "
      "trainctl local --nproc), request more GPUs (--gres=gpu:N), bind one GPU to each task with "
      "--gpus-per-task=1, or use --backend gloo.");
}

std::string slurm_gpu_allocation(const EnvMap& env) {
  auto value = [&](const char* name) {
    const auto it = env.find(name);
    return it == env.end() ? std::string() : trim(it->second);
  };
  std::string out;
  auto add = [&](const std::string& name, const std::string& v) { out += (out.empty() ? "" : ", ") + name + "=" + v; };
  const std::string on_node = value("SLURM_GPUS_ON_NODE");
  if (!on_node.empty() && on_node != "0") add("SLURM_GPUS_ON_NODE", on_node);
  for (const char* name : {"SLURM_JOB_GPUS", "SLURM_STEP_GPUS"}) {  // GPU indices: "0" is a GPU
    const std::string v = value(name);
    if (!v.empty()) add(name, v);
  }
  for (const char* name : {"SLURM_GPUS_PER_NODE", "SLURM_GPUS", "SLURM_GPUS_PER_TASK"}) {  // counts
    const std::string v = value(name);
    if (!v.empty() && v != "0") add(name, v);
  }
  // SLURM sets CUDA_VISIBLE_DEVICES for a job with GPUs ("NoDevFiles" or nothing for one without);
  // outside a job it may be a user's own setting, so it counts only inside one.
  const bool in_job = !value("SLURM_JOB_ID").empty() || !value("SLURM_JOBID").empty();
  const std::string visible = value(kVisibleDevices);
  const bool names_devices = !visible.empty() && valid_entry(visible.substr(0, visible.find(',')), -1);
  if (names_devices && (!out.empty() || in_job)) add(kVisibleDevices, visible);
  return out;
}

void check_allocated_gpus_usable(const EnvMap& env, const std::string& device_flag, int cuda_devices,
                                 const std::string& cuda_report) {
  if (device_flag != "auto" || cuda_devices > 0) return;
  const std::string allocation = slurm_gpu_allocation(env);
  if (allocation.empty()) return;
  throw ConfigError(
      "--device auto: expected CUDA devices, since SLURM allocated GPUs to this job (" + allocation +
          "), found that CUDA reports none (" + cuda_report +
          "). Likely causes: a CPU-only torch in the environment (pip's default wheel on some platforms; "
          "check python -c 'import torch; print(torch.version.cuda)'), a CUDA or driver module not loaded "
          "(module load cuda), a container started without GPU access (apptainer exec --nv), or a broken "
          "driver on this node (nvidia-smi).",
      "fix the environment so that CUDA works on the node, or pass --device cpu to train on the CPU on "
      "purpose.");
}

DeviceChoice choose_device(const DistEnv& dist, const EnvMap& env, const std::string& requested_backend) {
  return choose_device(dist, count_visible_gpus(env), requested_backend, env);
}

}  // namespace train
