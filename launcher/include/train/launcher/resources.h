// `trainctl resources`: what a cluster has (partitions, nodes, CPUs, memory, GPU types and counts,
// shards free and in use, time limits) from sinfo and `scontrol show node`, and where a job of a
// given shape could start soonest (sbatch --test-only). No LibTorch. See docs/workflow.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/launcher/gres.h"
#include "train/launcher/sbatch.h"

namespace train {

/// One node as `scontrol show node -o` describes it.
struct NodeInfo {
  std::string name;
  std::vector<std::string> partitions;
  std::string state;                ///< State, lower case without flags' '+' parts: idle, mixed, allocated, down, ...
  int cpus = 0;                     ///< CPUTot
  int cpus_alloc = 0;               ///< CPUAlloc
  std::int64_t memory_mb = 0;       ///< RealMemory
  std::int64_t memory_alloc_mb = 0; ///< AllocMem
  std::vector<GresItem> gres;       ///< Gres
  std::vector<GresItem> gres_used;  ///< GresUsed
};

/// The nodes in `scontrol show node -o` output.
std::vector<NodeInfo> parse_scontrol_nodes(const std::string& text);

/// GPUs (or shards) of one type across nodes.
struct GresSummary {
  std::string name;  ///< gpu or shard
  std::string type;  ///< "" when untyped
  std::int64_t total = 0;
  std::int64_t used = 0;
  int nodes = 0;     ///< nodes that have it
};

/// GPUs and shards per type over the nodes, sorted by name then type.
std::vector<GresSummary> summarize_gres(const std::vector<NodeInfo>& nodes);

/// What a cluster has.
struct ClusterResources {
  std::vector<PartitionInfo> partitions;
  std::vector<NodeInfo> nodes;
};

/// Asks sinfo (partitions) and scontrol (nodes), 15 s at most each.
/// @throws train::ConfigError when they are missing or fail.
ClusterResources query_resources();

/// The report `trainctl resources` prints: partitions, nodes, GPU and shard totals.
std::string render_resources(const ClusterResources& resources);

/// The same as JSON (for scripts and tests).
std::string render_resources_json(const ClusterResources& resources);

/// Where a job of one shape could start, per partition.
struct StartEstimate {
  std::string partition;
  bool fits = false;        ///< sbatch --test-only accepted it
  std::string start_time;   ///< when it would start
  std::string nodes;        ///< on which nodes
  std::string message;      ///< why it doesn't fit (sbatch's or trainctl's words)
};

/// Asks `sbatch --test-only` about a job of this shape in each partition that is up (or only in
/// --partition), with the shape checked against the partition first.
std::vector<StartEstimate> estimate_starts(const SbatchOptions& shape, const SbatchPlan& plan,
                                           const std::vector<PartitionInfo>& partitions);

/// The lines that point out the soonest start among the estimates.
std::string render_estimates(const SbatchPlan& plan, const std::vector<StartEstimate>& estimates);

}  // namespace train
