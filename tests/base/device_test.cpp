// Tests for libtrain/base/src/device.cpp: GPU counting from CUDA_VISIBLE_DEVICES and a fake
// /proc/driver/nvidia/gpus, and the backend/device choice with its errors.
#include "train/base/device.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "train/base/error.h"

namespace train {
namespace {

/// A fake driver folder with `gpus` entries, like /proc/driver/nvidia/gpus/0000:3b:00.0.
std::string fake_proc_gpus(int gpus) {
  const std::string dir = testing::TempDir() + "/device_test_gpus_" + std::to_string(gpus);
  mkdir(dir.c_str(), 0755);
  for (int i = 0; i < gpus; ++i) {
    mkdir((dir + "/0000:" + std::to_string(10 + i) + ":00.0").c_str(), 0755);
  }
  return dir;
}

TEST(CountVisibleGpus, FromProcWhenCudaVisibleDevicesUnset) {
  EXPECT_EQ(count_visible_gpus({}, fake_proc_gpus(4)), 4);
  EXPECT_EQ(count_visible_gpus({}, fake_proc_gpus(0)), 0);
  EXPECT_EQ(count_visible_gpus({}, testing::TempDir() + "/no_such_driver_folder"), 0);
}

TEST(CountVisibleGpus, CudaVisibleDevicesLikeCuda) {
  const std::string four = fake_proc_gpus(4);
  auto count = [&](const std::string& value, const std::string& dir) {
    return count_visible_gpus({{"CUDA_VISIBLE_DEVICES", value}}, dir);
  };
  EXPECT_EQ(count("", four), 0);
  EXPECT_EQ(count("NoDevFiles", four), 0);
  EXPECT_EQ(count("-1", four), 0);
  EXPECT_EQ(count("0", four), 1);
  EXPECT_EQ(count("0,1", four), 2);
  EXPECT_EQ(count("3, 2", four), 2);
  EXPECT_EQ(count("0,1,7,2", four), 2);  // 7 doesn't exist: CUDA stops there
  EXPECT_EQ(count("0,-1,1", four), 1);
  EXPECT_EQ(count("0,0", four), 1);
  EXPECT_EQ(count("GPU-8a1b2c3d,GPU-4e5f6a7b", four), 2);
  EXPECT_EQ(count("MIG-1234", four), 1);
  // Without a driver folder the listed indices can't be checked, so they are trusted.
  EXPECT_EQ(count("0,1,7", testing::TempDir() + "/no_such_driver_folder"), 3);
}

DistEnv layout(int local_rank, int local_world_size, EnvSource source = EnvSource::torchrun) {
  DistEnv e;
  e.source = source;
  e.local_rank = local_rank;
  e.local_world_size = local_world_size;
  e.rank = local_rank;
  e.world_size = local_world_size;
  e.host = "gpuhost";
  return e;
}

TEST(ChooseDevice, GlooOnCpuWhenNoGpu) {
  const DeviceChoice c = choose_device(layout(1, 2), 0, "auto", {});
  EXPECT_EQ(c.backend, "gloo");
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.visible_gpus, 0);
  EXPECT_NE(c.reason.find("no GPU visible"), std::string::npos) << c.reason;
}

TEST(ChooseDevice, NcclOnTheLocalRanksGpu) {
  const DeviceChoice c = choose_device(layout(1, 2), 2, "auto", {{"CUDA_VISIBLE_DEVICES", "0,1"}});
  EXPECT_EQ(c.backend, "nccl");
  EXPECT_EQ(c.device, "cuda:1");
  EXPECT_EQ(choose_device(layout(3, 4), 8, "nccl", {}).device, "cuda:3");
}

TEST(ChooseDevice, GlooRequestedStaysOnCpu) {
  const DeviceChoice c = choose_device(layout(0, 2), 2, "gloo", {});
  EXPECT_EQ(c.backend, "gloo");
  EXPECT_EQ(c.device, "cpu");
}

TEST(ChooseDevice, NcclWithoutGpuIsAnError) {
  try {
    choose_device(layout(0, 1), 0, "nccl", {{"CUDA_VISIBLE_DEVICES", "NoDevFiles"}});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("backend 'nccl': expected at least one visible GPU"), std::string::npos) << what;
    EXPECT_NE(what.find("CUDA_VISIBLE_DEVICES='NoDevFiles'"), std::string::npos) << what;
    EXPECT_NE(what.find("host 'gpuhost'"), std::string::npos) << what;
    EXPECT_NE(what.find("Hint: "), std::string::npos) << what;
  }
}

