// Which nodes the health check names (health_verdict.h).
#include "health/health_verdict.h"

#include "train/base/text.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

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

std::vector<std::vector<int>> ranks_by_node(const std::vector<std::string>& node_of_rank) {
  std::vector<std::string> names;
  std::vector<std::vector<int>> ranks;
  for (size_t r = 0; r < node_of_rank.size(); ++r) {
    const auto it = std::find(names.begin(), names.end(), node_of_rank[r]);
    if (it == names.end()) {
      names.push_back(node_of_rank[r]);
      ranks.push_back({static_cast<int>(r)});
    } else {
      ranks[static_cast<size_t>(it - names.begin())].push_back(static_cast<int>(r));
    }
  }
  return ranks;
}

std::string bad_node_list(const std::vector<MeasureVerdicts>& measures) {
  std::vector<std::string> bad;
  for (const MeasureVerdicts& m : measures) {
    for (const NodeVerdict& v : m.nodes) {
      if (v.bad && std::find(bad.begin(), bad.end(), v.node) == bad.end()) bad.push_back(v.node);
    }
  }
  return text::join(bad, ",");
}

std::string failed_measures(const std::vector<MeasureVerdicts>& measures, double min_fraction) {
  std::ostringstream fraction;
  fraction << min_fraction;  // as %g prints it
  std::string s;
  for (const MeasureVerdicts& m : measures) {
    const std::string bad = bad_node_list(m.nodes);
    if (bad.empty()) continue;
    s += (s.empty() ? "" : "; ") + std::string("node(s) ") + bad + ": " + m.measure + " below " + fraction.str() +
         " x the median of the other nodes'";
  }
  return s;
}

}  // namespace train::detail
