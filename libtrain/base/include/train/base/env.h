// Resolution of the distributed environment (rank, world size, master address and port) from
// SLURM or torchrun-style variables. No LibTorch: trainctl and train share it.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace train {

/// Environment variables as name -> value (a snapshot of environ, or a fake one in tests).
using EnvMap = std::map<std::string, std::string>;

/// A snapshot of this process's environment.
EnvMap current_environment();

/// Where the distributed layout came from.
enum class EnvSource { single, torchrun, slurm };

/// The resolved layout of this process within the job.
struct DistEnv {
  EnvSource source = EnvSource::single;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  int num_nodes = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string job_id;               ///< SLURM_JOB_ID, empty outside SLURM
  std::vector<std::string> nodes;   ///< expanded node list of the step (empty outside SLURM)
  std::string host;                 ///< this machine's short host name; under SLURM the node's name (SLURMD_NODENAME)
  /// torchrun's agent already serves the TCPStore at master_addr:master_port
  /// (TORCHELASTIC_USE_AGENT_STORE=True): every rank, rank 0 too, connects as a client.
  bool agent_store = false;
  int restart_count = 0;            ///< TORCHELASTIC_RESTART_COUNT (keys of each attempt kept apart)
};

/// MASTER_PORT outside SLURM when none is given (torchrun's default).
constexpr int kDefaultMasterPort = 29500;
/// Lowest port derived for a SLURM step; derived ports lie in [kSlurmPortBase, kSlurmPortBase + kSlurmPortSpan).
constexpr int kSlurmPortBase = 20000;
/// Number of ports derived ports spread over.
constexpr int kSlurmPortSpan = 40000;

/// Resolves the layout. Precedence (documented in docs/environment.md): explicit torchrun-style
/// RANK/WORLD_SIZE win; else SLURM_PROCID & co. (a WORLD_SIZE without RANK beside SLURM_PROCID is
/// the job-script recipe: it must equal the step's task count); else a single process. MASTER_ADDR/MASTER_PORT
/// win when set. Throws train::ConfigError on inconsistent or malformed values.
DistEnv resolve_env(const EnvMap& env);

/// resolve_env() with the host name given instead of read from the machine; the host is used to
/// find this node in the node list when SLURM_NODEID is missing. Tests pass a fake one.
/// @throws train::ConfigError like resolve_env(env).
DistEnv resolve_env(const EnvMap& env, const std::string& host);

/// Checks a world size given beside SLURM's own (the WORLD_SIZE variable of a job script, or
/// --world-size) against the step's task count in `env`.
/// @param name where the value came from, for messages ("WORLD_SIZE", "--world-size").
/// @throws train::ConfigError naming both numbers when they differ, or when `value` is no positive integer.
void check_world_size_agrees(const std::string& name, const std::string& value, const DistEnv& env);

/// Applies an explicit rendezvous address, as torch.distributed's init_method: "tcp://HOST:PORT"
/// sets master_addr and master_port (it wins over MASTER_ADDR/MASTER_PORT and the derived ones).
/// @throws train::ConfigError for any other form, naming what was found.
void apply_init_method(const std::string& init_method, DistEnv& env);

/// "single", "torchrun" or "slurm".
std::string to_string(EnvSource source);

/// Expands SLURM's tasks-per-node notation, as in SLURM_TASKS_PER_NODE: a comma-separated list of
/// counts, each optionally followed by "(xN)" for N nodes in a row. "2(x3),1" gives {2, 2, 2, 1};
/// "4" gives {4}.
/// @param name the variable the value came from, for messages.
/// @throws train::ConfigError when the value is empty or malformed, or a count is not positive.
std::vector<int> parse_tasks_per_node(const std::string& name, const std::string& value);

/// The MASTER_PORT a SLURM step uses when MASTER_PORT is not set:
/// kSlurmPortBase + (job_id mod 2500) * 16 + (step_id mod 16), a port in [20000, 59999]. Every task
/// of a step computes the same port; two jobs whose ids differ by less than 2500 never get the same
/// port, and neither do steps 0..15 of one job, so concurrent jobs sharing a node don't collide.
/// @param job_id SLURM_JOB_ID (decimal).
/// @param step_id SLURM_STEP_ID (decimal); empty counts as step 0.
/// @throws train::ConfigError when either is not a non-negative decimal integer.
int slurm_master_port(const std::string& job_id, const std::string& step_id);

}  // namespace train
