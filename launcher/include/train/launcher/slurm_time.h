// SLURM's time formats, parsed once for everyone: timestamps as squeue/scontrol print them
// (2026-11-26T08:15:00) and durations as --time takes them (1-02:03:04, 90, 30:00).
#pragma once

#include <cstdint>
#include <string>

namespace train {

/// Epoch seconds of a SLURM timestamp in local time ("YYYY-MM-DDTHH:MM:SS", what squeue -o %e
/// and scontrol print); 0 for "N/A", "Unknown", "UNLIMITED", "None" or anything else unparsable.
int64_t parse_slurm_timestamp(const std::string& text);

}  // namespace train
