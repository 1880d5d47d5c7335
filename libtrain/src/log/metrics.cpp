// The two metrics sinks libtrain ships (metrics.h): the --metrics JSON-lines file and the
// --tensorboard event files, both of which keep a resumed run as one run.
#include "train/metrics.h"

#include "train/base/error.h"
#include "train/base/event_file.h"
#include "train/base/files.h"
#include "train/base/log.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <unistd.h>

namespace train {
namespace {

class JsonlSink : public MetricsSink {
 public:
  JsonlSink(std::string path, std::string option) : path_(std::move(path)), option_(std::move(option)) {}

  void open(int64_t start_step) override {
    // Its folder is created, as --tensorboard's and --checkpoint-dir's are (config.cpp's rule).
    const std::size_t slash = path_.find_last_of('/');
    const std::string err = slash == std::string::npos || slash == 0 ? "" : files::make_dirs(path_.substr(0, slash));
    if (!err.empty()) {
      throw ConfigError(option_ + " " + path_ + ": expected a file that can be opened for appending, found its folder "
                        "can't be created (" + err + ").", "give a path in a writable folder.");
    }
    drop_stale_lines(start_step);
    out_.open(path_, std::ios::app);
    if (!out_) {
      throw ConfigError(option_ + " " + path_ + ": expected a file that can be opened for appending, found it can't.",
                        "check that the folder is writable.");
    }
  }

  void write(const MetricsRecord& r) override {
    if (!out_.is_open()) return;
    nlohmann::ordered_json j = {{"event", r.event}, {"epoch", r.epoch}, {"step", r.step}};
    for (const auto& [name, value] : r.values) j[name] = value;
    j["time"] = r.time;
    out_ << j.dump() << '\n';
    out_.flush();
  }

 private:
  // Lines of steps after `start_step` came from an attempt whose progress was lost (killed after
  // its last checkpoint): this run does those steps again. A torn last line (killed mid-write)
  // goes too. The file is replaced atomically, so a crash here loses nothing.
  void drop_stale_lines(int64_t start_step) {
    bool ok = false;
    const std::string text = files::read_text(path_, &ok);
    if (!ok || text.empty()) return;
    std::istringstream in(text);
    std::string line, kept;
    int dropped = 0;
    int64_t last = 0;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      const bool stale = j.is_discarded() || (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
                                              j["step"].get<int64_t>() > start_step);
      if (stale) {
        ++dropped;
        if (!j.is_discarded()) last = std::max(last, j["step"].get<int64_t>());
        continue;
      }
      kept += line + '\n';
    }
    if (dropped == 0) return;
    const std::string tmp = path_ + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << kept;
      out.flush();
      if (!out) {
        files::remove_file(tmp);
        throw ConfigError(option_ + " " + path_ + ": expected to rewrite it without the steps after " +
                              std::to_string(start_step) + ", found its folder can't be written.",
                          "check that the folder is writable and has free space.");
      }
    }
    const std::string err = files::rename(tmp, path_);
    if (!err.empty()) {
      files::remove_file(tmp);
      throw ConfigError(option_ + " " + path_ + ": expected to replace it, found: " + err + ".",
                        "check that the folder is writable.");
    }
    log::warn(option_ + " " + path_ + ": dropped " + std::to_string(dropped) + " line(s) an earlier attempt wrote " +
              (last > 0 ? "up to step " + std::to_string(last) + " " : std::string()) + "after step " +
              std::to_string(start_step) + ", where this run starts; they are written again as it goes on");
  }

  std::string path_;
  std::string option_;
  std::ofstream out_;
};

class TensorBoardSink : public MetricsSink {
 public:
  TensorBoardSink(std::string dir, std::string option) : dir_(std::move(dir)), option_(std::move(option)) {}

  void open(int64_t start_step) override {
    writer_ = std::make_unique<tensorboard::EventFileWriter>(dir_, start_step, option_);
    const tensorboard::Superseded& s = writer_->superseded();
    if (s.records > 0) {
      log::warn(option_ + " " + dir_ + ": cut " + std::to_string(s.records) + " record(s) an earlier attempt wrote " +
                (s.last_step > 0 ? "up to step " + std::to_string(s.last_step) + " " : std::string()) + "after step " +
                std::to_string(start_step) + " from " + std::to_string(s.files) +
                " event file(s); this run writes those steps again");
    }
    log::info("TensorBoard event files in " + dir_ + " (" + files::basename(writer_->path()) + "); view with: tensorboard --logdir " + dir_);
  }

  void write(const MetricsRecord& r) override {
    if (!writer_) return;
    std::vector<tensorboard::Scalar> scalars;
    scalars.reserve(r.values.size());
    for (const auto& [name, value] : r.values) scalars.push_back({r.event + "/" + name, value});
    try {
      writer_->write_scalars(r.step, r.time, scalars);
    } catch (const Error& e) {
      // Curves are not worth a job: say it once and train on.
      log::warn(std::string(e.what()) + " No more TensorBoard records are written in this run.");
      writer_.reset();
    }
  }

 private:
  std::string dir_;
  std::string option_;
  std::unique_ptr<tensorboard::EventFileWriter> writer_;
};

}  // namespace

std::unique_ptr<MetricsSink> make_jsonl_sink(const std::string& path, const std::string& option) {
  return std::make_unique<JsonlSink>(path, option);
}

std::unique_ptr<MetricsSink> make_tensorboard_sink(const std::string& dir, const std::string& option) {
  return std::make_unique<TensorBoardSink>(dir, option);
}

}  // namespace train
