// SLURM timestamps to epoch seconds (local time, as slurmctld prints them).
#include "train/launcher/slurm_time.h"

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

}  // namespace train
