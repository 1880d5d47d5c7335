// The numbers a refactor must not change: params_sha256 of a fixed set of CPU runs (world 1 and 2,
// with and without dropout, two epochs with checkpoints, resumed after SIGUSR2, CIFAR-10 on
// written files at world 1 and 2), compared with the values recorded in invariant_sha256.txt.
//
// float32 results depend on the kernels a CPU gets, so the runs pin the instruction set
// (ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2, MKL_CBWR=AVX2, one thread) and the records
// are kept per CPU model. On a CPU without records the test skips, printing the lines to add. A
// change that is meant to change numbers says so in its commit and updates the file.
#include "test_util.h"
#include "train/files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

using train::test::run_program;

namespace {

const char* kRecords = TRAIN_SOURCE_DIR "/tests/libtrain/invariant_sha256.txt";

std::string train_bin(const std::string& name) {
  const char* dir = std::getenv("TRAIN_INVARIANT_BIN_DIR");  // to record with another build
  return dir != nullptr ? std::string(dir) + "/" + name : train::test::bin(name);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

bool has_avx2() {
  std::ifstream in("/proc/cpuinfo");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text.find(" avx2") != std::string::npos && text.find(" fma") != std::string::npos;
}

// cpu model -> run name -> sha256
std::map<std::string, std::map<std::string, std::string>> read_records() {
  std::map<std::string, std::map<std::string, std::string>> out;
  std::ifstream in(kRecords);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string cpu, run, sha;
    std::getline(fields, cpu, '\t');
    std::getline(fields, run, '\t');
    std::getline(fields, sha, '\t');
    out[cpu][run] = sha;
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

}  // namespace

TEST(Invariant, RecordedParamsSha256AreUnchanged) {
  const std::string fm = train::test::fashion_mnist_dir();
  if (fm.empty()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  if (!has_avx2()) GTEST_SKIP() << "this CPU has no AVX2/FMA: the recorded runs pin that instruction set";
  train::test::TempDir d("invariant");
  write_cifar(d.file("cifar"));
  const std::vector<std::string> pin = {"ATEN_CPU_CAPABILITY=avx2", "ONEDNN_MAX_CPU_ISA=AVX2", "MKL_CBWR=AVX2",
                                        "TRAIN_LOG_LEVEL=warn"};
  const std::string train = train_bin("train");
  const std::string local2 = train_bin("trainctl") + " local --nproc 2 --no-prefix -- ";
  const std::string fm_args = " --data " + fm + " --epochs 1 --limit-train-samples 1000 --limit-test-samples 500"
                              " --device cpu --threads 1";
  const std::string cifar_args = " --model cifar10 --data " + d.file("cifar") + " --epochs 1 --device cpu --threads 1";
  const std::string ck = d.file("ck");
  const std::string ck_args = fm_args + " --epochs 2 --checkpoint-dir ";
  struct Run {
    std::string name, command;
    std::vector<std::string> env;
  };
  const std::vector<Run> runs = {
      {"w1", train + fm_args, {}},
      {"w1-nodrop", train + fm_args + " --no-dropout", {}},
      {"w2", local2 + train + fm_args, {}},
      {"w2-nodrop", local2 + train + fm_args + " --no-dropout", {}},
      {"w1-2ep-ckpt", train + ck_args + d.file("ck-whole"), {}},
      {"w1-2ep-ckpt-resumed", train + ck_args + ck + "; " + train + ck_args + ck, {"TRAIN_FAULT_SIGNAL_AT_STEP=20:USR2"}},
      {"cifar-w1", train + cifar_args + " --batch-size 50", {}},
      {"cifar-w2", local2 + train + cifar_args + " --batch-size 25", {}},
  };
  const auto records = read_records();
  const std::string cpu = cpu_model();
  const auto it = records.find(cpu);
  std::string lines;
  for (const Run& run : runs) {
    std::vector<std::string> env = pin;
    std::string command = run.command;
    if (!run.env.empty()) {
      // The fault applies to the first command only: it stops at step 20, the second resumes.
      const std::size_t split = command.find("; ");
      command = "TRAIN_FAULT_SIGNAL_AT_STEP=20:USR2 " + command.substr(0, split) + " >/dev/null; " + command.substr(split + 2);
    }
    auto r = run_program({"bash", "-c", command}, env, 600);
    ASSERT_EQ(r.exit_code, 0) << run.name << ": " << r.err;
    const std::string sha = sha_of(r, run.name);
    lines += cpu + "\t" + run.name + "\t" + sha + "\n";
    if (it == records.end()) continue;
    const std::string want = run.name == "w1-2ep-ckpt-resumed" ? it->second.at("w1-2ep-ckpt") : it->second.at(run.name);
    EXPECT_EQ(sha, want) << run.name << " changed its params_sha256 on " << cpu;
  }
  if (it == records.end()) {
    GTEST_SKIP() << "no params_sha256 recorded for CPU '" << cpu << "' in " << kRecords
                 << "; from a commit whose numbers are right, add these lines:\n" << lines;
  }
  std::printf("[invariant] %zu runs on '%s' match %s\n", runs.size(), cpu.c_str(), kRecords);
}
