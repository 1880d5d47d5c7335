// The straggler report (private): each rank's time per step outside collectives, gathered at the
// epoch's end, against the median; a rank that is 20% or more slower in 3 reports in a row is named.
#pragma once

#include <string>
#include <vector>

namespace train::detail {

class StragglerReport {
 public:
  static constexpr double kSlower = 1.2;  // this much of the median, or more, is slow
  static constexpr int kReports = 3;      // slow in this many reports in a row: named

  /// One report from every rank's seconds per step (index = rank). Returns the text for the epoch
  /// line ("" for fewer than two ranks); *warning gets a warning naming the ranks that have now
  /// been slow kReports times in a row (else "").
  std::string report(const std::vector<double>& step_seconds, std::string* warning);

 private:
  std::vector<int> slow_in_a_row_;
};

}  // namespace train::detail
