// Where each rank is (rank_record.h): the records' text in the store and the one-line verdict.
#include "health/rank_record.h"

#include "train/base/text.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <map>
#include <sstream>

namespace train::detail {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::idle: return "idle";
    case Phase::get_batch: return "get_batch";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::bucket_allreduce: return "all-reduce";
    case Phase::optimizer: return "optimizer";
    case Phase::step_end: return "step end (logging, callbacks)";
    case Phase::stop_check: return "stop check";
    case Phase::evaluation: return "evaluation";
    case Phase::checkpoint: return "checkpoint";
    case Phase::epoch_end: return "epoch end";
  }
  return "?";
}

namespace {

const char* kind_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::barrier: return "barrier";
    case CollectiveKind::reduce_scatter: return "reduce-scatter";
    case CollectiveKind::all_gather: return "all-gather";
    default: return "all-reduce";
  }
}

// Where a rank is, leaving out for how long: ranks with the same text are together.
std::string place(const RankPosition& p) {
  const std::string step = "step " + std::to_string(p.step);
  if (p.waiting > 0 && p.phase == Phase::bucket_allreduce) {
    return "all-reduce of bucket " + std::to_string(p.bucket) + " #" + std::to_string(p.waiting) + " (" + step + ")";
  }
  if (p.waiting > 0) {
    return std::string(kind_name(p.kind)) + " #" + std::to_string(p.waiting) + " (" + phase_name(p.phase) + ", " + step +
           ")";
  }
  return std::string(phase_name(p.phase)) + " at " + step;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

std::string encode(const RollCallRecord& r) {
  const double seconds =
      static_cast<double>(RollCallRecord::now_ns() - r.since_ns.load(std::memory_order_relaxed)) / 1e9;
  std::ostringstream s;
  s << int(r.phase.load(std::memory_order_relaxed)) << ' ' << int(r.kind.load(std::memory_order_relaxed)) << ' '
    << r.bucket.load(std::memory_order_relaxed) << ' ' << r.step.load(std::memory_order_relaxed) << ' '
    << r.seq.load(std::memory_order_relaxed) << ' ' << r.waiting.load(std::memory_order_relaxed) << ' ' << seconds;
  return s.str();
}

std::optional<RankPosition> decode(int rank, const std::string& text) {
  std::istringstream s(text);
  int phase = 0, kind = 0;
  RankPosition p;
  p.rank = rank;
  if (!(s >> phase >> kind >> p.bucket >> p.step >> p.seq >> p.waiting >> p.seconds)) return std::nullopt;
  if (phase < 0 || phase > static_cast<int>(Phase::epoch_end) || kind < 0 || kind > static_cast<int>(CollectiveKind::all_gather)) return std::nullopt;
  p.phase = static_cast<Phase>(phase);
  p.kind = static_cast<CollectiveKind>(kind);
  return p;
}

namespace {

// " on NODE[,NODE...]" for `ranks` (their distinct nodes, in rank order), "" without hosts.
std::string on_nodes(const std::vector<int>& ranks, const std::vector<std::string>& hosts) {
  std::vector<std::string> nodes;
  for (int r : ranks) {
    if (r < 0 || static_cast<size_t>(r) >= hosts.size() || hosts[static_cast<size_t>(r)].empty()) continue;
    if (std::find(nodes.begin(), nodes.end(), hosts[static_cast<size_t>(r)]) == nodes.end()) {
      nodes.push_back(hosts[static_cast<size_t>(r)]);
    }
  }
  return nodes.empty() ? "" : " on " + text::join(nodes, ",");
}

}  // namespace

std::string format_roll_call(const std::vector<std::optional<RankPosition>>& positions,
                             const std::vector<std::string>& hosts) {
  std::map<std::string, std::vector<int>> groups;
  std::map<std::string, double> longest;
  std::vector<int> missing;
  for (size_t r = 0; r < positions.size(); ++r) {
    if (!positions[r]) {
      missing.push_back(static_cast<int>(r));
      continue;
    }
    const std::string where = place(*positions[r]);
    groups[where].push_back(static_cast<int>(r));
    longest[where] = std::max(longest[where], positions[r]->seconds);
  }
  std::vector<std::pair<std::string, std::vector<int>>> order(groups.begin(), groups.end());
  // The largest group first (where the healthy ranks wait), then the odd ones out by rank.
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    if (a.second.size() != b.second.size()) return a.second.size() > b.second.size();
    return a.second.front() < b.second.front();
  });
  std::string line;
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& [where, ranks] = order[i];
    if (order.size() == 1 && missing.empty() && ranks.size() > 1) {
      line = "every rank in " + where;
    } else {
      line += (line.empty() ? "" : "; ") + rank_list(ranks) + (i > 0 ? on_nodes(ranks, hosts) : "") + " in " + where;
    }
    if (i > 0 || order.size() == 1) line += " for " + text::format("%.0f", longest[where]) + " s";
  }
  if (!missing.empty()) {
    line += (line.empty() ? "" : "; ") + rank_list(missing) + on_nodes(missing, hosts) +
            ": no record (not started, or frozen)";
  }
  return line;
}

std::string read_roll_call(c10d::Store* store, int rank, int world, const RollCallRecord& own) {
  if (store == nullptr || world <= 1) return "";
  try {
    c10::intrusive_ptr<c10d::Store> s = store->clone();
    s->setTimeout(std::chrono::seconds(5));
    std::vector<std::optional<RankPosition>> positions(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      const std::string key = "rollcall/" + std::to_string(r);
      if (r == rank) {
        positions[static_cast<size_t>(r)] = decode(r, encode(own));  // ours, fresh
      } else if (s->check({key})) {
        const auto v = s->get(key);
        positions[static_cast<size_t>(r)] = decode(r, std::string(v.begin(), v.end()));
      }
    }
    // Each rank's node ("host/<rank>": "node2 (pid 123)", the process group's heartbeat).
    std::vector<std::string> hosts(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      const std::string key = "host/" + std::to_string(r);
      if (!s->check({key})) continue;
      const auto v = s->get(key);
      const std::string h(v.begin(), v.end());
      hosts[static_cast<size_t>(r)] = h.substr(0, h.find(' '));
    }
    return format_roll_call(positions, hosts);
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace train::detail
