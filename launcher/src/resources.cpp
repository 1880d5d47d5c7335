// `trainctl resources`: sinfo's partitions and `scontrol show node -o`'s nodes (CPUs, memory, Gres
// and GresUsed), summed per GPU type, and `sbatch --test-only` per partition for a job's shape.
#include "train/launcher/resources.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "train/base/error.h"
#include "train/base/text.h"
#include "train/base/env.h"
#include "train/launcher/jobs.h"
#include "train/launcher/local_launch.h"
#include "train/base/subprocess.h"

namespace train {
namespace {

using text::split;

/// Seconds sinfo and scontrol get (an unreachable controller makes them retry for about 10 s).
constexpr double kQueryTimeoutSeconds = 15;

std::int64_t number_of(const std::string& s) {
  std::size_t end = 0;
  while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end])) != 0) ++end;
  if (end == 0 || end > 18) return 0;
  return std::stoll(s.substr(0, end));
}

std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = "  ";
    for (std::size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string time_text(std::int64_t seconds) {
  if (seconds == kTimeUnlimited) return "infinite";
  const std::int64_t d = seconds / 86400, h = seconds / 3600 % 24, m = seconds / 60 % 60, s = seconds % 60;
  char buf[64];
  if (d > 0) {
    std::snprintf(buf, sizeof(buf), "%lld-%02lld:%02lld:%02lld", static_cast<long long>(d), static_cast<long long>(h),
                  static_cast<long long>(m), static_cast<long long>(s));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(h), static_cast<long long>(m),
                  static_cast<long long>(s));
  }
  return buf;
}

CommandResult run_query(const std::vector<std::string>& argv) {
  try {
    find_program(argv.front(), current_environment());
  } catch (const ConfigError&) {
    throw ConfigError(argv.front() + ": expected SLURM's " + argv.front() + " on PATH, found none.",
                      "run trainctl resources on the cluster's login node.");
  }
  CommandResult r = run_command(argv, "", kQueryTimeoutSeconds);
  if (r.timed_out || !r.started || r.exit_code != 0) {
    const std::string cmd = text::join(argv, " ");
    std::string why = r.timed_out ? "no answer within " + std::to_string(int(kQueryTimeoutSeconds)) + " s"
                                  : "exit code " + std::to_string(r.exit_code) + ": " + r.err;
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    throw ConfigError(cmd + ": expected the cluster's answer, found " + why + ".",
                      "check that the controller answers (scontrol ping) and that SLURM_CONF names this cluster.");
  }
  return r;
}

std::string gres_cell(std::int64_t used, std::int64_t total) {
  if (total == 0) return "-";
  return std::to_string(used) + "/" + std::to_string(total);
}

}  // namespace

std::vector<NodeInfo> parse_scontrol_nodes(const std::string& text) {
  std::vector<NodeInfo> nodes;
  for (const KeyValues& kv : parse_key_value_lines(text)) {
    const auto get = [&](const std::string& key) {
      const auto it = kv.find(key);
      return it == kv.end() || it->second == "(null)" ? std::string() : it->second;
    };
    if (get("NodeName").empty()) continue;
    NodeInfo n;
    n.name = get("NodeName");
    for (const std::string& p : split(get("Partitions"), ',')) {
      if (!p.empty()) n.partitions.push_back(p);
    }
    std::string state = get("State");
    for (char& c : state) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    n.state = state;
    n.cpus = static_cast<int>(number_of(get("CPUTot")));
    n.cpus_alloc = static_cast<int>(number_of(get("CPUAlloc")));
    n.memory_mb = number_of(get("RealMemory"));
    n.memory_alloc_mb = number_of(get("AllocMem"));
    n.gres = parse_gres_items(get("Gres"));
    n.gres_used = parse_gres_items(get("GresUsed"));
    nodes.push_back(std::move(n));
  }
  return nodes;
}

std::vector<GresSummary> summarize_gres(const std::vector<NodeInfo>& nodes) {
  std::map<std::pair<std::string, std::string>, GresSummary> by_type;
  for (const NodeInfo& n : nodes) {
    for (const GresItem& g : n.gres) {
      if (g.name != "gpu" && g.name != "shard") continue;
      GresSummary& s = by_type[{g.name, g.type}];
      s.name = g.name;
      s.type = g.type;
      s.total += g.count;
      s.nodes += 1;
      for (const GresItem& u : n.gres_used) {
        // Used items of an untyped request may carry no type; count them against the only type there is.
        if (u.name == g.name && (u.type == g.type || u.type.empty())) s.used += u.count;
      }
    }
  }
  std::vector<GresSummary> out;
  for (auto& [key, s] : by_type) {
    s.used = std::min(s.used, s.total);
    out.push_back(s);
  }
  return out;
}

