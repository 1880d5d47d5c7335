// Choice of the process-group backend and device for a rank, without LibTorch: NCCL on
// cuda:<local_rank> when GPUs are visible, Gloo on the CPU otherwise.
#pragma once

#include <string>

#include "train/base/env.h"

namespace train {

/// The backend and device one rank should use.
struct DeviceChoice {
  std::string backend;   ///< "nccl" or "gloo"
  std::string device;    ///< "cuda:<index>" or "cpu"
  int visible_gpus = 0;  ///< GPUs this process can see
  std::string reason;    ///< one line saying why, for logs and `trainctl env`
};

/// Where the NVIDIA driver lists the GPUs of this machine, one entry per GPU.
constexpr char kNvidiaProcGpus[] = "/proc/driver/nvidia/gpus";

/// Counts the GPUs this process can see, without initialising CUDA. When CUDA_VISIBLE_DEVICES is
/// set, its entries count up to the first invalid one, as CUDA does: an empty value, "NoDevFiles"
/// (what SLURM sets when a job has no GPUs) or "-1" give 0, and an index the machine doesn't have
/// ends the list. When it is unset, every entry of `proc_gpus_dir` is one GPU; a missing folder
/// (no NVIDIA driver) gives 0.
/// @param env the environment to read CUDA_VISIBLE_DEVICES from.
/// @param proc_gpus_dir the driver's GPU folder; tests pass a fake one.
int count_visible_gpus(const EnvMap& env, const std::string& proc_gpus_dir = kNvidiaProcGpus);

/// Picks the backend and device for the rank described by `dist`.
///   - "gloo": Gloo on the CPU.
///   - "nccl": NCCL on cuda:<local_rank>; throws when no GPU is visible.
///   - "auto": NCCL when a GPU is visible, else Gloo on the CPU.
/// With NCCL, every task on the node needs its own GPU: more local tasks than visible GPUs is an
/// error, unless SLURM binds GPUs per task (SLURM_GPUS_PER_TASK set): then each task sees only its
/// own GPUs and uses cuda:0.
/// @param visible_gpus GPUs this process sees (the trainer passes torch's CUDA device count).
/// @param requested_backend "auto", "gloo" or "nccl".
/// @param env the environment, for SLURM_GPUS_PER_TASK and CUDA_VISIBLE_DEVICES in messages.
/// @throws train::ConfigError for an unknown backend, NCCL without a GPU, or too few GPUs.
DeviceChoice choose_device(const DistEnv& dist, int visible_gpus, const std::string& requested_backend,
                           const EnvMap& env);

/// choose_device() with the GPUs counted by count_visible_gpus(env), for programs without CUDA
/// (trainctl).
/// @throws train::ConfigError as the other overload.
DeviceChoice choose_device(const DistEnv& dist, const EnvMap& env, const std::string& requested_backend);

/// What SLURM allocated in GPUs to this job or step, as "NAME=value" pairs joined by ", "
/// (SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS, SLURM_STEP_GPUS, SLURM_GPUS_PER_NODE, SLURM_GPUS,
/// SLURM_GPUS_PER_TASK, and CUDA_VISIBLE_DEVICES when it names devices); "" when the
/// environment shows no GPU allocation (outside SLURM, only an explicit SLURM_* GPU variable counts).
std::string slurm_gpu_allocation(const EnvMap& env);

/// Stops a run that was given GPUs but can't use them, instead of letting it train on the CPU:
/// with `device_flag` "auto", a GPU allocation (slurm_gpu_allocation) and no CUDA device, throws a
/// ConfigError naming what SLURM allocated, what CUDA reports and the likely causes. Does nothing
/// for --device cpu/cuda (cuda has its own check) or when CUDA sees devices.
/// @param cuda_devices the CUDA device count LibTorch reports (0 for a CPU-only build).
/// @param cuda_report one line on what CUDA said, e.g. "torch.cuda: 0 devices (CUDA build 13.0)".
void check_allocated_gpus_usable(const EnvMap& env, const std::string& device_flag, int cuda_devices,
                                 const std::string& cuda_report);

}  // namespace train
