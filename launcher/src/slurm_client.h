#pragma once
// Running SLURM's client tools (scontrol, scancel) for `trainctl status`, `logs` and `cancel`
// (jobs.cpp, job_control.cpp). Private to the launcher library.
#include <string>
#include <vector>

#include "train/base/subprocess.h"

namespace train {

/// Throws "NAME: expected SLURM's NAME on PATH, found none." with a hint when `name` can't be found.
void require_program(const std::string& name);

/// Runs a SLURM client command (after require_program) with a 15 s timeout; throws train::ConfigError
/// when it can't start or hangs, returns its result (any exit code) otherwise.
CommandResult run_slurm(const std::vector<std::string>& argv);

}  // namespace train
