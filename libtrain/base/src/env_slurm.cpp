// The distributed environment from SLURM's variables (SLURM_PROCID & co.): node list and counts,
// tasks per node, the checks that the task was started by srun, the derived rendezvous port.
#include <cstdint>
#include <string>
#include <vector>

#include "env_vars.h"
#include "train/base/error.h"
#include "train/base/env.h"
#include "train/base/hostlist.h"

namespace train {
using namespace detail;

namespace {

/// SLURM's step id of the batch script (SLURM_BATCH_SCRIPT), in case a version exports it there.
constexpr char kBatchStepId[] = "4294967294";
/// Job ids that differ by less than this never share a derived port.
constexpr std::uint64_t kPortJobWindow = 2500;
/// Steps of one job that get distinct derived ports.
constexpr std::uint64_t kPortStepSlots = 16;
static_assert(kPortJobWindow * kPortStepSlots == static_cast<std::uint64_t>(kSlurmPortSpan),
              "derived ports must exactly fill the span");

/// Expands tasks-per-node notation and checks it covers exactly `num_nodes` nodes.
std::vector<int> tasks_per_node_for(const std::string& name, const std::string& value, int num_nodes,
                                    const std::string& nodes_from) {
  std::vector<int> counts = parse_tasks_per_node(name, value);
  if (static_cast<int>(counts.size()) != num_nodes) {
    throw ConfigError(name + "='" + value + "': expected task counts for " + std::to_string(num_nodes) +
                          " nodes (" + nodes_from + "), found " + std::to_string(counts.size()) + ".",
                      kSlurmHint);
  }
  return counts;
}

/// What SLURM says about the step's nodes and tasks, with the variable each number came from, as
/// resolve_slurm()'s helpers read it in turn.
struct SlurmLayout {
  std::string list_var;                 ///< the node list variable read; "" when none is set
  Sourced nodes;                        ///< nodes in the step
  std::string tpn_var;                  ///< the tasks-per-node variable read; "" when none is set
  std::vector<int> tasks_per_node;      ///< from tpn_var, one count per node; empty when unset
  std::vector<int> requested_per_node;  ///< SLURM_NTASKS_PER_NODE for every node; empty when unset
};

std::int64_t sum_counts(const std::vector<int>& counts) {
  std::int64_t total = 0;
  for (const int c : counts) total += c;
  return total;
}

/// Node list and node count: a step (srun) has its own, possibly smaller than the job's.
void read_slurm_nodes(const Vars& vars, DistEnv& out, SlurmLayout& layout) {
  layout.list_var = vars.first_set({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  const std::string& list_var = layout.list_var;
  if (!list_var.empty()) {
    try {
      out.nodes = hostlist_expand(*vars.get(list_var));
    } catch (const ConfigError& e) {
      throw ConfigError(list_var + ": " + e.message(), e.hint());
    }
  }
  const std::string count_var =
      vars.first_set({"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"});
  Sourced nodes;
  if (!count_var.empty()) {
    nodes = get_int(vars, count_var, 1, kSlurmHint);
    if (!out.nodes.empty() && static_cast<int>(out.nodes.size()) != nodes.value) {
      throw ConfigError(nodes.from + ": expected the number of hosts in " + list_var + "='" +
                            *vars.get(list_var) + "' (" + std::to_string(out.nodes.size()) +
                            "), found " + std::to_string(nodes.value) + ".",
                        std::string("step-level (SLURM_STEP_*) and job-level variables seem mixed. ") +
                            kSlurmHint);
    }
  } else if (!out.nodes.empty()) {
    nodes = {static_cast<int>(out.nodes.size()), "the hosts in " + list_var};
  } else {
    nodes = {1, "no SLURM node count or node list set"};
  }
  out.num_nodes = nodes.value;
  layout.nodes = nodes;
}

/// Tasks on each node, when SLURM says so, and --ntasks-per-node as requested: one count for every
/// node (or, rarely, a per-node list).
void read_slurm_tasks_per_node(const Vars& vars, SlurmLayout& layout) {
  const Sourced& nodes = layout.nodes;
  layout.tpn_var = vars.first_set({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  if (!layout.tpn_var.empty()) {
    layout.tasks_per_node = tasks_per_node_for(layout.tpn_var, *vars.get(layout.tpn_var), nodes.value, nodes.from);
  }
  if (vars.has("SLURM_NTASKS_PER_NODE")) {
    const std::string& value = *vars.get("SLURM_NTASKS_PER_NODE");
    std::vector<int> requested = parse_tasks_per_node("SLURM_NTASKS_PER_NODE", value);
    if (requested.size() == 1) {
      requested.assign(static_cast<std::size_t>(nodes.value), requested[0]);
    } else {
      requested = tasks_per_node_for("SLURM_NTASKS_PER_NODE", value, nodes.value, nodes.from);
    }
    layout.requested_per_node = requested;
  }
}

/// World size: the step's task count, the job's, or what the per-node counts add up to.
Sourced slurm_world(const Vars& vars, const SlurmLayout& layout) {
  const std::string& tpn_var = layout.tpn_var;
  const std::string world_var = vars.first_set({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"});
  Sourced world;
  if (!world_var.empty()) {
    world = get_int(vars, world_var, 1, kSlurmHint);
  } else if (!layout.tasks_per_node.empty()) {
    world = {static_cast<int>(sum_counts(layout.tasks_per_node)), tpn_var + "=" + *vars.get(tpn_var)};
  } else if (!layout.requested_per_node.empty()) {
    world = {static_cast<int>(sum_counts(layout.requested_per_node)),
             "SLURM_NTASKS_PER_NODE=" + *vars.get("SLURM_NTASKS_PER_NODE") + " x " + layout.nodes.from};
  } else {
    throw ConfigError(
        "SLURM_PROCID=" + *vars.get("SLURM_PROCID") +
            ": expected the number of tasks in SLURM_STEP_NUM_TASKS, SLURM_NTASKS, "
            "SLURM_TASKS_PER_NODE or SLURM_NTASKS_PER_NODE, found none of them set.",
        kSlurmHint);
  }
  if (!layout.tasks_per_node.empty() && sum_counts(layout.tasks_per_node) != world.value) {
    throw ConfigError(world.from + ": expected the sum of " + tpn_var + "='" + *vars.get(tpn_var) + "' (" +
                          std::to_string(sum_counts(layout.tasks_per_node)) + " tasks), found " +
                          std::to_string(world.value) + ".",
                      std::string("step-level (SLURM_STEP_*) and job-level variables seem mixed. ") +
                          kSlurmHint);
  }
  return world;
}

/// The batch script also has SLURM_PROCID=0 but runs once per job, not once per task: started
/// there, rank 0 of a multi-task job would wait for ranks that never start. Tasks that srun
/// starts always carry a step id (`step_var` names the step id variable set, "" for none).
void check_started_by_srun(const Vars& vars, const std::string& step_var, const std::string& job_id,
                           const Sourced& world) {
  const bool in_step = (!step_var.empty() && *vars.get(step_var) != kBatchStepId) ||
                       vars.has("SLURM_STEP_NUM_TASKS");
  if (!in_step && world.value > 1) {
    throw ConfigError(
        "SLURM_PROCID=" + *vars.get("SLURM_PROCID") + " without a step id (SLURM_STEP_ID): expected a task "
            "started by srun, found what looks like the batch script of job " +
            (job_id.empty() ? std::string("?") : job_id) + ", which runs once while the job has " +
            std::to_string(world.value) + " tasks (" + world.from + "), so rank 0 would wait for peers that "
            "never start.",
        "start the program with srun in the batch script (srun ./train ...), or use `trainctl local "
        "--nproc N -- ./train ...` for one node. If you set SLURM_* variables by hand, also set "
        "SLURM_STEP_ID.");
  }
}

/// This node's index in the step: SLURM_NODEID, or this host's place in the node list.
Sourced slurm_node_rank(const Vars& vars, const DistEnv& out, const SlurmLayout& layout) {
  const Sourced& nodes = layout.nodes;
  Sourced node_rank;
  if (vars.has("SLURM_NODEID")) {
    node_rank = get_int(vars, "SLURM_NODEID", 0, kSlurmHint);
  } else if (nodes.value == 1) {
    node_rank = {0, "a single node (SLURM_NODEID unset)"};
  } else {
    int found = -1;
    for (std::size_t i = 0; i < out.nodes.size() && found < 0; ++i) {
      if (out.nodes[i] == out.host) found = static_cast<int>(i);
    }
    if (found < 0) {
      throw ConfigError("SLURM_NODEID: expected this node's index among " + std::to_string(nodes.value) +
                            " nodes, found it unset and host '" + out.host + "' not in " +
                            (layout.list_var.empty() ? std::string("any SLURM node list") : layout.list_var) +
                            ".",
                        kSlurmHint);
    }
    node_rank = {found, "the position of host '" + out.host + "' in " + layout.list_var};
  }
  if (node_rank.value >= nodes.value) {  // checked here already: it indexes the per-node counts
    throw ConfigError(node_rank.from + ": expected a node index below the number of nodes " +
                          std::to_string(nodes.value) + " (" + nodes.from + "), found " +
                          std::to_string(node_rank.value) + ".",
                      kSlurmHint);
  }
  return node_rank;
}

/// Tasks on this node: its per-node count, or the world split evenly over the nodes.
Sourced slurm_local_world(const Vars& vars, const SlurmLayout& layout, const Sourced& world,
                          const Sourced& node_rank) {
  const Sourced& nodes = layout.nodes;
  if (!layout.tasks_per_node.empty()) {
    return {layout.tasks_per_node[static_cast<std::size_t>(node_rank.value)],
            layout.tpn_var + "='" + *vars.get(layout.tpn_var) + "' for node " + std::to_string(node_rank.value)};
  }
  if (!layout.requested_per_node.empty()) {
    return {layout.requested_per_node[static_cast<std::size_t>(node_rank.value)],
            "SLURM_NTASKS_PER_NODE=" + *vars.get("SLURM_NTASKS_PER_NODE")};
  }
  if (world.value % nodes.value == 0) return {world.value / nodes.value, world.from + " / " + nodes.from};
  throw ConfigError("SLURM_TASKS_PER_NODE: expected the tasks on each node, found it unset and " +
                        world.from + " not divisible by " + nodes.from + ".",
                    kSlurmHint);
}

/// This task's index on its node: SLURM_LOCALID, needed unless the node runs a single task.
Sourced slurm_local_rank(const Vars& vars, const Sourced& local_world) {
  if (vars.has("SLURM_LOCALID")) return get_int(vars, "SLURM_LOCALID", 0, kSlurmHint);
  if (local_world.value == 1) return {0, "one task on this node (SLURM_LOCALID unset)"};
  throw ConfigError("SLURM_LOCALID: expected this task's index on its node (" +
                        std::to_string(local_world.value) + " tasks, " + local_world.from +
                        "), found it unset.",
                    kSlurmHint);
}

/// Rendezvous: the first host of the step, on a port derived from the job and step ids, unless
/// MASTER_ADDR / MASTER_PORT override them.
void set_slurm_rendezvous(const Vars& vars, const std::string& step_var, DistEnv& out) {
  if (!out.nodes.empty()) {
    out.master_addr = out.nodes.front();
  } else if (out.num_nodes > 1 && !vars.has("MASTER_ADDR")) {
    throw ConfigError("MASTER_ADDR: expected it set, or a SLURM node list to take the first host from, "
                      "for a job across " + std::to_string(out.num_nodes) + " nodes; found neither.",
                      "SLURM sets SLURM_JOB_NODELIST in every job; otherwise export MASTER_ADDR=<host "
                      "of rank 0>.");
  }
  if (!vars.has("MASTER_PORT") && !out.job_id.empty()) {
    const std::string job_var = vars.has("SLURM_JOB_ID") ? "SLURM_JOB_ID" : "SLURM_JOBID";
    parse_u64(job_var, out.job_id, kSlurmHint);
    out.master_port = slurm_master_port(out.job_id, step_var.empty() ? "" : *vars.get(step_var));
  }
  apply_master_overrides(vars, out);
}

}  // namespace

namespace detail {

DistEnv resolve_slurm(const Vars& vars, DistEnv out) {
  out.source = EnvSource::slurm;
  out.job_id = job_id_of(vars);
  // The node's SLURM name, as srun's messages and scontrol name it: a node's hostname may differ
  // (several slurmd on one host, or a host name that isn't the NodeName).
  if (vars.has("SLURMD_NODENAME") && !vars.get("SLURMD_NODENAME")->empty()) out.host = *vars.get("SLURMD_NODENAME");
  const Sourced rank = get_int(vars, "SLURM_PROCID", 0, kSlurmHint);
  out.rank = rank.value;

  SlurmLayout layout;
  read_slurm_nodes(vars, out, layout);
  read_slurm_tasks_per_node(vars, layout);
  const Sourced world = slurm_world(vars, layout);
  out.world_size = world.value;

  const std::string step_var = vars.first_set({"SLURM_STEP_ID", "SLURM_STEPID"});
  check_started_by_srun(vars, step_var, out.job_id, world);

  const Sourced node_rank = slurm_node_rank(vars, out, layout);
  out.node_rank = node_rank.value;
  const Sourced local_world = slurm_local_world(vars, layout, world, node_rank);
  out.local_world_size = local_world.value;
  const Sourced local_rank = slurm_local_rank(vars, local_world);
  out.local_rank = local_rank.value;

  check_layout(out, {rank.from, world.from, local_rank.from, local_world.from, node_rank.from, layout.nodes.from},
               kSlurmHint);
  set_slurm_rendezvous(vars, step_var, out);
  return out;
}

}  // namespace detail

std::vector<int> parse_tasks_per_node(const std::string& name, const std::string& value) {
  const std::string expected = "expected counts like '4' or '2(x3),1'";
  auto fail = [&](const std::string& found) {
    throw ConfigError(name + "='" + value + "': " + expected + ", found " + found + ".", kSlurmHint);
  };
  if (value.empty()) fail("an empty value");
  constexpr std::int64_t kMaxTotal = 1 << 24;  // nodes and tasks: far above any real cluster
  std::vector<int> counts;
  std::size_t pos = 0;
  auto read_number = [&](const char* what) {
    const std::size_t start = pos;
    std::int64_t n = 0;
    while (pos < value.size() && value[pos] >= '0' && value[pos] <= '9') {
      n = n * 10 + (value[pos++] - '0');
      if (n > kMaxTotal) fail(std::string("a ") + what + " above " + std::to_string(kMaxTotal));
    }
    if (pos == start) {
      fail(pos < value.size() ? "'" + std::string(1, value[pos]) + "' where a " + what + " belongs at column " +
                                    std::to_string(pos + 1)
                              : std::string("the end where a ") + what + " belongs");
    }
    if (n == 0) fail(std::string("a ") + what + " of 0 at column " + std::to_string(start + 1));
    return static_cast<int>(n);
  };
  while (true) {
    const int count = read_number("task count");
    int repeat = 1;
    if (value.compare(pos, 2, "(x") == 0) {
      pos += 2;
      repeat = read_number("repeat count");
      if (pos >= value.size() || value[pos] != ')') {
        fail("no ')' closing the repeat at column " + std::to_string(pos + 1));
      }
      ++pos;
    }
    if (static_cast<std::int64_t>(counts.size()) + repeat > kMaxTotal) fail("more than 2^24 nodes");
    counts.insert(counts.end(), static_cast<std::size_t>(repeat), count);
    if (pos == value.size()) break;
    if (value[pos] != ',') {
      fail("'" + std::string(1, value[pos]) + "' at column " + std::to_string(pos + 1) +
           " where ',' or the end belongs");
    }
    ++pos;
  }
  return counts;
}

int slurm_master_port(const std::string& job_id, const std::string& step_id) {
  const std::uint64_t job = parse_u64("SLURM_JOB_ID", job_id, kSlurmHint);
  const std::uint64_t step = step_id.empty() ? 0 : parse_u64("SLURM_STEP_ID", step_id, kSlurmHint);
  return kSlurmPortBase +
         static_cast<int>((job % kPortJobWindow) * kPortStepSlots + step % kPortStepSlots);
}

}  // namespace train
