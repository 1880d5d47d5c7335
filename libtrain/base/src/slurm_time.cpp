// SLURM timestamps to epoch seconds (local time, as slurmctld prints them), and back into words.
#include "train/base/slurm_time.h"

#include <cstdio>
#include <ctime>

namespace train {

int64_t parse_slurm_timestamp(const std::string& text) {
  std::tm tm{};
  const char* end = ::strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) return 0;  // N/A, Unknown, UNLIMITED, None
  for (; *end != '\0'; ++end) {
    if (*end != ' ' && *end != '\n' && *end != '\r' && *end != '\t') return 0;
  }
  tm.tm_isdst = -1;
  const std::time_t t = std::mktime(&tm);
  return t < 0 ? 0 : static_cast<int64_t>(t);
}

bool is_no_time_limit(const std::string& limit) {
  return limit == "UNLIMITED" || limit == "INFINITE" || limit == "365-00:00:00";
}

std::string describe_duration(int64_t seconds) {
  if (seconds < 0) seconds = 0;
  const int64_t d = seconds / 86400, h = seconds / 3600 % 24, m = seconds / 60 % 60, s = seconds % 60;
  char buf[64];
  if (d > 0) {
    std::snprintf(buf, sizeof(buf), "%lld d %02lld h", static_cast<long long>(d), static_cast<long long>(h));
  } else if (h > 0) {
    std::snprintf(buf, sizeof(buf), "%lld h %02lld min", static_cast<long long>(h), static_cast<long long>(m));
  } else if (m > 0) {
    std::snprintf(buf, sizeof(buf), "%lld min %02lld s", static_cast<long long>(m), static_cast<long long>(s));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld s", static_cast<long long>(s));
  }
  return buf;
}

std::string describe_end_time(int64_t end_epoch, int64_t now_epoch) {
  const std::time_t t = static_cast<std::time_t>(end_epoch);
  std::tm tm{};
  localtime_r(&t, &tm);
  char date[64];
  if (std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S %Z", &tm) == 0) date[0] = '\0';
  const int64_t left = end_epoch - now_epoch;
  return std::string(date) + (left >= 0 ? ", in " + describe_duration(left) : ", already past");
}

}  // namespace train
