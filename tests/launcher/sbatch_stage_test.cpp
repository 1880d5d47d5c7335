// Tests for launcher/src/sbatch_stage.cpp and the staging steps sbatch_script.cpp writes: which
// --stage-data is extracted and which copied as it is, the files, bytes and train's --data a plan
// holds, the errors at generation time, the script's text (free space, copy, report, --data), and the
// script run under a fake srun (bytes identical, the report line, a node without the space). The
// same scripts run on the real local cluster in tests/slurm/stage_test.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "sbatch_test.h"
#include "test_process.h"
#include "test_util.h"
#include "train/base/error.h"
#include "train/base/files.h"
#include "train/launcher/sbatch.h"

namespace train {
namespace {

using Names = std::vector<std::string>;

/// A folder of small shards, shard i holding 1000 + 100 i bytes of a pattern of its own, so that a
/// copy of the wrong shard or a short copy shows.
class Shards {
 public:
  explicit Shards(int count, const std::string& prefix = "train-") : dir_("stage-shards") {
    for (int i = 0; i < count; ++i) {
      char name[64];
      std::snprintf(name, sizeof(name), "%s%06d.tar", prefix.c_str(), i);
      std::string bytes(static_cast<std::size_t>(1000 + 100 * i), '\0');
      for (std::size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<char>((k * 7 + static_cast<std::size_t>(i)) % 251);
      write_text(dir_.file(name), bytes);
      bytes_ += static_cast<std::int64_t>(bytes.size());
    }
  }
  std::string path() const { return dir_.path(); }
  std::string file(const std::string& name) const { return dir_.file(name); }
  std::int64_t bytes() const { return bytes_; }

 private:
  test::TempDir dir_;
  std::int64_t bytes_ = 0;
};

SbatchOptions staging(const std::string& source, const std::string& mode = "") {
  SbatchOptions o;
  o.stage_data = source;
  o.stage_mode = mode;
  return o;
}

// ---- the plan -----------------------------------------------------------------------------------

TEST(SbatchStagePlan, AnArchiveIsExtractedAsBeforeEvenWhenItIsNotHere) {
  for (const std::string& archive : {"data/fm.tar.gz", "/scratch/only-on-nodes.tar"}) {
    const StagePlan p = plan_staging(staging(archive));
    EXPECT_EQ(p.mode, StageMode::extract) << archive;
    EXPECT_EQ(p.archive, archive);
    EXPECT_TRUE(p.files.empty());
  }
  // A shard that exists is an archive too, unless --stage-mode copy says to copy it as it is.
  Shards shards(1);
  const std::string one = shards.file("train-000000.tar");
  EXPECT_EQ(plan_staging(staging(one)).mode, StageMode::extract);
  const StagePlan copied = plan_staging(staging(one, "copy"));
  EXPECT_EQ(copied.mode, StageMode::copy);
  EXPECT_EQ(copied.files, Names({one}));
  EXPECT_EQ(copied.data_names, Names({"train-000000.tar"}));
  EXPECT_EQ(copied.bytes, 1000);
}

TEST(SbatchStagePlan, APatternIsCopiedFileByFileInItsOrder) {
  Shards shards(4);
  const StagePlan p = plan_staging(staging(shards.path() + "/train-{000000..000003}.tar"));
  EXPECT_EQ(p.mode, StageMode::copy);
  EXPECT_FALSE(p.from_folder);
  EXPECT_EQ(p.files, Names({shards.file("train-000000.tar"), shards.file("train-000001.tar"),
                            shards.file("train-000002.tar"), shards.file("train-000003.tar")}));
  EXPECT_EQ(p.bytes, shards.bytes());
  EXPECT_EQ(p.data_names, Names({"train-{000000..000003}.tar"}));
  // A list in braces keeps its order; "::" joins patterns of different folders.
  Shards val(2, "val-");
  const StagePlan list = plan_staging(staging(shards.path() + "/train-{000003,000001}.tar::" + val.path() +
                                              "/val-{000000..000001}.tar"));
  EXPECT_EQ(list.files, Names({shards.file("train-000003.tar"), shards.file("train-000001.tar"),
                               val.file("val-000000.tar"), val.file("val-000001.tar")}));
  EXPECT_EQ(list.data_names, Names({"train-{000003,000001}.tar", "val-{000000..000001}.tar"}));
  EXPECT_EQ(list.bytes, 1300 + 1100 + 1000 + 1100);
}

TEST(SbatchStagePlan, AFolderIsCopiedAsItsTarFilesSortedByName) {
  Shards shards(3);
  write_text(shards.file("README"), "not a shard");
  write_text(shards.file("train.idx"), "an index");
  mkdir(shards.file("sub.tar").c_str(), 0755);  // a folder named like a shard is no shard
  const StagePlan p = plan_staging(staging(shards.path()));
  EXPECT_EQ(p.mode, StageMode::copy);
  EXPECT_TRUE(p.from_folder);
  EXPECT_EQ(p.files, Names({shards.file("train-000000.tar"), shards.file("train-000001.tar"),
                            shards.file("train-000002.tar")}));
  EXPECT_EQ(p.bytes, shards.bytes());
  EXPECT_TRUE(p.data_names.empty());
}

TEST(SbatchStagePlan, ErrorsNameTheSourceTheFileAndAHint) {
  Shards shards(4);
  Shards other(1);
  const std::string dir = shards.path();
  mkdir(shards.file("train-000009.tar").c_str(), 0755);
  test::TempDir empty("stage-empty");
  write_text(empty.file("notes.txt"), "x");
  struct Case {
    SbatchOptions o;
    Names says;
  };
  const std::vector<Case> cases = {
      {staging(dir + "/train-{000000..000007}.tar"),
       {"expected the 8 files it names, found no file " + dir + "/train-000004.tar", "the first one missing; 4 of 8 exist"}},
      {staging(dir + "/train-{000008..000009}.tar"), {"no file " + dir + "/train-000008.tar"}},
      {staging(dir + "/train-{000000,000009}.tar"), {"expected regular files", dir + "/train-000009.tar, a folder"}},
      {staging(empty.path()), {"expected WebDataset shards (*.tar files) in the folder, found none (1 other entries)"}},
      {staging(dir + "/train-{000000..000001.tar"), {"--stage-data shard pattern", "expected balanced braces"}},
      {staging(dir + "/{a,b}/train-{0..1}.tar"), {"expected braces in the file names only", "'" + dir + "/{a,b}'"}},
      {staging(dir + "/train-000000.tar::" + other.path() + "/train-000000.tar", "copy"),
       {"expected distinct file names", "found train-000000.tar twice"}},
      {staging(dir + "/train-{000000,000000}.tar"), {"found train-000000.tar twice"}},
      {staging(dir + "/train-{000000..000001}.tar", "extract"), {"--stage-mode extract", "found a pattern of 2 names"}},
      {staging(dir, "extract"), {"--stage-mode extract", "found a folder"}},
      {staging(dir, "unpack"), {"--stage-mode 'unpack'", "auto, copy or extract"}},
      {staging("", "copy"), {"--stage-mode 'copy'", "with --stage-data"}},
      {staging(dir + "/missing.tar", "copy"), {"expected the 1 file it names, found no file " + dir + "/missing.tar"}},
      {staging("data.zip"), {"--stage-data 'data.zip'", "tar archive", "--stage-mode copy"}},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    expect_error([&] { plan_staging(cases[i].o); }, cases[i].says, "case " + std::to_string(i) + " " + cases[i].o.stage_data);
  }
  SbatchOptions subdir = staging(dir + "/train-{000000..000001}.tar");
  subdir.stage_subdir = "fm";
  expect_error([&] { plan_staging(subdir); }, {"--stage-subdir 'fm' with --stage-data", "found shards", "drop --stage-subdir"},
               "--stage-subdir with shards");
  SbatchOptions both = staging(dir);
  both.train_args = {"--data", "/x"};
  expect_error([&] { plan_sbatch(both); }, {"with train's --data /x", "found both"}, "--data given as well");
}

TEST(SbatchStagePlan, AnUnreadableShardIsNamed) {
  // Root reads any file, so as root the check runs as nobody (setpriv), in a folder nobody can enter.
  Shards shards(2);
  chmod(shards.path().c_str(), 0755);
  chmod(shards.file("train-000001.tar").c_str(), 0);
  std::vector<std::string> argv = {trainctl(), "sbatch", "--no-cluster-checks", "--stage-data",
                                   shards.path() + "/train-{000000..000001}.tar"};
  if (geteuid() == 0) {
    const std::string setpriv = test::find_on_path("setpriv");
    if (setpriv.empty()) GTEST_SKIP() << "running as root without setpriv (util-linux): root reads unreadable files";
    argv.insert(argv.begin(), {setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"});
  }
  const auto p = test::run_process(argv, test::hermetic_env(), 60);
  EXPECT_EQ(p->exit_code(), 1) << p->err();
  EXPECT_TRUE(contains(p->err(), "expected files this user can read, found " + shards.file("train-000001.tar") +
                                     " unreadable (Permission denied)")) << p->err();
  EXPECT_TRUE(contains(p->err(), "Hint: fix its permissions")) << p->err();
}

// ---- the script's text --------------------------------------------------------------------------

TEST(SbatchStageScript, CopiesShardsAfterCheckingTheSpaceAndReportsPerNode) {
  Shards shards(4);
  SbatchOptions o = staging(shards.path() + "/train-{000000..000003}.tar");
  o.nodes = "2";
  o.train_args = {"--dataset", "webdataset"};
  const std::string s = generate_sbatch_script(o);
  // The files, in order, with their size at generation time; train reads the copies by their pattern.
  EXPECT_TRUE(contains(s, "STAGE_FILES=(\n  " + shards.file("train-000000.tar") + "\n  " + shards.file("train-000001.tar") +
                              "\n  " + shards.file("train-000002.tar") + "\n  " + shards.file("train-000003.tar") + "\n)\n"))
      << s;
  EXPECT_TRUE(contains(s, "STAGE_GENERATED_BYTES=" + std::to_string(shards.bytes()) + "\n")) << s;
  EXPECT_TRUE(contains(s, "4 file(s), 4600 bytes (0.0 MB) when the script was")) << s;
  EXPECT_TRUE(contains(s, "STAGE_DIR=\"$STAGE_ROOT/data\"\n")) << s;
  EXPECT_TRUE(contains(s, "STAGE_DATA=\"$STAGE_DIR/\"'train-{000000..000003}.tar'\n")) << s;
  // The size again in the batch shell, then per node: free space, the copy, the check, the report.
  EXPECT_TRUE(contains(s, "<(printf '%s\\0' \"${STAGE_FILES[@]}\" | xargs -0 stat -L -c %s --)")) << s;
  EXPECT_TRUE(contains(s, "read -r blocks block_size < <(stat -f -c \"%a %S\" \"$dest\")")) << s;
  EXPECT_TRUE(contains(s, "free=\"${TRAIN_STAGE_FREE_BYTES:-$((blocks * block_size))}\"")) << s;
  EXPECT_TRUE(contains(s, "stage $node: FAILED: --stage-data: expected $need bytes free in $dest")) << s;
  EXPECT_TRUE(contains(s, "mapfile -d \"\" files\n")) << s;
  EXPECT_TRUE(contains(s, "printf \"%s\\0\" \"${files[@]}\" | xargs -0 cp -t \"$incoming\" --\n")) << s;
  EXPECT_TRUE(contains(s, "-exec mv -f -t \"$dest\" -- {} +")) << s;
  EXPECT_TRUE(contains(s, "printf \"stage %s: copied %d file(s), %d bytes (%d.%d MB) in %d.%02d s, %d.%d MB/s, into %s\\n\""))
      << s;
  // The names go to every node's task on stdin (no argv limit on the list's length).
  EXPECT_TRUE(contains(s, "printf '%s\\0' \"${STAGE_FILES[@]}\" | srun --ntasks=\"$SLURM_JOB_NUM_NODES\" --ntasks-per-node=1 "
                          "\\\n    bash -c \"$STAGE_COPY\" stage \"$STAGE_DIR\" \"$STAGE_BYTES\" \"${#STAGE_FILES[@]}\" || {")) << s;
  EXPECT_FALSE(contains(s, "tar -xf")) << s;
  // train's --data: after the fixed arguments, before the submitter's own; staging between the
  // summary and the preflight.
  const std::size_t fixed = s.find("TRAIN_ARGS+=(--dataset webdataset)");
  const std::size_t staged = s.find("TRAIN_ARGS+=(--data \"$STAGE_DATA\")");
  ASSERT_NE(fixed, std::string::npos) << s;
  ASSERT_NE(staged, std::string::npos) << s;
  EXPECT_LT(fixed, staged);
  EXPECT_LT(staged, s.find("TRAIN_ARGS+=(\"$@\")"));
  EXPECT_LT(s.find("echo \"train: job"), s.find("bash -c \"$STAGE_COPY\""));
  EXPECT_LT(s.find("bash -c \"$STAGE_COPY\""), s.find("preflight --tasks-per-node"));
}

TEST(SbatchStageScript, TrainReadsAFolderOrEveryPatternOfAList) {
  Shards shards(2);
  Shards val(1, "val-");
  const std::string folder = generate_sbatch_script(staging(shards.path()));
  EXPECT_TRUE(contains(folder, "STAGE_DATA=\"$STAGE_DIR\"\n")) << folder;
  EXPECT_TRUE(contains(folder, "# train reads the staged folder of shards.")) << folder;
  const std::string list = generate_sbatch_script(
      staging(shards.path() + "/train-{000000..000001}.tar::" + val.path() + "/val-000000.tar"));
  EXPECT_TRUE(contains(list, "STAGE_DATA=\"$STAGE_DIR/\"'train-{000000..000001}.tar'\"::$STAGE_DIR/\"val-000000.tar\n"))
      << list;
}

TEST(SbatchStageScript, ShellcheckFindsNothing) {
  const std::string shellcheck = test::find_on_path("shellcheck");
  if (shellcheck.empty()) GTEST_SKIP() << "shellcheck is not installed (apt-get install shellcheck)";
  Shards shards(2);
  SbatchOptions o = staging(shards.path() + "/train-{000000..000001}.tar");
  o.array_chain = "2";
  o.container = "t.sif";
  write_text(shards.file("job.sh"), generate_sbatch_script(o));
  const auto p = test::run_process({shellcheck, shards.file("job.sh")}, test::hermetic_env(), 60);
  EXPECT_EQ(p->exit_code(), 0) << p->out() << p->err();
}

// ---- the script under a fake srun ---------------------------------------------------------------

/// A submit dir with a fake srun (drops its options, runs the command once: one node) and a program
/// that prints its --data and compares the staged copies with the originals, byte for byte (cmp).
class FakeNode {
 public:
  explicit FakeNode(const std::string& originals) : dir_("stage-fake") {
    mkdir(dir_.file("bin").c_str(), 0755);
    write_text(dir_.file("bin/srun"), "#!/bin/bash\nwhile [[ \"${1:-}\" == -* ]]; do shift; done\nexec \"$@\"\n", 0755);
    write_text(dir_.file("bin/check"),
               "#!/bin/bash\n"
               "data=\"\"; while (( $# )); do [[ $1 == --data ]] && data=$2; shift; done\n"
               "echo \"check: --data $data\"\n"
               "staged=$data; [[ -d $staged ]] || staged=${data%/*}\n"
               "for f in " + originals + "/*.tar; do cmp \"$f\" \"$staged/${f##*/}\" || exit 3; done\n"
               "echo \"check: $(ls \"$staged\" | wc -l) files in $staged, identical\"\n",
               0755);
  }

  /// Runs the script as the batch step of job 42 with SLURM_TMPDIR in this folder (kept after the run).
  std::unique_ptr<test::TestProcess> run(const std::string& script, const test::Env& extra = {}) const {
    test::Env env = test::hermetic_env();
    env["PATH"] = dir_.file("bin") + ":" + env["PATH"];
    env["SLURM_JOB_ID"] = "42";
    env["SLURM_SUBMIT_DIR"] = dir_.path();
    env["SLURM_JOB_NUM_NODES"] = "1";
    env["SLURMD_NODENAME"] = "node7";
    env["SLURM_TMPDIR"] = dir_.file("tmp");
    env["TRAINCTL_BIN"] = dir_.file("none");
    for (const auto& [k, v] : extra) env[k] = v;
    write_text(dir_.file("job.sh"), script, 0755);
    return test::run_process({"/bin/bash", dir_.file("job.sh")}, env, 60);
  }
  std::string path() const { return dir_.path(); }
  std::string program() const { return dir_.file("bin/check"); }
  std::string file(const std::string& name) const { return dir_.file(name); }

 private:
  test::TempDir dir_;
};

TEST(SbatchStageRun, CopiesTheShardsByteForByteAndSaysHowFast) {
  Shards shards(4);
  FakeNode node(shards.path());
  SbatchOptions o = staging(shards.path() + "/train-{000000..000003}.tar");
  o.program = node.program();
  o.preflight = false;
  const auto p = node.run(generate_sbatch_script(o));
  EXPECT_EQ(p->exit_code(), 0) << p->out() << p->err();
  const std::string staged = node.file("tmp/data");
  EXPECT_TRUE(contains(p->out(), "check: --data " + staged + "/train-{000000..000003}.tar\n")) << p->out();
  EXPECT_TRUE(contains(p->out(), "check: 4 files in " + staged + ", identical")) << p->out() << p->err();
  const std::string report = "stage node7: copied 4 file(s), 4600 bytes (0.0 MB) in ";
  ASSERT_TRUE(contains(p->out(), report)) << p->out();
  const std::string line = p->out().substr(p->out().find(report));
  EXPECT_TRUE(contains(line.substr(0, line.find('\n')), " MB/s, into " + staged)) << line;
  EXPECT_EQ(test::read_text(staged + "/train-000003.tar"), test::read_text(shards.file("train-000003.tar")));
}

TEST(SbatchStageRun, ANodeWithoutTheSpaceStopsTheJobBeforeTraining) {
  Shards shards(3);
  FakeNode node(shards.path());
  SbatchOptions o = staging(shards.path());
  o.program = node.program();
  o.preflight = false;
  const auto p = node.run(generate_sbatch_script(o), {{"TRAIN_STAGE_FREE_BYTES", "1000"}});
  EXPECT_EQ(p->exit_code(), 1) << p->out() << p->err();
  EXPECT_TRUE(contains(p->err(), "stage node7: FAILED: --stage-data: expected 3300 bytes free in " + node.file("tmp/data") +
                                     " for 3 file(s), found 1000 bytes free.")) << p->err();
  EXPECT_TRUE(contains(p->err(), "stage node7: Hint: stage fewer files")) << p->err();
  EXPECT_TRUE(contains(p->err(), "train: --stage-data: staging into " + node.file("tmp/data") + " failed on a node")) << p->err();
  EXPECT_FALSE(contains(p->out(), "check:")) << "the program ran: " << p->out();
  EXPECT_TRUE(test::read_text(node.file("tmp/data/train-000000.tar")).empty()) << "copied without the space";
}

TEST(SbatchStageRun, ShardsThatChangedSinceGenerationAreNamedOrRemeasured) {
  Shards shards(2);
  FakeNode node(shards.path());
  SbatchOptions o = staging(shards.path() + "/train-{000000..000001}.tar");
  o.program = node.program();
  o.preflight = false;
  const std::string script = generate_sbatch_script(o);
  write_text(shards.file("train-000001.tar"), std::string(5000, 'x'));  // grew: the script measures it again
  const auto grown = node.run(script);
  EXPECT_EQ(grown->exit_code(), 0) << grown->out() << grown->err();
  EXPECT_TRUE(contains(grown->err(), "note: the 2 file(s) to stage hold 6000 bytes now, 2100 when the script was generated"))
      << grown->err();
  EXPECT_TRUE(contains(grown->out(), "copied 2 file(s), 6000 bytes")) << grown->out();
  ASSERT_EQ(unlink(shards.file("train-000001.tar").c_str()), 0);
  const auto gone = node.run(script);
  EXPECT_EQ(gone->exit_code(), 1) << gone->out() << gone->err();
  EXPECT_TRUE(contains(gone->err(), "--stage-data: expected a readable file at '" + shards.file("train-000001.tar") +
                                        "' (relative to " + node.path() + "), found none."))
      << gone->err();
  EXPECT_TRUE(contains(gone->err(), "Hint: the files moved since the script was generated")) << gone->err();
}

TEST(SbatchStageRun, AListLongerThanAnArgumentListIsStaged) {
  // Names longer in all than ARG_MAX (2 MiB here): they reach the node's task on stdin, not argv.
  const long arg_max = sysconf(_SC_ARG_MAX);
  if (arg_max <= 0 || arg_max > (8L << 20)) GTEST_SKIP() << "ARG_MAX is " << arg_max << ": too large to exceed here";
  test::TempDir shards("stage-many");
  const std::string folder = shards.file(std::string(240, 'd'));  // long names: fewer files to exceed it
  mkdir(folder.c_str(), 0755);
  const long path_size = static_cast<long>(folder.size() + std::string("/train-000000.tar").size()) + 1;
  const int count = static_cast<int>(arg_max / path_size) + 500;
  char name[32];
  for (int i = 0; i < count; ++i) {
    std::snprintf(name, sizeof(name), "/train-%06d.tar", i);
    write_text(folder + name, std::to_string(i));
  }
  FakeNode node(folder);
  SbatchOptions o = staging(folder + "/train-{000000.." + std::string(name + 7, 6) + "}.tar");
  o.program = "/bin/true";
  o.preflight = false;
  const StagePlan plan = plan_staging(o);
  ASSERT_EQ(plan.files.size(), static_cast<std::size_t>(count));
  const auto p = node.run(generate_sbatch_script(o));
  EXPECT_EQ(p->exit_code(), 0) << p->err().substr(0, 2000);
  EXPECT_TRUE(contains(p->out(), "stage node7: copied " + std::to_string(count) + " file(s), " +
                                     std::to_string(plan.bytes) + " bytes")) << p->out().substr(0, 2000);
  EXPECT_EQ(files::list_dir(node.file("tmp/data")).size(), static_cast<std::size_t>(count));
  EXPECT_EQ(test::read_text(node.file("tmp/data") + name), std::to_string(count - 1));
}

TEST(SbatchStageCli, TrainctlSbatchTakesStageMode) {
  Shards shards(2);
  const auto copy = run_trainctl({"sbatch", "--no-cluster-checks", "--stage-mode", "copy", "--stage-data",
                                  shards.file("train-000000.tar")});
  EXPECT_EQ(copy->exit_code(), 0) << copy->err();
  EXPECT_TRUE(contains(copy->out(), "STAGE_DATA=\"$STAGE_DIR/\"train-000000.tar\n")) << copy->out();
  const auto missing = run_trainctl({"sbatch", "--no-cluster-checks", "--stage-data", shards.path() + "/train-{000000..000002}.tar"});
  EXPECT_EQ(missing->exit_code(), 1) << missing->err();
  EXPECT_TRUE(contains(missing->err(), "found no file " + shards.file("train-000002.tar") + " (the first one missing; 2 of 3 exist"))
      << missing->err();
}

}  // namespace
}  // namespace train