ClusterResources query_resources() {
  ClusterResources r;
  r.partitions = parse_sinfo_partitions(run_query({"sinfo", "-h", "-o", kSinfoPartitionFormat}).out);
  r.nodes = parse_scontrol_nodes(run_query({"scontrol", "show", "node", "-o"}).out);
  if (r.partitions.empty()) {
    throw ConfigError("sinfo: expected at least one partition, found none.",
                      "the cluster has no partitions configured, or SLURM_CONF names another cluster.");
  }
  return r;
}

std::string render_resources(const ClusterResources& res) {
  std::string out = "Partitions (sinfo):\n";
  std::vector<std::vector<std::string>> rows = {
      {"PARTITION", "AVAIL", "NODES", "CPUS/NODE", "MEMORY/NODE", "GPUS/NODE", "SHARDS/NODE", "TIMELIMIT"}};
  for (const PartitionInfo& p : res.partitions) {
    std::int64_t gpus = 0, shards = 0;
    for (const std::string& g : p.gres) {
      const std::vector<GresItem> items = parse_gres_items(g);
      gpus = std::max(gpus, gres_total(items, "gpu"));
      shards = std::max(shards, gres_total(items, "shard"));
    }
    rows.push_back({p.name + (p.is_default ? "*" : ""), p.availability, std::to_string(p.nodes),
                    std::to_string(p.max_cpus_per_node), std::to_string(p.max_memory_mb) + " MB",
                    gpus > 0 ? std::to_string(gpus) : "-", shards > 0 ? std::to_string(shards) : "-",
                    time_text(p.max_time_seconds)});
  }
  out += table(rows);
  out += "\nNodes (scontrol show node):\n";
  rows = {{"NODE", "PARTITIONS", "STATE", "CPUS(USED/TOTAL)", "MEMORY(USED/TOTAL)", "GPUS(USED/TOTAL)",
           "SHARDS(USED/TOTAL)", "GRES"}};
  for (const NodeInfo& n : res.nodes) {
    std::string parts;
    for (const std::string& p : n.partitions) parts += (parts.empty() ? "" : ",") + p;
    std::string types;
    for (const GresItem& g : n.gres) {
      types += (types.empty() ? "" : ",") + g.name + (g.type.empty() ? "" : ":" + g.type) + ":" + std::to_string(g.count);
    }
    rows.push_back({n.name, parts.empty() ? "-" : parts, n.state,
                    std::to_string(n.cpus_alloc) + "/" + std::to_string(n.cpus),
                    std::to_string(n.memory_alloc_mb) + "/" + std::to_string(n.memory_mb) + " MB",
                    gres_cell(std::min(gres_total(n.gres_used, "gpu"), gres_total(n.gres, "gpu")), gres_total(n.gres, "gpu")),
                    gres_cell(std::min(gres_total(n.gres_used, "shard"), gres_total(n.gres, "shard")),
                              gres_total(n.gres, "shard")),
                    types.empty() ? "-" : types});
  }
  out += table(rows);
  const std::vector<GresSummary> gres = summarize_gres(res.nodes);
  out += "\nGPUs and shards by type:\n";
  if (gres.empty()) {
    out += "  none: no node has gres gpu or shard (jobs train on CPUs with Gloo).\n";
  } else {
    rows = {{"GRES", "TYPE", "TOTAL", "IN USE", "FREE", "NODES"}};
    for (const GresSummary& g : gres) {
      rows.push_back({g.name, g.type.empty() ? "-" : g.type, std::to_string(g.total), std::to_string(g.used),
                      std::to_string(g.total - g.used), std::to_string(g.nodes)});
    }
    out += table(rows);
  }
  return out;
}

