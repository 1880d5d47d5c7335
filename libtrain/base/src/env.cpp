// Resolution of rank, world size, node layout and rendezvous address from torchrun-style or SLURM
// variables, with the consistency checks described in docs/environment.md. SLURM's variables are
// read in env_slurm.cpp; this file holds the torchrun-style ones, the precedence and the public API.
#include "train/base/env.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "env_vars.h"
#include "train/base/error.h"
#include "train/base/log.h"

extern char** environ;

namespace train {
using namespace detail;

namespace {

constexpr char kTorchrunHint[] =
    "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK and GROUP_WORLD_SIZE are set by "
    "torchrun or `trainctl local`; check the launch script, or unset them so that the SLURM "
    "variables (or a single process) apply.";
constexpr char kMasterHint[] =
    "MASTER_ADDR and MASTER_PORT override the derived rendezvous: unset them to get the defaults, "
    "or set them to the host of rank 0 and a free port in 1024-65535.";

/// Lowest MASTER_PORT accepted: ports below need root to listen on.
constexpr int kMinMasterPort = 1024;
constexpr int kMaxPort = 65535;

int parse_port(const std::string& name, const std::string& value) {
  bool digits = !value.empty() && value.size() <= 5;
  for (const char c : value) digits = digits && c >= '0' && c <= '9';
  const int port = digits ? std::stoi(value) : -1;
  if (port < kMinMasterPort || port > kMaxPort) {
    throw ConfigError(name + "='" + value + "': expected a TCP port in " + std::to_string(kMinMasterPort) +
                          "-" + std::to_string(kMaxPort) + ".",
                      kMasterHint);
  }
  return port;
}

std::string parse_addr(const std::string& name, const std::string& value) {
  for (const char c : value) {
    if (static_cast<unsigned char>(c) <= ' ' || c == '/') {
      throw ConfigError(name + "='" + value +
                            "': expected a host name or IP address (no scheme, path or spaces).",
                        kMasterHint);
    }
  }
  return value;
}

}  // namespace

namespace detail {

int parse_int(const std::string& name, const std::string& value, int min, const char* hint) {
  const std::string expected = min > 0 ? "a positive integer" : "a non-negative integer";
  if (value.empty()) {
    throw ConfigError(name + "='': expected " + expected + ", found an empty value.", hint);
  }
  std::int64_t parsed = 0;
  for (const char c : value) {
    if (c < '0' || c > '9') {
      throw ConfigError(name + "='" + value + "': expected " + expected + " (decimal digits only).", hint);
    }
    parsed = parsed * 10 + (c - '0');
    if (parsed > std::numeric_limits<int>::max()) {
      throw ConfigError(name + "='" + value + "': expected " + expected + " below 2^31.", hint);
    }
  }
  if (parsed < min) {
    throw ConfigError(name + "='" + value + "': expected " + expected + ".", hint);
  }
  return static_cast<int>(parsed);
}

std::uint64_t parse_u64(const std::string& name, const std::string& value, const char* hint) {
  std::uint64_t parsed = 0;
  for (const char c : value) {
    const std::uint64_t digit = static_cast<std::uint64_t>(c - '0');
    if (c < '0' || c > '9' || parsed > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) {
      throw ConfigError(name + "='" + value + "': expected a non-negative decimal integer.", hint);
    }
    parsed = parsed * 10 + digit;
  }
  if (value.empty()) {
    throw ConfigError(name + "='': expected a non-negative decimal integer, found an empty value.", hint);
  }
  return parsed;
}

Sourced get_int(const Vars& vars, const std::string& name, int min, const char* hint) {
  return {parse_int(name, *vars.get(name), min, hint), name + "=" + *vars.get(name)};
}

void apply_master_overrides(const Vars& vars, DistEnv& out) {
  if (const std::string* addr = vars.get("MASTER_ADDR")) out.master_addr = parse_addr("MASTER_ADDR", *addr);
  if (const std::string* port = vars.get("MASTER_PORT")) out.master_port = parse_port("MASTER_PORT", *port);
}

std::string job_id_of(const Vars& vars) {
  for (const char* name : {"SLURM_JOB_ID", "SLURM_JOBID"}) {
    if (const std::string* id = vars.get(name)) return *id;
  }
  return "";
}

void check_layout(const DistEnv& e, const Names& n, const char* hint) {
  auto fail = [&](const std::string& message) { throw ConfigError(message, hint); };
  if (e.rank >= e.world_size) {
    fail(n.rank + ": expected a rank below the world size " + std::to_string(e.world_size) + " (" +
         n.world + "), found " + std::to_string(e.rank) + ".");
  }
  if (e.local_world_size > e.world_size) {
    fail(n.local_world + ": expected at most the world size " + std::to_string(e.world_size) + " (" +
         n.world + ") tasks on one node, found " + std::to_string(e.local_world_size) + ".");
  }
  if (e.local_rank >= e.local_world_size) {
    fail(n.local_rank + ": expected a local rank below the " + std::to_string(e.local_world_size) +
         " tasks on this node (" + n.local_world + "), found " + std::to_string(e.local_rank) + ".");
  }
  if (e.num_nodes > e.world_size) {
    fail(n.num_nodes + ": expected at most one node per task, found " + std::to_string(e.num_nodes) +
         " nodes for a world size of " + std::to_string(e.world_size) + " (" + n.world + ").");
  }
  if (e.node_rank >= e.num_nodes) {
    fail(n.node_rank + ": expected a node rank below the number of nodes " + std::to_string(e.num_nodes) +
         " (" + n.num_nodes + "), found " + std::to_string(e.node_rank) + ".");
  }
}

}  // namespace detail

namespace {

DistEnv resolve_torchrun(const Vars& vars, DistEnv out) {
  out.source = EnvSource::torchrun;
  const Sourced rank = get_int(vars, "RANK", 0, kTorchrunHint);
  const Sourced world = get_int(vars, "WORLD_SIZE", 1, kTorchrunHint);
  out.rank = rank.value;
  out.world_size = world.value;

  Sourced nodes{0, ""};
  if (vars.has("GROUP_WORLD_SIZE")) nodes = get_int(vars, "GROUP_WORLD_SIZE", 1, kTorchrunHint);

  Sourced local_world;
  if (vars.has("LOCAL_WORLD_SIZE")) {
    local_world = get_int(vars, "LOCAL_WORLD_SIZE", 1, kTorchrunHint);
  } else if (nodes.value > 0 && world.value % nodes.value == 0) {
    local_world = {world.value / nodes.value, world.from + " / " + nodes.from};
  } else {
    local_world = {world.value, world.from + " (LOCAL_WORLD_SIZE unset: one node)"};
  }
  out.local_world_size = local_world.value;

  Sourced local_rank;
  if (vars.has("LOCAL_RANK")) {
    local_rank = get_int(vars, "LOCAL_RANK", 0, kTorchrunHint);
  } else {
    local_rank = {rank.value % local_world.value, "RANK mod local world size (LOCAL_RANK unset)"};
  }
  out.local_rank = local_rank.value;

  out.num_nodes = nodes.value > 0 ? nodes.value
                                  : (world.value + local_world.value - 1) / local_world.value;
  if (nodes.from.empty()) nodes.from = "WORLD_SIZE / LOCAL_WORLD_SIZE";

  Sourced node_rank;
  if (vars.has("GROUP_RANK")) {
    node_rank = get_int(vars, "GROUP_RANK", 0, kTorchrunHint);
  } else {
    node_rank = {rank.value / local_world.value, "RANK / LOCAL_WORLD_SIZE (GROUP_RANK unset)"};
  }
  out.node_rank = node_rank.value;

  check_layout(out, {rank.from, world.from, local_rank.from, local_world.from, node_rank.from, nodes.from},
               kTorchrunHint);

  apply_master_overrides(vars, out);
  if (!vars.has("MASTER_ADDR") && out.num_nodes > 1) {
    throw ConfigError("MASTER_ADDR: expected the host of rank 0 for a job across " +
                          std::to_string(out.num_nodes) + " nodes (" + world.from + "), found it unset.",
                      "export MASTER_ADDR=<host of rank 0> on every node (torchrun sets it from "
                      "--rdzv-endpoint / --master-addr).");
  }
  out.job_id = job_id_of(vars);
  if (const std::string* agent = vars.get("TORCHELASTIC_USE_AGENT_STORE")) {
    out.agent_store = *agent == "True" || *agent == "true" || *agent == "1";
  }
  if (vars.has("TORCHELASTIC_RESTART_COUNT")) {
    out.restart_count = get_int(vars, "TORCHELASTIC_RESTART_COUNT", 0, kTorchrunHint).value;
  }
  return out;
}

}  // namespace

void check_world_size_agrees(const std::string& name, const std::string& value, const DistEnv& env) {
  const char* hint =
      "WORLD_SIZE (or --world-size) is only a check under SLURM: the step's task count decides. Request "
      "the tasks with #SBATCH --nodes/--ntasks-per-node (or srun -n), and compute WORLD_SIZE from the same "
      "numbers, e.g. $((SLURM_NNODES * SLURM_NTASKS_PER_NODE)), or unset it.";
  const int world = parse_int(name, value, 1, hint);
  if (world != env.world_size) {
    throw ConfigError(name + "=" + value + ": expected the " + std::to_string(env.world_size) +
                          " tasks that SLURM started in this step (SLURM_PROCID=" + std::to_string(env.rank) +
                          " of " + std::to_string(env.world_size) + "), found " + std::to_string(world) + ".",
                      hint);
  }
}

void apply_init_method(const std::string& init_method, DistEnv& env) {
  const std::string prefix = "tcp://";
  const char* hint = "pass --init-method tcp://HOST:PORT with the host of rank 0 and a free port, e.g. "
                     "tcp://$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1):29500, or leave it "
                     "out to use MASTER_ADDR/MASTER_PORT or the derived ones.";
  if (init_method.rfind(prefix, 0) != 0) {
    throw ConfigError("--init-method '" + init_method + "': expected tcp://HOST:PORT, found " +
                          (init_method.rfind("env://", 0) == 0 ? std::string("env:// (use MASTER_ADDR/MASTER_PORT, "
                                                                            "or leave --init-method out)")
                                                                : std::string("another form")) + ".",
                      hint);
  }
  const std::string rest = init_method.substr(prefix.size());
  const std::size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size()) {
    throw ConfigError("--init-method '" + init_method + "': expected tcp://HOST:PORT, found no host or no port.", hint);
  }
  std::string host = rest.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  env.master_addr = parse_addr("--init-method host", host);
  env.master_port = parse_port("--init-method port", rest.substr(colon + 1));
}

