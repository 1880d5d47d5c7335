// The run record's file (train/run_record.h): JSON, written atomically, read by trainctl.
#include "train/run_record.h"

#include "train/error.h"
#include "train/files.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>

#include <unistd.h>

namespace train {
namespace {

using json = nlohmann::ordered_json;

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

json to_json(const RestartEntry& r) {
  return {{"number", r.number},           {"cause", r.cause},       {"nodes", r.nodes},
          {"excluded", r.excluded},       {"exit_code", r.exit_code}, {"resumed_step", r.resumed_step},
          {"seconds", r.seconds},         {"time", r.time}};
}

RestartEntry restart_from(const json& j) {
  RestartEntry r;
  r.number = j.value("number", 0);
  r.cause = j.value("cause", "");
  r.nodes = j.value("nodes", std::vector<std::string>{});
  r.excluded = j.value("excluded", false);
  r.exit_code = j.value("exit_code", 0);
  r.resumed_step = j.value("resumed_step", int64_t{-1});
  r.seconds = j.value("seconds", 0.0);
  r.time = j.value("time", 0.0);
  return r;
}

json to_json(const RunRecord& r) {
  json restarts = json::array();
  for (const RestartEntry& e : r.restarts) restarts.push_back(to_json(e));
  return {{"job_id", r.job_id},
          {"state", r.state},
          {"checkpoint_dir", r.checkpoint_dir},
          {"tensorboard_dir", r.tensorboard_dir},
          {"metrics_file", r.metrics_file},
          {"world_size", r.world_size},
          {"nodes", r.nodes},
          {"step", r.step},
          {"epoch", r.epoch},
          {"last_checkpoint", r.last_checkpoint},
          {"restarts", restarts},
          {"updated", r.updated}};
}

RunRecord record_from(const json& j) {
  RunRecord r;
  r.job_id = j.value("job_id", "");
  r.state = j.value("state", "");
  r.checkpoint_dir = j.value("checkpoint_dir", "");
  r.tensorboard_dir = j.value("tensorboard_dir", "");
  r.metrics_file = j.value("metrics_file", "");
  r.world_size = j.value("world_size", 0);
  r.nodes = j.value("nodes", std::vector<std::string>{});
  r.step = j.value("step", int64_t{0});
  r.epoch = j.value("epoch", 0);
  r.last_checkpoint = j.value("last_checkpoint", "");
  if (j.contains("restarts") && j["restarts"].is_array()) {
    for (const json& e : j["restarts"]) r.restarts.push_back(restart_from(e));
  }
  r.updated = j.value("updated", 0.0);
  return r;
}

std::string dirname_of(const std::string& path) {
  const auto p = path.find_last_of('/');
  return p == std::string::npos ? std::string(".") : p == 0 ? std::string("/") : path.substr(0, p);
}

}  // namespace

std::string RunRecord::path_for(const std::string& work_dir, const std::string& job_id) {
  return files::join(files::join(work_dir, ".train/runs"), job_id + ".json");
}

std::string RunRecord::path_from_env() {
  const std::string explicit_path = env_or_empty("TRAIN_RUN_RECORD");
  if (!explicit_path.empty()) return explicit_path;
  const std::string dir = env_or_empty("SLURM_SUBMIT_DIR");
  const std::string job = env_or_empty("SLURM_JOB_ID");
  if (dir.empty() || job.empty()) return "";
  return path_for(dir, job);
}

std::optional<RunRecord> RunRecord::load(const std::string& path) {
  bool ok = false;
  const std::string text = files::read_text(path, &ok);
  if (!ok) return std::nullopt;
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    throw ConfigError(path + ": expected a run record (a JSON object written by train or trainctl run), found " +
                          std::to_string(text.size()) + " bytes that are not one.",
                      "delete the file: train writes it anew when the job runs again.");
  }
  try {
    return record_from(j);
  } catch (const json::exception& e) {
    throw ConfigError(path + ": expected a run record, found a field of the wrong type (" + std::string(e.what()) + ").",
                      "delete the file: train writes it anew when the job runs again.");
  }
}

std::string RunRecord::save(const std::string& path) const {
  const std::string err = files::make_dirs(dirname_of(path));
  if (!err.empty()) return err;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) return "cannot create " + tmp;
    const std::string text = to_json(*this).dump(2) + "\n";
    const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !written) {
      files::remove_file(tmp);
      return "cannot write " + tmp;
    }
  }
  return files::rename(tmp, path);
}

std::string RunRecord::update(const std::string& path, const std::function<void(RunRecord&)>& edit) {
  RunRecord r;
  try {
    if (auto found = load(path)) r = std::move(*found);
  } catch (const ConfigError&) {
    // A damaged record is replaced: it only describes the run, nothing is lost with it.
  }
  edit(r);
  r.updated = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return r.save(path);
}

}  // namespace train
