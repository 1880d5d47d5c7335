// SLURM's times for everyone: timestamps as squeue/scontrol print them (2026-11-26T08:15:00)
// parsed, whether a time limit means "none", and times and durations put into words for logs
// ("2026-11-27 01:30:00 UTC, in 2 h 00 min").
#pragma once

#include <cstdint>
#include <string>

namespace train {

/// Epoch seconds of a SLURM timestamp in local time ("YYYY-MM-DDTHH:MM:SS", what squeue -o %e
/// and scontrol print); 0 for "N/A", "Unknown", "UNLIMITED", "None" or anything else unparsable.
int64_t parse_slurm_timestamp(const std::string& text);

/// Whether a job's time limit as squeue's %l (or scontrol's TimeLimit) prints it means "none":
/// UNLIMITED or INFINITE, or 365-00:00:00, what Slurm 22.05 shows (with an end time a year ahead)
/// for a job started without --time in a partition without MaxTime.
bool is_no_time_limit(const std::string& limit);

/// A duration in words: to the hour from a day up, to the minute from an hour up, else to the
/// second: "45 s", "12 min 05 s", "2 h 05 min", "3 d 04 h". Negative durations read as "0 s".
std::string describe_duration(int64_t seconds);

/// When a job ends, for its log: the date and local time with the zone's abbreviation and the time
/// left, "2026-11-27 01:30:00 UTC, in 2 h 00 min" (", already past" once it has gone by).
/// @param end_epoch the end, epoch seconds (what parse_slurm_timestamp returns).
/// @param now_epoch the present, epoch seconds.
std::string describe_end_time(int64_t end_epoch, int64_t now_epoch);

}  // namespace train
