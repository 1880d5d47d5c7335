// SLURM tests of `trainctl sbatch --stage-data` with shards, against the real local cluster
// (scripts/local-slurm.sh): WebDataset-style shards named by a brace pattern are copied as they are
// to both nodes, one task per node, byte for byte (a program in the job compares them with cmp), with
// a bytes-and-MB/s line per node, and the preflight step finds them there; a node without the space (TRAIN_STAGE_FREE_BYTES, the scripts'
// knob for tests) stops the job before the program runs, naming the node. No LibTorch: the job runs
// a small shell program. `trainctl preflight` on both nodes names a truncated JPEG of an image folder.
// A cluster that doesn't answer is a failure, unless TRAIN_TEST_SLURM=0.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "image_files.h"
#include "slurm_jobs.h"
#include "slurm_util.h"
#include "test_process.h"
#include "test_util.h"

namespace train {
namespace {

using namespace slurmtest;  // NOLINT: the shared helpers of the SLURM job tests
using test::run_in;

void write_text(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  chmod(path.c_str(), mode);
}

/// A submit dir holding shards/train-00000i.tar (1000 + 100 i bytes of a pattern of their own) and
/// check.sh, the job's program: it prints the --data it got, compares every staged copy with its
/// original (cmp) on its node, and says so.
class StageJob {
 public:
  explicit StageJob(const std::string& tag) : dir_(tag, test::job_root()) {
    mkdir(dir_.file("shards").c_str(), 0755);
    mkdir(dir_.file("logs").c_str(), 0755);
    for (int i = 0; i < 4; ++i) {
      std::string bytes(static_cast<std::size_t>(1000 + 100 * i), '\0');
      for (std::size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<char>((k * 13 + static_cast<std::size_t>(i)) % 251);
      write_text(dir_.file("shards/train-00000" + std::to_string(i) + ".tar"), bytes);
    }
    write_text(dir_.file("check.sh"),
               "#!/bin/bash\n"
               "data=\"\"; while (( $# )); do [[ $1 == --data ]] && data=$2; shift; done\n"
               "node=${SLURMD_NODENAME:-?}; staged=${data%/*}\n"
               "echo \"check rank $SLURM_PROCID on $node: --data $data\"\n"
               "for f in \"$SLURM_SUBMIT_DIR\"/shards/*.tar; do cmp \"$f\" \"$staged/${f##*/}\" || exit 3; done\n"
               "echo \"check rank $SLURM_PROCID on $node: $(ls \"$staged\" | wc -l) files in $staged, identical\"\n",
               0755);
  }

  /// Generates the script with `trainctl sbatch` (2 nodes, the shards' pattern, check.sh as the
  /// program, the preflight step on), submits it and waits for the job's end.
  Job run(const Env& env) {
    const auto gen = run_in(dir_.path(),
                            {bin("trainctl"), "sbatch", "--job-name", "stage", "--nodes", "2", "--stage-data",
                             "shards/train-{000000..000003}.tar", "--program", dir_.file("check.sh"), "--time", "5",
                             "--out", "stage.sh"},
                            env);
    EXPECT_EQ(gen->exit_code(), 0) << gen->err();
    return submit_and_wait(dir_.path(), {"stage.sh"}, env);
  }
  std::string log(const Job& job) const { return test::read_text(dir_.file("logs/stage-" + job.id + ".out")); }
  std::string path() const { return dir_.path(); }

 private:
  test::TempDir dir_;
};

constexpr int kShardBytes = 1000 + 1100 + 1200 + 1300;

TEST_F(SlurmTest, ShardsAreCopiedAsTheyAreToEveryNode) {
  StageJob stage("slurm-stage-shards");
  const Job job = stage.run(env_);
  ASSERT_FALSE(job.id.empty());
  const std::string log = stage.log(job);
  EXPECT_EQ(job.sbatch_exit, 0) << job.sbatch_err << "\nlog:\n" << log;
  EXPECT_EQ(job_state(job.id, env_, stage.path()), "COMPLETED") << log;
  // The local cluster sets no SLURM_TMPDIR: the job's own folder under /tmp, removed at the end.
  const std::string staged = "/tmp/train-" + user_name() + "-" + job.id + "/data";
  for (const std::string node : {"node1", "node2"}) {
    const std::string report = "stage " + node + ": copied 4 file(s), " + std::to_string(kShardBytes) + " bytes (0.0 MB) in ";
    ASSERT_TRUE(contains(log, report)) << log;
    const std::string line = log.substr(log.find(report), log.find('\n', log.find(report)) - log.find(report));
    EXPECT_TRUE(contains(line, " MB/s, into " + staged)) << line;
  }
  // The preflight found the staged shards on each node, then each rank (one per node) got the copies'
  // pattern and found every shard identical there.
  for (const std::string node : {"node1", "node2"}) {
    EXPECT_TRUE(contains(log, "preflight " + node + ": ok (data: 4 WebDataset shard files (" + std::to_string(kShardBytes) +
                                  " bytes) present and readable: " + staged + "/train-{000000..000003}.tar;")) << log;
  }
  for (const std::string rank : {"0", "1"}) {
    EXPECT_TRUE(contains(log, "check rank " + rank + " on node")) << log;
  }
  EXPECT_TRUE(contains(log, ": --data " + staged + "/train-{000000..000003}.tar\n")) << log;
  EXPECT_TRUE(contains(log, "on node1: 4 files in " + staged + ", identical")) << log;
  EXPECT_TRUE(contains(log, "on node2: 4 files in " + staged + ", identical")) << log;
  EXPECT_FALSE(exists(staged)) << staged << " was not removed after the job";
}

TEST_F(SlurmTest, ANodeWithoutTheSpaceStopsTheJobNamingIt) {
  StageJob stage("slurm-stage-full");
  Env env = env_;
  env["TRAIN_STAGE_FREE_BYTES"] = "1000";  // for tests only: every node says it has 1000 bytes free
  const Job job = stage.run(env);
  ASSERT_FALSE(job.id.empty());
  const std::string log = stage.log(job);
  EXPECT_NE(job.sbatch_exit, 0) << log;
  EXPECT_EQ(job_state(job.id, env_, stage.path()), "FAILED") << log;
  const std::string staged = "/tmp/train-" + user_name() + "-" + job.id + "/data";
  for (const std::string node : {"node1", "node2"}) {
    EXPECT_TRUE(contains(log, "stage " + node + ": FAILED: --stage-data: expected " + std::to_string(kShardBytes) +
                                  " bytes free in " + staged + " for 4 file(s), found 1000 bytes free.")) << log;
    EXPECT_TRUE(contains(log, "stage " + node + ": Hint: stage fewer files")) << log;
  }
  EXPECT_TRUE(contains(log, "stage: --stage-data: staging into " + staged + " failed on a node")) << log;
  EXPECT_FALSE(contains(log, "check rank")) << "the program ran without its data:\n" << log;
  EXPECT_FALSE(contains(log, ": copied ")) << log;
  EXPECT_FALSE(exists("/tmp/train-" + user_name() + "-" + job.id)) << "the job's staging folder was left behind";
}

// `trainctl preflight` as the generated scripts run it, one task on each node of the cluster, on an
// image folder with one truncated JPEG: each node names the file and says what it found; exit 1.
TEST_F(SlurmTest, PreflightNamesACorruptJpegOnEveryNode) {
  test::TempDir dir("slurm-preflight-images", test::job_root());
  for (const std::string cls : {"cat", "dog"}) {
    mkdir(dir.file("train").c_str(), 0755);
    mkdir(dir.file("train/" + cls).c_str(), 0755);
    for (int i = 0; i < 3; ++i) {
      test::write_file(dir.file("train/" + cls + "/" + std::to_string(i) + ".jpg"),
                       test::encode_jpeg(test::make_image(48, 64, 3, static_cast<uint32_t>(i + 1))));
    }
  }
  std::vector<uint8_t> cut = test::read_bytes(dir.file("train/dog/1.jpg"));
  cut.resize(cut.size() / 2);
  test::write_file(dir.file("train/dog/1.jpg"), cut);
  const auto p = run_in(dir.path(),
                        {"srun", "--nodes", "2", "--ntasks-per-node", "1", "--time", "2", bin("trainctl"), "preflight",
                         "--", "--dataset", "imagefolder", "--data", dir.path()},
                        env_);
  EXPECT_NE(p->exit_code(), 0) << p->out() << p->err();
  for (const std::string node : {"node1", "node2"}) {
    EXPECT_TRUE(contains(p->err(), "preflight " + node + ": FAILED: " + dir.file("train/dog/1.jpg") +
                                       ": expected a complete JPEG image of 64x48, found one that doesn't end as a JPEG ends"))
        << p->out() << p->err();
  }
  EXPECT_FALSE(contains(p->err(), "cat/")) << "only the bad file is named\n" << p->err();
}

}  // namespace
}  // namespace train
