// The checkpoint time budget (train/base/checkpoint_budget.h).
#include "train/base/checkpoint_budget.h"

#include "train/base/files.h"
#include "train/base/text.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <regex>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace train {
namespace {

constexpr double kSafety = 1.5;  // a checkpoint's time varies with the file system's load

// A value worth suggesting: twice the checkpoint's time plus 10 s, rounded up to 10 s.
long suggest(double checkpoint_sec) { return static_cast<long>(std::ceil((2 * checkpoint_sec + 10) / 10.0) * 10); }

std::string secs(double s) { return text::format(s < 10 ? "%.1f" : "%.0f", s); }

}  // namespace

CheckpointDeadlines deadlines_from_env(std::optional<double> time_margin_sec, std::optional<double> kill_wait_sec) {
  CheckpointDeadlines d;
  if (const char* lead = std::getenv("TRAIN_SIGNAL_LEAD"); lead && *lead) {
    char* end = nullptr;
    const double v = std::strtod(lead, &end);
    if (end && *end == '\0' && v > 0) d.signal_lead_sec = v;
  }
  d.time_margin_sec = time_margin_sec;
  d.kill_wait_sec = kill_wait_sec;
  return d;
}

std::optional<double> parse_kill_wait(const std::string& text) {
  static const std::regex kLine(R"((^|\n)\s*KillWait\s*=\s*(\d+)\s*sec)");
  std::smatch m;
  if (!std::regex_search(text, m, kLine)) return std::nullopt;
  return std::stod(m[2].str());
}

std::vector<std::string> check_checkpoint_budget(double checkpoint_sec, const CheckpointDeadlines& d,
                                                 const std::string& how) {
  std::vector<std::string> out;
  const double need = checkpoint_sec * kSafety;
  const std::string took = "a checkpoint takes about " + secs(checkpoint_sec) + " s (" + how + ")";
  if (d.signal_lead_sec && *d.signal_lead_sec < need) {
    out.push_back(took + ", but the job script's time-limit signal comes only " + secs(*d.signal_lead_sec) +
                  " s before the limit (#SBATCH --signal=...@" + secs(*d.signal_lead_sec) +
                  "): the checkpoint may be cut off by the time limit. Hint: give it more lead: #SBATCH --signal=USR2@" +
                  std::to_string(suggest(checkpoint_sec)) + " (trainctl sbatch --signal USR2@" +
                  std::to_string(suggest(checkpoint_sec)) + "), or make checkpoints smaller or the folder faster.");
  }
  if (d.time_margin_sec && *d.time_margin_sec < need) {
    out.push_back(took + ", but --time-margin starts it only " + secs(*d.time_margin_sec) +
                  " s before the job's time limit. Hint: pass --time-margin " + std::to_string(suggest(checkpoint_sec)) + ".");
  }
  if (d.kill_wait_sec && *d.kill_wait_sec < need) {
    out.push_back(took + ", but SLURM kills a job " + secs(*d.kill_wait_sec) +
                  " s after a SIGTERM (KillWait): the checkpoint of a scancel may be cut off. Hint: keep a recent one "
                  "with --checkpoint-every N (steps), stop with scancel --signal=USR2 (it requeues) or ask the admins "
                  "for a longer KillWait.");
  }
  return out;
}

double estimate_checkpoint_seconds(int64_t bytes, double bytes_per_sec) {
  return bytes_per_sec > 0 ? static_cast<double>(bytes) / bytes_per_sec : 0.0;
}

double measure_write_speed(const std::string& dir, int64_t bytes) {
  if (bytes <= 0 || !files::make_dirs(dir).empty()) return 0;
  const std::string probe = files::join(dir, ".write-probe." + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return 0;
  const std::vector<char> chunk(1 << 20, '\x5a');
  const auto t0 = std::chrono::steady_clock::now();
  int64_t left = bytes;
  bool ok = true;
  while (ok && left > 0) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(chunk.size())));
    ok = ::write(fd, chunk.data(), n) == static_cast<ssize_t>(n);
    left -= static_cast<int64_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  files::remove_file(probe);
  return ok && seconds > 0 ? static_cast<double>(bytes) / seconds : 0.0;
}

}  // namespace train
