// Private: issue 24's settings (the network interface, the health check) as the process group
// and the health check read them: the Trainer copies TrainConfig's distributed.interface and
// health section here when it is built. A hand-written loop without a Trainer gets the interface
// from TRAIN_INTERFACE and no health check.
#pragma once

#include <string>

namespace train::detail {

struct NetHealthOptions {
  std::string interface;             ///< --interface / TRAIN_INTERFACE: Gloo, NCCL and the store ("" = their defaults)
  bool health_check = false;         ///< --health-check: GEMM and all-reduce measured before training
  double health_min_fraction = 0.5;  ///< a node whose GEMM is below this fraction of the other nodes' median is bad
  bool health_warn_only = false;     ///< --health-warn-only: name bad nodes but train anyway
  bool exclude_bad_nodes = false;    ///< --exclude-bad-nodes: under SLURM, requeue the job without the bad nodes
};

/// The process's settings (the flags write them once, before training starts).
NetHealthOptions& net_health_options();

/// The interface to use: --interface, else TRAIN_INTERFACE, else "".
std::string chosen_interface();

/// Checks the settings: throws train::ConfigError naming the flag (a missing interface lists the
/// interfaces this host has).
void validate(const NetHealthOptions& options);

/// The fault TRAIN_FAULT_SLOW_NODE=NODE:FACTOR (fault_injection.cpp): FACTOR on node NODE, else 1.
/// The health check's GEMM measurement there takes FACTOR times as long. With `variable`
/// TRAIN_FAULT_SLOW_NODE_NET (kSlowNodeNet), the all-reduce among that node's ranks does. Throws
/// train::ConfigError for a malformed value.
inline constexpr const char* kSlowNodeGemm = "TRAIN_FAULT_SLOW_NODE";
inline constexpr const char* kSlowNodeNet = "TRAIN_FAULT_SLOW_NODE_NET";
double slow_node_factor(const std::string& node, const char* variable = kSlowNodeGemm);

}  // namespace train::detail
