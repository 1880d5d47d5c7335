// Private: `train --health-check`: before training, each rank's GEMM throughput
// and the all-reduce bus bandwidth over every rank, one table on rank 0, and the nodes whose GEMM is
// below --health-min-fraction of the other nodes' median named (health_verdict.h says the rule).
#pragma once

#include "train/config.h"
#include "train/base/env.h"
#include "train/base/error.h"

namespace train {
class ProcessGroup;
}  // namespace train

namespace train::detail {

class TrainDevice;

/// `--health-check` found nodes below the others; `train` exits kExitUnhealthy (cli.cpp).
class HealthError : public Error { using Error::Error; };
/// train's exit status after a failed health check (EX_UNAVAILABLE of sysexits.h).
inline constexpr int kExitUnhealthy = 69;

/// What the health check does with its measurements: TrainConfig's health section
/// (health_check_options). A program that builds its own loop passes its own.
struct HealthCheckOptions {
  double min_fraction = 0.5;       ///< a node whose GEMM is below this fraction of the other nodes' median is bad
  bool warn_only = false;          ///< name bad nodes but train anyway
  bool exclude_bad_nodes = false;  ///< under SLURM, requeue the job without the bad nodes
};
HealthCheckOptions health_check_options(const TrainConfig& config);

/// Checks the network and health settings before anything connects: distributed.interface (or
/// TRAIN_INTERFACE where it is unset) names an interface of this host, and the health section's
/// flags agree. Throws train::ConfigError naming the flag (a missing interface lists the
/// interfaces this host has).
void validate_network(const TrainConfig& config);

/// Every rank calls it (it is collective when `pg` is set; `pg` null: a job of one rank). Returns
/// when no node is bad, or with --health-warn-only after a warning. Otherwise throws
/// train::HealthError naming the bad nodes; with --exclude-bad-nodes under SLURM rank 0 first
/// requeues the job without them (at most kMaxHealthRequeues times per job).
void run_health_check(const HealthCheckOptions& options, const DistEnv& env, ProcessGroup* pg, const TrainDevice& device);

/// How often one job may requeue itself for failed health checks (counted in its SLURM comment).
inline constexpr int kMaxHealthRequeues = 3;

}  // namespace train::detail