TEST(ChooseDevice, MoreLocalRanksThanGpusIsAnError) {
  try {
    choose_device(layout(0, 4), 2, "auto", {{"CUDA_VISIBLE_DEVICES", "0,1"}});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("local world size 4"), std::string::npos) << what;
    EXPECT_NE(what.find("4 tasks on this node and 2 GPU(s) visible"), std::string::npos) << what;
    EXPECT_NE(what.find("Hint: start at most 2 task(s) per node"), std::string::npos) << what;
  }
}

TEST(ChooseDevice, SlurmPerTaskBindingUsesTheTasksOwnGpu) {
  const EnvMap env = {{"SLURM_GPUS_PER_TASK", "1"}, {"CUDA_VISIBLE_DEVICES", "2"}};
  const DeviceChoice c = choose_device(layout(2, 4, EnvSource::slurm), 1, "auto", env);
  EXPECT_EQ(c.backend, "nccl");
  EXPECT_EQ(c.device, "cuda:0");
  EXPECT_NE(c.reason.find("SLURM_GPUS_PER_TASK=1"), std::string::npos) << c.reason;
}

TEST(ChooseDevice, UnknownBackend) {
  EXPECT_THROW(choose_device(layout(0, 1), 0, "mpi", {}), ConfigError);
  EXPECT_THROW(choose_device(layout(0, 1), 0, "", {}), ConfigError);
}

TEST(ChooseDevice, CountsFromTheEnvironment) {
  // Whatever this machine has, an empty CUDA_VISIBLE_DEVICES hides every GPU.
  const DeviceChoice c = choose_device(layout(0, 1), EnvMap{{"CUDA_VISIBLE_DEVICES", ""}}, "auto");
  EXPECT_EQ(c.backend, "gloo");
  EXPECT_EQ(c.visible_gpus, 0);
}

TEST(SlurmGpuAllocation, NamesWhatSlurmAllocated) {
  EXPECT_EQ(slurm_gpu_allocation({}), "");
  EXPECT_EQ(slurm_gpu_allocation({{"SLURM_JOB_ID", "7"}, {"CUDA_VISIBLE_DEVICES", "NoDevFiles"}}), "");
  EXPECT_EQ(slurm_gpu_allocation({{"SLURM_JOB_ID", "7"}, {"SLURM_GPUS_ON_NODE", "0"}}), "");
  // Outside a job, CUDA_VISIBLE_DEVICES is the user's own choice, not an allocation.
  EXPECT_EQ(slurm_gpu_allocation({{"CUDA_VISIBLE_DEVICES", "0"}}), "");
  EXPECT_EQ(slurm_gpu_allocation({{"SLURM_JOB_ID", "7"}, {"CUDA_VISIBLE_DEVICES", "0,1"}}),
            "CUDA_VISIBLE_DEVICES=0,1");
  EXPECT_EQ(slurm_gpu_allocation({{"SLURM_JOB_ID", "7"}, {"SLURM_GPUS_ON_NODE", "2"}, {"SLURM_JOB_GPUS", "2,3"},
                                  {"CUDA_VISIBLE_DEVICES", "0,1"}}),
            "SLURM_GPUS_ON_NODE=2, SLURM_JOB_GPUS=2,3, CUDA_VISIBLE_DEVICES=0,1");
}

TEST(CheckAllocatedGpusUsable, AGpuJobWithoutCudaStopsInsteadOfTrainingOnTheCpu) {
  const EnvMap gpu_job = {{"SLURM_JOB_ID", "7"}, {"SLURM_GPUS_ON_NODE", "2"}, {"CUDA_VISIBLE_DEVICES", "0,1"}};
  try {
    check_allocated_gpus_usable(gpu_job, "auto", 0, "torch reports 0 CUDA devices");
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    for (const char* part : {"--device auto", "SLURM_GPUS_ON_NODE=2", "CUDA_VISIBLE_DEVICES=0,1",
                             "torch reports 0 CUDA devices", "CPU-only torch", "--device cpu", "Hint: "}) {
      EXPECT_NE(what.find(part), std::string::npos) << "missing '" << part << "' in: " << what;
    }
  }
  // --device cpu is the explicit way to train on the CPU; CUDA that works is fine; no GPUs, no check.
  EXPECT_NO_THROW(check_allocated_gpus_usable(gpu_job, "cpu", 0, ""));
  EXPECT_NO_THROW(check_allocated_gpus_usable(gpu_job, "auto", 2, ""));
  EXPECT_NO_THROW(check_allocated_gpus_usable({{"SLURM_JOB_ID", "7"}}, "auto", 0, ""));
}

}  // namespace
}  // namespace train
