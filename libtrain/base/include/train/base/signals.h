// Signal names and numbers, in one table for libtrain, trainctl and the generated job scripts.
// No LibTorch.
#pragma once

#include <string>

namespace train {

/// The number of a signal given as SLURM and kill(1) write it: "USR2", "SIGUSR2", "usr2" or a
/// number ("12"); 0 when it is none of Linux's signals.
int signal_number(const std::string& name);

/// "SIGUSR2" for SIGUSR2; "signal N" for a number without a name.
std::string signal_name(int number);

/// "USR2" for SIGUSR2 (the form sbatch --signal takes); "" for a number without a name.
std::string signal_short_name(int number);

}  // namespace train
