// Helpers shared by the SLURM test suites: which cluster to use, an environment for its commands,
// running a command from a folder, and whether the cluster can run the tests at all.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "test_process.h"

namespace train::test {

/// The SLURM config clients should use: $SLURM_CONF, else the local cluster's (<source>/.slurm),
/// else "" (SLURM's default).
std::string slurm_conf();

/// The environment for SLURM commands and jobs: no SLURM_* of an enclosing job, the cluster's config.
Env slurm_env();

/// Runs a command in a folder (as if typed there) and waits for it, killed after timeout_s.
std::unique_ptr<TestProcess> run_in(const std::string& dir, const std::vector<std::string>& argv, const Env& env,
                                    double timeout_s = 60);

/// Why the cluster can't run the tests ("" when it can): the SLURM client commands, and two nodes
/// with 2 CPUs up (idle, mix, alloc, or comp: a job completing there, as other suites' jobs do).
std::string cluster_problem(const Env& env);

}  // namespace train::test
