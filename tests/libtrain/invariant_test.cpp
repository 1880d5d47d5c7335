// The numbers a refactor must not change: params_sha256 of a fixed set of CPU runs (world 1 and 2,
// with and without dropout, two epochs with checkpoints, resumed after SIGUSR2, CIFAR-10 on
// written files at world 1 and 2), compared with the values recorded in invariant_sha256.txt.
//
// float32 results depend on the kernels a CPU gets, so the runs use the kernels meant to be the
// same on every x86-64 CPU (libtrain/src/cpu_kernels.cpp): TRAIN_CPU_KERNELS=portable (oneDNN,
// NNPACK and the AVX2/AVX-512 fused kernels off), ATEN_CPU_CAPABILITY=default (ATen's non-vectorized
// kernels), MKL_CBWR=COMPATIBLE (MKL's SSE2 branch), glibc's libm without its FMA variants, one
// thread. They are not enough everywhere: on an Intel Xeon with AVX-512 every Fashion-MNIST run
// gave other bits than on the AMD EPYC they were recorded on (the CIFAR-10 runs matched), with
// the same build of the commit before (8630986). So the portable records are kept per CPU model
// ("portable on <model name>"), each recorded with a build whose numbers are right; a CPU with no
// record set fails with the lines to record. One more run, with the CPU knobs those settings
// override set to another CPU's values, must give the same bits, and so must one per vector
// version of the built-in models' fused kernels (AVX2, AVX-512) this CPU has.
//
// On AMD EPYC the test also checks the records kept from before the Trainer refactor (AVX2
// pinning, which gives per-CPU results: MKL_CBWR=AVX2 falls back to MKL's AUTO branch on AMD).
// A change that is meant to change numbers says so in its commit and updates the file.
#include "test_util.h"
#include "train/base/files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using train::test::run_program;

namespace {

const char* kRecords = TRAIN_SOURCE_DIR "/tests/libtrain/invariant_sha256.txt";

// The portable settings' record set of a CPU is "portable on <model name>".
const char* kPortablePrefix = "portable on ";
const std::vector<std::string> kPortableEnv = {
    "TRAIN_CPU_KERNELS=portable", "ATEN_CPU_CAPABILITY=default", "MKL_CBWR=COMPATIBLE",
    // libm's exp/log/pow have FMA variants picked by the CPU; a CPU without FMA gets these.
    "GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX2,-FMA"};
// The records from before the Trainer refactor, valid on AMD EPYC only, and their settings.
const char* kAmdEpyc = "AMD EPYC";
const std::vector<std::string> kAmdEpycEnv = {"ATEN_CPU_CAPABILITY=avx2", "ONEDNN_MAX_CPU_ISA=AVX2", "MKL_CBWR=AVX2"};

std::string train_bin(const std::string& name) {
  const char* dir = std::getenv("TRAIN_INVARIANT_BIN_DIR");  // to record with another build
  return dir != nullptr ? std::string(dir) + "/" + name : train::test::bin(name);
}

// The vector versions of the built-in models' fused kernels this CPU can run (TRAIN_FUSED_KERNELS).
std::vector<std::string> fused_kernel_versions() {
  std::vector<std::string> out;
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2")) out.push_back("avx2");
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl")) {
    out.push_back("avx512");
  }
#endif
  return out;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// record set -> run name -> sha256
std::map<std::string, std::map<std::string, std::string>> read_records() {
  std::map<std::string, std::map<std::string, std::string>> out;
  std::ifstream in(kRecords);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string set, run, sha;
    std::getline(fields, set, '\t');
    std::getline(fields, run, '\t');
    std::getline(fields, sha, '\t');
    out[set][run] = sha;
  }
  return out;
}

// CIFAR-10 binary batches whose classes differ in brightness (a fixed LCG, no library RNG).
void write_cifar(const std::string& dir) {
  train::files::make_dirs(dir);
  uint32_t state = 12345;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state >> 24;
  };
  for (const std::string name : {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
                                 "data_batch_5.bin", "test_batch.bin"}) {
    std::vector<uint8_t> bytes;
    for (int i = 0; i < 200; ++i) {
      const int label = i % 10;
      bytes.push_back(static_cast<uint8_t>(label));
      for (int p = 0; p < 3072; ++p) bytes.push_back(static_cast<uint8_t>((next() / 2 + label * 12) % 256));
    }
    train::test::write_file(dir + "/" + name, bytes);
  }
}

std::string sha_of(const train::test::RunResult& r, const std::string& name) {
  auto j = nlohmann::json::parse(train::test::last_line(r.out), nullptr, false);
  EXPECT_FALSE(j.is_discarded() || !j.contains("params_sha256")) << name << ": no done line\n" << r.out << r.err;
  return j.is_discarded() ? "" : j.value("params_sha256", "");
}

struct TrainingRun {
  std::string name, command;
  std::string record;            // the record it must equal: its own name unless set
  std::vector<std::string> env;  // on top of the record set's settings
};

