// The run record's file (train/base/run_record.h): JSON, written atomically, read by trainctl.
#include "train/base/run_record.h"

#include "train/base/error.h"
#include "train/base/files.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <sstream>

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

namespace train {
namespace {

using json = nlohmann::ordered_json;

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

json to_json(const LaunchTimes& l) {
  return {{"number", l.number},   {"started", l.started}, {"connecting", l.connecting},
          {"connected", l.connected}, {"loaded", l.loaded},   {"source", l.source},
          {"resumed_step", l.resumed_step}, {"training", l.training}};
}

LaunchTimes launch_from(const json& j) {
  LaunchTimes l;
  if (!j.is_object()) return l;
  l.number = j.value("number", 0);
  l.started = j.value("started", 0.0);
  l.connecting = j.value("connecting", 0.0);
  l.connected = j.value("connected", 0.0);
  l.loaded = j.value("loaded", 0.0);
  l.source = j.value("source", "");
  l.resumed_step = j.value("resumed_step", int64_t{0});
  l.training = j.value("training", 0.0);
  return l;
}

json to_json(const RestartEntry& r) {
  return {{"number", r.number},           {"cause", r.cause},       {"nodes", r.nodes},
          {"excluded", r.excluded},       {"exit_code", r.exit_code}, {"resumed_step", r.resumed_step},
          {"seconds", r.seconds},         {"time", r.time},         {"failed_step", r.failed_step},
          {"failed_step_time", r.failed_step_time}, {"relaunched", r.relaunched}, {"launch", to_json(r.launch)}};
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
  r.failed_step = j.value("failed_step", int64_t{-1});
  r.failed_step_time = j.value("failed_step_time", 0.0);
  r.relaunched = j.value("relaunched", 0.0);
  if (j.contains("launch")) r.launch = launch_from(j["launch"]);
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
          {"progress_step", r.progress_step},
          {"progress_time", r.progress_time},
          {"launch", to_json(r.launch)},
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
  r.progress_step = j.value("progress_step", int64_t{0});
  r.progress_time = j.value("progress_time", 0.0);
  if (j.contains("launch")) r.launch = launch_from(j["launch"]);
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

namespace {

// An flock on `path`.lock for one read-modify-write of the record (released when it goes out of
// scope). Without a lock file (a read-only folder) the edit goes ahead unlocked.
class RecordLock {
 public:
  explicit RecordLock(const std::string& path) {
    if (!files::make_dirs(dirname_of(path)).empty()) return;
    fd_ = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) {
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~RecordLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  RecordLock(const RecordLock&) = delete;
  RecordLock& operator=(const RecordLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

std::string RunRecord::update(const std::string& path, const std::function<void(RunRecord&)>& edit) {
  const RecordLock lock(path);
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

double process_start_time() {
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  // Field 22 of /proc/self/stat: the start in clock ticks since boot; its age against CLOCK_BOOTTIME.
  const std::string stat = files::read_text("/proc/self/stat");
  const std::size_t close = stat.rfind(')');  // the command's name may hold blanks
  if (close == std::string::npos) return now;
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && (in >> field); ++i) {
  }
  timespec boot{};
  const long ticks = ::sysconf(_SC_CLK_TCK);
  if (field.empty() || ticks <= 0 || ::clock_gettime(CLOCK_BOOTTIME, &boot) != 0) return now;
  const double since_boot = static_cast<double>(boot.tv_sec) + static_cast<double>(boot.tv_nsec) * 1e-9;
  const double age = since_boot - std::strtod(field.c_str(), nullptr) / static_cast<double>(ticks);
  return age >= 0 ? now - age : now;
}

}  // namespace train
