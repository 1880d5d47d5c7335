// The straggler report (straggler.h).
#include "health/straggler.h"

#include "train/base/text.h"

#include <algorithm>

namespace train::detail {

namespace {
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
std::string ms(double seconds) { return text::format("%.1f", seconds * 1000) + " ms"; }
}  // namespace

std::string StragglerReport::report(const std::vector<double>& step_seconds, std::string* warning) {
  warning->clear();
  const size_t world = step_seconds.size();
  if (world < 2) return "";
  slow_in_a_row_.resize(world, 0);
  const double median = median_of(step_seconds);
  const size_t slowest = static_cast<size_t>(
      std::max_element(step_seconds.begin(), step_seconds.end()) - step_seconds.begin());
  std::string named;
  for (size_t r = 0; r < world; ++r) {
    const bool slow = median > 0 && step_seconds[r] >= kSlower * median;
    slow_in_a_row_[r] = slow ? slow_in_a_row_[r] + 1 : 0;
    if (slow_in_a_row_[r] == kReports) {
      named += (named.empty() ? "rank " : ", rank ") + std::to_string(r) + " (" + ms(step_seconds[r]) + ")";
    }
  }
  if (!named.empty()) {
    *warning = "straggler: " + named + " slower per step than the median of " + ms(median) + " by " +
               text::format("%.0f", (kSlower - 1) * 100) + "% or more in " + std::to_string(kReports) +
               " reports in a row (time outside collectives; every rank waits for the slowest). Hint: look at that "
               "node's load, its data loading and its GPU or CPU clocks.";
  }
  const double excess = median > 0 ? (step_seconds[slowest] / median - 1) * 100 : 0;
  return "slowest rank " + std::to_string(slowest) + " " + ms(step_seconds[slowest]) + "/step vs median " + ms(median) +
         " (+" + text::format("%.0f", excess) + "%)";
}

}  // namespace train::detail