EnvMap current_environment() {
  EnvMap env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string kv(*entry);
    const std::size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));  // first definition wins, like getenv()
  }
  return env;
}

DistEnv resolve_env(const EnvMap& env) { return resolve_env(env, log::hostname()); }

DistEnv resolve_env(const EnvMap& env, const std::string& host) {
  const Vars vars(env);
  DistEnv out;
  out.host = host;
  out.master_port = kDefaultMasterPort;

  const bool has_rank = vars.has("RANK");
  const bool has_world = vars.has("WORLD_SIZE");
  if (has_world && !has_rank && vars.has("SLURM_PROCID")) {
    // The common job-script recipe: export WORLD_SIZE=$((SLURM_NNODES * SLURM_NTASKS_PER_NODE)),
    // then srun. SLURM gives each task its rank; WORLD_SIZE must agree with the step's tasks.
    DistEnv slurm = resolve_slurm(vars, out);
    check_world_size_agrees("WORLD_SIZE", *vars.get("WORLD_SIZE"), slurm);
    return slurm;
  }
  if (has_rank != has_world) {
    const std::string set = has_rank ? "RANK" : "WORLD_SIZE";
    const std::string unset = has_rank ? "WORLD_SIZE" : "RANK";
    throw ConfigError(set + "='" + *vars.get(set) + "': expected " + unset +
                          " to be set with it, found it unset.",
                      kTorchrunHint);
  }
  if (has_rank) return resolve_torchrun(vars, out);
  if (vars.has("SLURM_PROCID")) return resolve_slurm(vars, out);

  out.job_id = job_id_of(vars);
  apply_master_overrides(vars, out);
  return out;
}

std::string to_string(EnvSource source) {
  switch (source) {
    case EnvSource::torchrun: return "torchrun";
    case EnvSource::slurm: return "slurm";
    case EnvSource::single: break;
  }
  return "single";
}

}  // namespace train
