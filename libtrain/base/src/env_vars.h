// What env.cpp (torchrun-style variables, the public API) and env_slurm.cpp (SLURM's variables) share
// to resolve the distributed environment: reading variables, parsing numbers with the variable named,
// the layout checks. Private to the launcher library.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "train/base/env.h"

namespace train::detail {

inline constexpr char kSlurmHint[] =
    "SLURM sets the SLURM_* variables for every task that srun starts: launch the program with "
    "`srun` inside the allocation, and don't export SLURM_* values by hand (a saved environment "
    "can carry stale values from another job).";

/// Read access to the environment; an empty value counts as unset (`export VAR=` clears it).
class Vars {
 public:
  explicit Vars(const EnvMap& env) : env_(env) {}

  bool has(const std::string& name) const { return get(name) != nullptr; }

  const std::string* get(const std::string& name) const {
    const auto it = env_.find(name);
    return it == env_.end() || it->second.empty() ? nullptr : &it->second;
  }

  /// The first of `names` that is set, or "" when none is.
  std::string first_set(std::initializer_list<const char*> names) const {
    for (const char* name : names) {
      if (has(name)) return name;
    }
    return "";
  }

 private:
  const EnvMap& env_;
};

/// A number and the variable(s) it came from, so that messages can say where a value was read.
struct Sourced {
  int value = 0;
  std::string from;
};

/// Parses a decimal integer >= min (0 or 1); no sign, no spaces, below 2^31.
int parse_int(const std::string& name, const std::string& value, int min, const char* hint);

/// Parses a non-negative decimal integer that fits 64 bits.
std::uint64_t parse_u64(const std::string& name, const std::string& value, const char* hint);

/// The variable `name` (set) as an integer >= min, with "NAME=VALUE" as where it came from.
Sourced get_int(const Vars& vars, const std::string& name, int min, const char* hint);

/// Applies MASTER_ADDR / MASTER_PORT when set.
void apply_master_overrides(const Vars& vars, DistEnv& out);

/// SLURM_JOB_ID (or SLURM_JOBID), "" outside SLURM.
std::string job_id_of(const Vars& vars);

/// The checks every source shares; `n` says where each quantity came from, for the messages.
struct Names {
  std::string rank, world, local_rank, local_world, node_rank, num_nodes;
};

/// Checks that rank, local rank and node rank lie below their counts, and the counts fit each other.
void check_layout(const DistEnv& e, const Names& n, const char* hint);

/// The layout from SLURM's variables (SLURM_PROCID set), with `out`'s host and defaults
/// (env_slurm.cpp).
DistEnv resolve_slurm(const Vars& vars, DistEnv out);

}  // namespace train::detail
