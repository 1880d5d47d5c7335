// The epoch line's straggler report on the ranks (StragglerReport's figures, gathered): each rank's
// seconds per step outside collectives over an epoch, summed into one small tensor at its end. Private.
#pragma once

#include "health/straggler.h"

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace train {
class ProcessGroup;
}  // namespace train

namespace train::detail {

struct RollCallRecord;

/// The epoch line's straggler report: every rank's seconds per step outside collectives over an
/// epoch, gathered by one small all-reduce at the epoch's end.
class StragglerWatch {
 public:
  /// An epoch's steps begin at optimizer step `step`; `where`: this rank's roll-call record (null
  /// for one rank), whose time in collectives the report leaves out.
  void start_epoch(int64_t step, const RollCallRecord* where);
  /// Every rank at an epoch's end (optimizer step `step`, `epoch_seconds` of training): each
  /// rank's seconds per step gathered over `pg` on `device`; rank 0 gets the text for the epoch
  /// line and warns for a rank slow again and again ("" otherwise, and for one rank).
  std::string report(ProcessGroup* pg, const RollCallRecord* where, int64_t step, double epoch_seconds,
                     const at::Device& device);

 private:
  StragglerReport report_;
  int64_t wait_ns_ = 0, step_ = 0;  // at the epoch's start
};

}  // namespace train::detail