// The runs: Fashion-MNIST from `fm`, CIFAR-10 from d/cifar, checkpoints in d/TAG-*.
std::vector<TrainingRun> make_runs(const std::string& fm, const train::test::TempDir& d, const std::string& tag) {
  const std::string train = train_bin("train");
  const std::string local2 = train_bin("trainctl") + " local --nproc 2 --no-prefix -- ";
  const std::string fm_args = " --data " + fm + " --epochs 1 --limit-train-samples 1000 --limit-test-samples 500"
                              " --device cpu --threads 1";
  const std::string cifar_args = " --model cifar10 --data " + d.file("cifar") + " --epochs 1 --device cpu --threads 1";
  const std::string ck_args = fm_args + " --epochs 2 --checkpoint-dir ";
  // The first command stops at step 20 (SIGUSR2: checkpoint and exit), the second resumes.
  const std::string stop = "TRAIN_FAULT_SIGNAL_AT_STEP=20:USR2 ";
  const std::string ck = d.file(tag + "-ck");
  return {
      {"w1", train + fm_args, "", {}},
      {"w1-nodrop", train + fm_args + " --no-dropout", "", {}},
      {"w2", local2 + train + fm_args, "", {}},
      {"w2-nodrop", local2 + train + fm_args + " --no-dropout", "", {}},
      {"w1-2ep-ckpt", train + ck_args + d.file(tag + "-ck-whole"), "", {}},
      {"w1-2ep-ckpt-resumed", stop + train + ck_args + ck + " >/dev/null; " + train + ck_args + ck, "w1-2ep-ckpt", {}},
      {"cifar-w1", train + cifar_args + " --batch-size 50", "", {}},
      {"cifar-w2", local2 + train + cifar_args + " --batch-size 25", "", {}},
  };
}

// Runs `runs` with `settings` and compares each params_sha256 with record set `set`. Returns the
// lines that would record them.
std::string check_runs(const std::string& set, const std::vector<std::string>& settings,
                       const std::vector<TrainingRun>& runs) {
  const auto records = read_records();
  const auto it = records.find(set);
  std::string lines;
  for (const TrainingRun& run : runs) {
    std::vector<std::string> env = settings;
    env.push_back("TRAIN_LOG_LEVEL=warn");
    env.insert(env.end(), run.env.begin(), run.env.end());
    auto r = run_program({"bash", "-c", run.command}, env, 600);
    EXPECT_EQ(r.exit_code, 0) << set << ": " << run.name << ": " << r.err;
    if (r.exit_code != 0) continue;
    const std::string sha = sha_of(r, run.name);
    const std::string record = run.record.empty() ? run.name : run.record;
    if (run.record.empty()) lines += set + "\t" + run.name + "\t" + sha + "\n";
    const bool recorded = it != records.end() && it->second.count(record) == 1;
    EXPECT_TRUE(recorded) << "no '" << set << "' record of " << record << " in " << kRecords;
    if (recorded) EXPECT_EQ(sha, it->second.at(record)) << set << ": " << run.name << " changed its params_sha256";
  }
  return lines;
}

}  // namespace

TEST(Invariant, RecordedParamsSha256AreUnchanged) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the records are of x86-64 CPUs; this build is for another architecture";
#endif
  const std::string fm = train::test::fashion_mnist_dir();
  if (fm.empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  train::test::TempDir d("invariant");
  write_cifar(d.file("cifar"));
  std::vector<TrainingRun> runs = make_runs(fm, d, "portable");
  // w1 again with the knobs a different CPU turns (oneDNN's and MKL's instruction sets, here
  // capped at SSE4.x as on an old CPU): the settings above must leave them no say.
  runs.push_back({"w1-other-cpu", runs.front().command, "w1",
                  {"ONEDNN_MAX_CPU_ISA=SSE41", "MKL_ENABLE_INSTRUCTIONS=SSE4_2"}});
  // w1 again with each vector version of the fused kernels this CPU has instead of the portable
  // one (TRAIN_FUSED_KERNELS wins over TRAIN_CPU_KERNELS=portable for them): the same bits.
  for (const std::string& isa : fused_kernel_versions()) {
    runs.push_back({"w1-fused-" + isa, runs.front().command, "w1", {"TRAIN_FUSED_KERNELS=" + isa}});
  }
  const std::string cpu = cpu_model();
  const std::string portable = kPortablePrefix + cpu;
  const std::string lines = check_runs(portable, kPortableEnv, runs);
  std::printf("[invariant] %zu runs (portable settings) on '%s' checked against the '%s' records in %s\n", runs.size(),
              cpu.c_str(), portable.c_str(), kRecords);
  if (HasFailure()) {
    std::printf("[invariant] a CPU without records gets them from the build of a commit whose numbers are right "
                "(TRAIN_INVARIANT_BIN_DIR=<that build>/bin); this build's records are:\n%s", lines.c_str());
  }
  // The records from before the refactor, on the CPU they were recorded on.
  if (cpu == kAmdEpyc) {
    const std::vector<TrainingRun> avx2_runs = make_runs(fm, d, "avx2");
    check_runs(kAmdEpyc, kAmdEpycEnv, avx2_runs);
    std::printf("[invariant] and %zu runs (AVX2 settings) against the '%s' records\n", avx2_runs.size(), kAmdEpyc);
  } else {
    std::printf("[invariant] the '%s' records (AVX2 settings) are not checked on this CPU\n", kAmdEpyc);
  }
}

TEST(Invariant, UnknownCpuKernelsSettingIsRefused) {
  auto r = run_program({train_bin("train"), "--data", "/nonexistent", "--device", "cpu"}, {"TRAIN_CPU_KERNELS=fast"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("TRAIN_CPU_KERNELS=fast: expected auto or portable."), std::string::npos) << r.err;
}

TEST(Invariant, UnknownFusedKernelsSettingIsRefused) {
  auto r = run_program({train_bin("train"), "--data", "/nonexistent", "--device", "cpu"}, {"TRAIN_FUSED_KERNELS=sse9"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("TRAIN_FUSED_KERNELS=sse9: expected auto, portable, avx2 or avx512."), std::string::npos) << r.err;
}