std::string render_resources_json(const ClusterResources& res) {
  nlohmann::ordered_json j;
  j["partitions"] = nlohmann::ordered_json::array();
  for (const PartitionInfo& p : res.partitions) {
    nlohmann::ordered_json gres = nlohmann::ordered_json::array();
    for (const std::string& g : p.gres) gres.push_back(g);
    j["partitions"].push_back({{"name", p.name},
                               {"default", p.is_default},
                               {"availability", p.availability},
                               {"nodes", p.nodes},
                               {"cpus_per_node", p.max_cpus_per_node},
                               {"memory_mb_per_node", p.max_memory_mb},
                               {"gres", gres},
                               {"max_time_seconds", p.max_time_seconds == kTimeUnlimited
                                                        ? nlohmann::ordered_json(nullptr)
                                                        : nlohmann::ordered_json(p.max_time_seconds)}});
  }
  const auto items_json = [](const std::vector<GresItem>& items) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const GresItem& g : items) a.push_back({{"name", g.name}, {"type", g.type}, {"count", g.count}});
    return a;
  };
  j["nodes"] = nlohmann::ordered_json::array();
  for (const NodeInfo& n : res.nodes) {
    j["nodes"].push_back({{"name", n.name},
                          {"partitions", n.partitions},
                          {"state", n.state},
                          {"cpus", n.cpus},
                          {"cpus_alloc", n.cpus_alloc},
                          {"memory_mb", n.memory_mb},
                          {"memory_alloc_mb", n.memory_alloc_mb},
                          {"gres", items_json(n.gres)},
                          {"gres_used", items_json(n.gres_used)}});
  }
  j["gres"] = nlohmann::ordered_json::array();
  for (const GresSummary& g : summarize_gres(res.nodes)) {
    j["gres"].push_back({{"name", g.name}, {"type", g.type}, {"total", g.total}, {"used", g.used},
                         {"free", g.total - g.used}, {"nodes", g.nodes}});
  }
  return j.dump(2) + "\n";
}

std::vector<StartEstimate> estimate_starts(const SbatchOptions& shape, const SbatchPlan& plan,
                                           const std::vector<PartitionInfo>& partitions) {
  std::vector<StartEstimate> out;
  for (const PartitionInfo& p : partitions) {
    if (!shape.partition.empty() && p.name != shape.partition) continue;
    StartEstimate e;
    e.partition = p.name;
    if (p.availability != "up") {
      e.message = "partition is " + p.availability;
      out.push_back(e);
      continue;
    }
    SbatchOptions o = shape;
    o.partition = p.name;
    try {
      check_against_partitions(o, plan, partitions);
      const TestOnlyResult r = sbatch_test_only(render_sbatch_script(o, plan));
      e.fits = true;
      e.start_time = r.start_time;
      e.nodes = r.nodes;
    } catch (const ConfigError& err) {
      e.message = err.message();
    }
    out.push_back(e);
  }
  if (out.empty() && !shape.partition.empty()) {
    throw ConfigError("--partition " + shape.partition + ": expected one of this cluster's partitions, found no such "
                          "partition (sinfo).",
                      "drop --partition to see every partition, or pick one that trainctl resources lists.");
  }
  return out;
}

std::string render_estimates(const SbatchPlan& plan, const std::vector<StartEstimate>& estimates) {
  std::string shape = std::to_string(plan.nodes) + " node(s) x " + std::to_string(plan.tasks_per_node) + " task(s)";
  if (plan.cpus_per_task > 0) shape += " x " + std::to_string(plan.cpus_per_task) + " CPUs";
  if (plan.gpus_per_node > 0) shape += ", " + plan.gpu_request;
  if (plan.time_seconds > 0) shape += ", time " + time_text(plan.time_seconds);
  std::string out = "\nWhere a job of " + shape + " could start (sbatch --test-only):\n";
  std::vector<std::vector<std::string>> rows = {{"PARTITION", "START", "NODES", "NOTE"}};
  const StartEstimate* best = nullptr;
  for (const StartEstimate& e : estimates) {
    if (e.fits && (best == nullptr || e.start_time < best->start_time)) best = &e;
  }
  for (const StartEstimate& e : estimates) {
    rows.push_back({e.partition, e.fits ? e.start_time : "-", e.fits ? e.nodes : "-",
                    e.fits ? (&e == best ? "soonest" : "") : "does not fit: " + e.message});
  }
  out += table(rows);
  if (best != nullptr) {
    out += "Soonest: partition " + best->partition + " at " + best->start_time + " on " + best->nodes + ".\n";
  } else {
    out += "No partition can run this shape now. Hint: ask for fewer nodes, tasks, CPUs, memory or GPUs, or a shorter "
           "--time.\n";
  }
  return out;
}

}  // namespace train
