// Which nodes the health check names (health_verdict.h).
#include "health_verdict.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace train::detail {

double median(std::vector<double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::vector<NodeVerdict> judge_nodes(const std::vector<std::string>& node_of_rank,
                                     const std::vector<double>& value_of_rank, double min_fraction) {
  std::vector<NodeVerdict> nodes;
  for (size_t r = 0; r < node_of_rank.size() && r < value_of_rank.size(); ++r) {
    auto it = std::find_if(nodes.begin(), nodes.end(), [&](const NodeVerdict& v) { return v.node == node_of_rank[r]; });
    const double v = std::isfinite(value_of_rank[r]) ? value_of_rank[r] : 0;
    if (it == nodes.end()) {
      nodes.push_back(NodeVerdict{node_of_rank[r], v, 0, false});
    } else {
      it->value = std::min(it->value, v);
    }
  }
  for (NodeVerdict& n : nodes) {
    std::vector<double> others;
    for (const NodeVerdict& o : nodes) {
      if (&o != &n) others.push_back(o.value);
    }
    n.reference = median(others);
    n.bad = !(n.value > 0) || (std::isfinite(n.reference) && n.value < min_fraction * n.reference);
  }
  return nodes;
}

std::string bad_node_list(const std::vector<NodeVerdict>& verdicts) {
  std::string s;
  for (const NodeVerdict& v : verdicts) {
    if (v.bad) s += (s.empty() ? "" : ",") + v.node;
  }
  return s;
}

}  // namespace train::detail
