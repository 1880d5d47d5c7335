// The metrics sinks (train/metrics.h) without a training run: the JSONL file drops what an earlier
// attempt wrote after the step a run starts from (and a torn last line) and appends in order; the
// TensorBoard sink tags each value <event>/<name>; unwritable paths are errors that name the flag.
#include "test_util.h"
#include "train/base/error.h"
#include "train/base/event_file.h"
#include "train/base/files.h"
#include "train/base/log.h"
#include "train/metrics.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::vector<nlohmann::json> json_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(train::test::read_text(path));
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

train::MetricsRecord record(const std::string& event, int64_t step, double loss) {
  return {event, 1, step, {{"loss", loss}}, 1000.0 + static_cast<double>(step)};
}

}  // namespace

TEST(JsonlSink, ResumeDropsLaterStepsAndATornLine) {
  train::test::TempDir d("jsonl-sink");
  const std::string path = d.file("m.jsonl");
  {
    auto sink = train::make_jsonl_sink(path);
    sink->open(0);
    for (int s = 1; s <= 8; ++s) sink->write(record("train", s, 1.0 / s));
  }
  {
    std::ofstream torn(path, std::ios::app);
    torn << "{\"event\":\"train\",\"epoch\":1,\"st";  // killed mid-write
  }
  std::vector<std::string> warnings;
  train::log::set_sink([&](train::log::Level level, const std::string& m) {
    if (level == train::log::Level::warn) warnings.push_back(m);
  });
  auto sink = train::make_jsonl_sink(path);
  sink->open(5);
  sink->write(record("train", 6, 0.5));
  train::log::set_sink(nullptr);
  sink.reset();

  std::vector<int64_t> steps;
  for (const auto& j : json_lines(path)) steps.push_back(j["step"]);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  const auto last = json_lines(path).back();
  EXPECT_EQ(last["event"], "train");
  EXPECT_EQ(last["loss"], 0.5);
  EXPECT_EQ(last["time"], 1006.0);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("--metrics " + path + ": dropped 4 line(s) an earlier attempt wrote up to step 8 after step 5"),
            std::string::npos)
      << warnings[0];
}

TEST(JsonlSink, NothingStaleLeavesTheFileAsItWas) {
  train::test::TempDir d("jsonl-keep");
  const std::string path = d.file("m.jsonl");
  {
    auto sink = train::make_jsonl_sink(path);
    sink->open(0);
    sink->write(record("epoch", 4, 0.25));
  }
  const std::string before = train::test::read_text(path);
  auto sink = train::make_jsonl_sink(path);
  sink->open(4);
  sink.reset();
  EXPECT_EQ(train::test::read_text(path), before);
}

TEST(TensorBoardSink, TagsAreEventSlashName) {
  train::test::TempDir d("tb-sink");
  {
    auto sink = train::make_tensorboard_sink(d.file("tb"));
    sink->open(0);
    sink->write({"epoch", 1, 10, {{"test_loss", 0.5}, {"test_accuracy", 0.75}}, 1234.5});
  }
  std::vector<train::tensorboard::Event> scalars;
  for (const std::string& f : train::tensorboard::event_files(d.file("tb"))) {
    for (const auto& r : train::tensorboard::read_records(train::files::read_text(f)).records) {
      auto e = train::tensorboard::decode_event(r.payload);
      if (!e.scalars.empty()) scalars.push_back(e);
    }
  }
  ASSERT_EQ(scalars.size(), 1u);
  EXPECT_EQ(scalars[0].step, 10);
  EXPECT_EQ(scalars[0].wall_time, 1234.5);
  ASSERT_EQ(scalars[0].scalars.size(), 2u);
  EXPECT_EQ(scalars[0].scalars[0].tag, "epoch/test_loss");
  EXPECT_EQ(scalars[0].scalars[1].tag, "epoch/test_accuracy");
  EXPECT_EQ(scalars[0].scalars[1].value, 0.75);
}

TEST(MetricsSinks, UnwritablePathsNameTheFlag) {
  train::test::TempDir d("sink-bad");
  train::test::write_file(d.file("plain"), {'x'});
  try {
    train::make_jsonl_sink(d.file("plain") + "/m.jsonl")->open(0);
    FAIL() << "a file under a plain file can't be opened";
  } catch (const train::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--metrics " + d.file("plain") + "/m.jsonl: expected a file that can be opened"),
              std::string::npos)
        << e.what();
    EXPECT_NE(e.hint(), "");
  }
  try {
    train::make_tensorboard_sink(d.file("plain"))->open(0);
    FAIL() << "a plain file is not a folder";
  } catch (const train::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--tensorboard " + d.file("plain") + ": expected a folder"), std::string::npos)
        << e.what();
    EXPECT_NE(e.hint(), "");
  }
}
