// Private: which nodes the health check names, apart from the measuring so a
// unit test can check it. No LibTorch.
//
// The rule: a node is bad when its value (its slowest rank's measurement: the GEMM throughput, the
// all-reduce bus bandwidth among its own ranks) is below
// `min_fraction` x the median of the OTHER nodes' values. Leaving the node itself out keeps one
// slow node of two named (against the other node alone), and a slow node cannot drag its own
// reference down. A job of one node has nothing to compare with: nothing is named. Each measure is
// judged on its own; a node is named when any of its measures fails.
#pragma once

#include <string>
#include <vector>

namespace train::detail {

/// The median of `values` (the mean of the middle two for an even count); NaN when empty.
double median(std::vector<double> values);

struct NodeVerdict {
  std::string node;
  double value = 0;      ///< the node's measurement (the minimum over its ranks)
  double reference = 0;  ///< the median of the other nodes' values (NaN for a job of one node)
  bool bad = false;
};

/// Per-rank measurements grouped by node name (in order of first appearance), each node judged.
/// `node_of_rank` and `value_of_rank` have one entry per rank. A non-finite or non-positive
/// value (a failed measurement) makes its node bad.
std::vector<NodeVerdict> judge_nodes(const std::vector<std::string>& node_of_rank,
                                     const std::vector<double>& value_of_rank, double min_fraction);

/// The names of the bad nodes, comma separated ("" when none).
std::string bad_node_list(const std::vector<NodeVerdict>& verdicts);

/// The ranks of each node, the nodes in order of first appearance in `node_of_rank` (so each
/// node's list is ascending, and the first node's starts with rank 0).
std::vector<std::vector<int>> ranks_by_node(const std::vector<std::string>& node_of_rank);

/// One measure's verdicts: `measure` says what was measured, in words ("GEMM throughput").
struct MeasureVerdicts {
  std::string measure;
  std::vector<NodeVerdict> nodes;
};

/// The nodes bad in any measure, each once, comma separated, in order of first appearance.
std::string bad_node_list(const std::vector<MeasureVerdicts>& measures);

/// Which measure failed where, e.g. "node(s) node2: GEMM throughput below 0.5 x the median of the
/// other nodes'; node(s) node1: within-node all-reduce bus bandwidth below 0.5 x ..." ("" when no
/// node is bad).
std::string failed_measures(const std::vector<MeasureVerdicts>& measures, double min_fraction);

}  // namespace train::detail
