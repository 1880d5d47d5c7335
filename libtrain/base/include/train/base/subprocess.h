// Runs a program to completion with a timeout, capturing its output: the one way libtrain's tools
// (trainctl's SLURM commands: sinfo, scontrol, squeue, sbatch, scancel) run other programs. No LibTorch.
#pragma once

#include <string>
#include <vector>

namespace train {

/// A finished (or killed) command.
struct CommandResult {
  bool started = false;   ///< false when the program could not be executed
  bool timed_out = false; ///< true when it was killed for running past its timeout
  int exit_code = -1;     ///< exit status, or 128 + signal
  std::string out;        ///< everything it wrote to stdout
  std::string err;        ///< everything it wrote to stderr
};

/// Runs argv (argv[0] found on PATH) with `input` on its stdin, capturing stdout and stderr, and
/// sends it SIGKILL after timeout_s seconds. Never throws for a failing command: the caller decides
/// what a failure means (started, timed_out and exit_code say what happened).
CommandResult run_command(const std::vector<std::string>& argv, const std::string& input, double timeout_s);

}  // namespace train
