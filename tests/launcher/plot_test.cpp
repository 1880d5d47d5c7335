// Tests for `trainctl plot`: a valid PNG of the stated size (read from its IHDR chunk), one that
// changes when the metrics do, and clear errors for missing or malformed metrics files.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "test_process.h"
#include "test_util.h"

namespace train {
namespace {

std::string trainctl() { return std::string(TRAIN_BINARY_DIR) + "/bin/trainctl"; }

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

uint32_t be32(const std::string& b, std::size_t at) {
  return (uint32_t(uint8_t(b[at])) << 24) | (uint32_t(uint8_t(b[at + 1])) << 16) | (uint32_t(uint8_t(b[at + 2])) << 8) |
         uint32_t(uint8_t(b[at + 3]));
}

/// A metrics file as train --metrics writes it: train lines every 10 steps, one epoch line per epoch.
std::string metrics(int epochs, double accuracy_step) {
  std::string out;
  for (int e = 1; e <= epochs; ++e) {
    for (int s = 1; s <= 40; s += 10) {
      const int step = (e - 1) * 40 + s;
      out += "{\"epoch\":" + std::to_string(e) + ",\"event\":\"train\",\"images_per_sec\":" + std::to_string(900 + step) +
             ",\"loss\":" + std::to_string(2.0 / step) + ",\"lr\":1.0,\"step\":" + std::to_string(step) + "}\n";
    }
    out += "{\"event\":\"epoch\",\"epoch\":" + std::to_string(e) + ",\"step\":" + std::to_string(e * 40) +
           ",\"train_loss\":" + std::to_string(1.0 / e) + ",\"test_loss\":" + std::to_string(1.2 / e) +
           ",\"test_accuracy\":" + std::to_string(0.5 + accuracy_step * e) + ",\"images_per_sec\":950}\n";
  }
  return out + "{\"event\":\"done\",\"epochs\":" + std::to_string(epochs) + "}\n";
}

/// The repository's venv (or TRAIN_PYTHON), as trainctl plot looks for it; "" without matplotlib.
std::string python_with_matplotlib() {
  const char* env_python = std::getenv("TRAIN_PYTHON");
  const std::string python = env_python != nullptr ? env_python : std::string(TRAIN_SOURCE_DIR) + "/.venv/bin/python";
  const auto probe = test::run_process({python, "-c", "import matplotlib"}, test::hermetic_env(), 60);
  return probe->exit_code() == 0 ? python : "";
}

TEST(TrainctlPlot, WritesAPngOfTheStatedSizeThatFollowsTheMetrics) {
  const std::string python = python_with_matplotlib();
  if (python.empty()) GTEST_SKIP() << "no Python with matplotlib (scripts/setup.sh installs it into .venv)";
  test::TempDir dir("plot");
  write_text(dir.file("a.jsonl"), metrics(3, 0.1));
  write_text(dir.file("b.jsonl"), metrics(2, 0.05));
  test::Env env = test::hermetic_env();
  env["TRAIN_PYTHON"] = python;
  auto p = test::run_process({trainctl(), "plot", dir.file("a.jsonl"), dir.file("b.jsonl"), "-o", dir.file("one.png"),
                              "--width", "900", "--height", "300"},
                             env, 120);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  EXPECT_TRUE(contains(p->err(), "wrote " + dir.file("one.png") + " (900x300, 2 runs)")) << p->err();
  const std::string png = test::read_text(dir.file("one.png"));
  ASSERT_GT(png.size(), 33u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  EXPECT_EQ(be32(png, 16), 900u);
  EXPECT_EQ(be32(png, 20), 300u);

  // Other accuracies, same everything else: another picture.
  write_text(dir.file("a.jsonl"), metrics(3, 0.12));
  p = test::run_process({trainctl(), "plot", dir.file("a.jsonl"), dir.file("b.jsonl"), "-o", dir.file("two.png"),
                         "--width", "900", "--height", "300"},
                        env, 120);
  ASSERT_EQ(p->exit_code(), 0) << p->err();
  const std::string png2 = test::read_text(dir.file("two.png"));
  EXPECT_EQ(be32(png2, 16), 900u);
  EXPECT_NE(png2, png);
}

TEST(TrainctlPlot, MissingAndMalformedFilesAreNamed) {
  test::TempDir dir("plot-bad");
  test::Env env = test::hermetic_env();
  auto p = test::run_process({trainctl(), "plot", dir.file("nope.jsonl"), "-o", dir.file("x.png")}, env, 60);
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_TRUE(contains(p->err(), dir.file("nope.jsonl") + ": expected a metrics file")) << p->err();
  EXPECT_TRUE(contains(p->err(), "Hint:")) << p->err();

  p = test::run_process({trainctl(), "plot", "-o", dir.file("x.png")}, env, 60);
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_TRUE(contains(p->err(), "METRICS: expected one or more files")) << p->err();

  const std::string python = python_with_matplotlib();
  if (python.empty()) GTEST_SKIP() << "no Python with matplotlib: the script's own errors are not reachable";
  env["TRAIN_PYTHON"] = python;
  write_text(dir.file("bad.jsonl"), metrics(1, 0.1) + "{\"event\":\"epoch\", oops\n");
  p = test::run_process({trainctl(), "plot", dir.file("bad.jsonl"), "-o", dir.file("x.png")}, env, 120);
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_TRUE(contains(p->err(), dir.file("bad.jsonl") + ":7: expected a JSON object per line")) << p->err();
  write_text(dir.file("empty.jsonl"), "{\"event\":\"done\"}\n");
  p = test::run_process({trainctl(), "plot", dir.file("empty.jsonl"), "-o", dir.file("x.png")}, env, 120);
  EXPECT_EQ(p->exit_code(), 1);
  EXPECT_TRUE(contains(p->err(), dir.file("empty.jsonl") + ": expected train --metrics lines")) << p->err();
  EXPECT_FALSE(test::read_text(dir.file("x.png")).size() > 0);
}

}  // namespace
}  // namespace train
