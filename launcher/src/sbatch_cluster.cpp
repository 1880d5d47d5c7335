// `trainctl sbatch`'s conversations with a live cluster: partition limits from sinfo (checked against
// a request before it can wait in the queue for ever), `sbatch --test-only` and submission.
#include "train/launcher/sbatch.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "train/base/error.h"
#include "train/base/text.h"
#include "train/base/env.h"
#include "train/launcher/gres.h"
#include "train/launcher/local_launch.h"
#include "train/base/subprocess.h"

namespace train {
namespace {

using text::trim;

/// Seconds sinfo gets before the cluster counts as unreachable and its checks are skipped (a
/// controller answers in milliseconds; an unreachable one makes sinfo retry for about 10 s).
constexpr double kSinfoTimeoutSeconds = 5;
/// Seconds sbatch gets before it counts as hanging.
constexpr double kSbatchTimeoutSeconds = 60;

/// The leading number of sinfo's fields such as "2", "64+" or "128000"; -1 when there is none.
std::int64_t leading_number(const std::string& text) {
  std::size_t end = 0;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end])) != 0) ++end;
  if (end == 0 || end > 18) return -1;
  return std::stoll(text.substr(0, end));
}

std::string names_of(const std::vector<PartitionInfo>& partitions) {
  std::string out;
  for (const PartitionInfo& p : partitions) out += (out.empty() ? "" : ", ") + p.name + (p.is_default ? " (default)" : "");
  return out;
}

}  // namespace

std::vector<PartitionInfo> parse_sinfo_partitions(const std::string& text) {
  std::vector<PartitionInfo> partitions;
  std::set<std::string> timed;  // partitions whose MaxTime was read
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = trim(text.substr(start, nl - start));
    start = nl + 1;
    std::vector<std::string> f;
    std::size_t from = 0;
    while (true) {
      const std::size_t bar = line.find('|', from);
      f.push_back(trim(line.substr(from, bar == std::string::npos ? std::string::npos : bar - from)));
      if (bar == std::string::npos) break;
      from = bar + 1;
    }
    if (f.size() != 7 || f[0].empty()) continue;
    std::string name = f[0];
    const bool is_default = name.back() == '*';
    if (is_default) name.pop_back();
    auto it = std::find_if(partitions.begin(), partitions.end(), [&](const PartitionInfo& p) { return p.name == name; });
    if (it == partitions.end()) {
      PartitionInfo p;
      p.name = name;
      p.availability = f[1];
      partitions.push_back(p);
      it = partitions.end() - 1;
    }
    PartitionInfo& p = *it;
    p.is_default = p.is_default || is_default;
    p.nodes += static_cast<int>(std::max<std::int64_t>(0, leading_number(f[2])));
    p.max_cpus_per_node = std::max<int>(p.max_cpus_per_node, static_cast<int>(std::max<std::int64_t>(0, leading_number(f[3]))));
    p.max_memory_mb = std::max(p.max_memory_mb, leading_number(f[4]));
    if (f[5] != "(null)" && !f[5].empty()) p.gres.push_back(f[5]);
    if (timed.insert(name).second) {
      // MaxTime belongs to the partition, so every line of it shows the same one.
      const std::string& l = f[6];
      if (l != "infinite" && l != "UNLIMITED" && l != "n/a" && !l.empty()) {
        try {
          p.max_time_seconds = parse_time_limit("MaxTime", l);
        } catch (const Error&) {
          p.max_time_seconds = kTimeUnlimited;
        }
      }
    }
  }
  return partitions;
}

std::optional<std::vector<PartitionInfo>> query_partitions() {
  try {
    find_program("sinfo", current_environment());
  } catch (const ConfigError&) {
    return std::nullopt;  // no SLURM client here: nothing to check against
  }
  const CommandResult r =
      run_command({"sinfo", "-h", "-o", kSinfoPartitionFormat}, "", kSinfoTimeoutSeconds);
  if (!r.started || r.timed_out || r.exit_code != 0) return std::nullopt;
  std::vector<PartitionInfo> partitions = parse_sinfo_partitions(r.out);
  if (partitions.empty()) return std::nullopt;
  return partitions;
}

std::vector<std::string> check_against_partitions(const SbatchOptions& o, const SbatchPlan& plan,
                                                  const std::vector<PartitionInfo>& partitions) {
  std::vector<std::string> warnings;
  const PartitionInfo* part = nullptr;
  for (const PartitionInfo& p : partitions) {
    if (o.partition.empty() ? p.is_default : p.name == o.partition) part = &p;
  }
  if (part == nullptr) {
    if (o.partition.empty()) return warnings;  // no default partition: sbatch will say what it wants
    throw ConfigError("--partition " + o.partition + ": expected one of this cluster's partitions (" +
                          names_of(partitions) + "), found '" + o.partition + "' (sinfo).",
                      "pick one of those, or drop --partition to use the default.");
  }
  const std::string where = "partition " + part->name + (o.partition.empty() ? " (the default)" : "");
  if (part->availability != "up") {
    warnings.push_back(where + " is " + part->availability + " (sinfo): the job will wait until it is up.");
  }
  if (plan.nodes > part->nodes) {
    throw ConfigError("--nodes " + std::to_string(plan.nodes) + ": expected at most the " + std::to_string(part->nodes) +
                          " node(s) of " + where + ", found " + std::to_string(plan.nodes) + " requested (sinfo).",
                      "ask for fewer nodes, or a bigger partition (--partition).");
  }
  const int cpus = plan.tasks_per_node * std::max(1, plan.cpus_per_task);
  if (part->max_cpus_per_node > 0 && cpus > part->max_cpus_per_node) {
    throw ConfigError("--ntasks-per-node " + std::to_string(plan.tasks_per_node) + " x --cpus-per-task " +
                          std::to_string(std::max(1, plan.cpus_per_task)) + ": expected at most the " +
                          std::to_string(part->max_cpus_per_node) + " CPUs of a node in " + where + ", found " +
                          std::to_string(cpus) + " CPUs per node requested (sinfo).",
                      "use fewer tasks or CPUs per task on each node, and more nodes (--nodes), instead.");
  }
  if (plan.mem_mb > 0 && part->max_memory_mb > 0 && plan.mem_mb > part->max_memory_mb) {
    throw ConfigError("--mem " + o.mem + ": expected at most the " + std::to_string(part->max_memory_mb) +
                          " MB of a node in " + where + ", found " + std::to_string(plan.mem_mb) + " MB requested (sinfo).",
                      "--mem is per node; ask for less, or leave it out to get the partition's default.");
  }
  if (plan.time_seconds != 0 && part->max_time_seconds != kTimeUnlimited &&
      (plan.time_seconds == kTimeUnlimited || plan.time_seconds > part->max_time_seconds)) {
    throw ConfigError("--time " + o.time + ": expected at most the MaxTime of " + where + " (" +
                          std::to_string(part->max_time_seconds / 60) + " min), found " +
                          (plan.time_seconds == kTimeUnlimited ? std::string("no limit")
                                                               : std::to_string(plan.time_seconds / 60) + " min") +
                          " (sinfo).",
                      "a job over the partition's limit waits for ever (PartitionTimeLimit) or is rejected; ask "
                      "for less and chain chunks with --array-chain N.");
  }
  if (plan.gpus_per_node > 0) {
    const std::string kind = plan.shard ? "shard" : "gpu";
    int offered = 0;
    for (const std::string& g : part->gres) {
      const std::int64_t n = std::min<std::int64_t>(gres_largest(parse_gres_items(g), kind), 1 << 20);
      offered = std::max(offered, static_cast<int>(n));
    }
    if (offered == 0) {
      const std::string gres_text = part->gres.empty() ? std::string("no gres at all") : "only gres " + part->gres.front();
      throw ConfigError(plan.gpu_request + ": expected " + where + " to have GPUs (gres " + kind +
                            "), found " + gres_text + " there (sinfo).",
                        "submit to a GPU partition (--partition, see sinfo -o '%P %G'), or drop the GPU request "
                        "to train on CPUs with Gloo.");
    }
    if (!plan.shard && plan.gpus_per_node > offered) {
      throw ConfigError(plan.gpu_request + ": expected at most the " + std::to_string(offered) + " GPUs of a node in " +
                            where + ", found " + std::to_string(plan.gpus_per_node) + " per node requested (sinfo).",
                        "ask for fewer GPUs per node and more nodes (--nodes).");
    }
  }
  return warnings;
}

TestOnlyResult parse_test_only(const std::string& message) {
  static const std::regex kPattern(
      R"(Job (\S+) to start at (\S+) using (\d+) processors on nodes (\S+) in partition (\S+))");
  std::smatch m;
  if (!std::regex_search(message, m, kPattern)) {
    throw ConfigError("sbatch --test-only: expected 'Job N to start at TIME using P processors on nodes N in "
                          "partition P', found: " + trim(message),
                      "run sbatch --test-only yourself to see the whole answer; sinfo and squeue show what the "
                      "cluster has and who is ahead in the queue.");
  }
  TestOnlyResult r;
  r.job_id = m[1];
  r.start_time = m[2];
  r.processors = m[3];
  r.nodes = m[4];
  r.partition = m[5];
  r.raw = trim(message);
  return r;
}

namespace {

CommandResult run_sbatch(const std::vector<std::string>& args, const std::string& script) {
  try {
    find_program("sbatch", current_environment());
  } catch (const ConfigError&) {
    throw ConfigError("sbatch: expected SLURM's sbatch on PATH, found none.",
                      "run this on the cluster's login node, or write the script with --out FILE and copy it there.");
  }
  std::vector<std::string> argv = {"sbatch"};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult r = run_command(argv, script, kSbatchTimeoutSeconds);
  if (r.timed_out) {
    throw ConfigError("sbatch: expected an answer within " + std::to_string(int(kSbatchTimeoutSeconds)) +
                          " s, found none (killed).",
                      "the controller may be down or overloaded; check with sinfo and scontrol ping.");
  }
  return r;
}

}  // namespace

TestOnlyResult sbatch_test_only(const std::string& script) {
  const CommandResult r = run_sbatch({"--test-only"}, script);
  if (r.exit_code != 0) {
    throw ConfigError("sbatch --test-only: expected the script to be accepted, found exit code " +
                          std::to_string(r.exit_code) + ": " + trim(r.err + r.out),
                      "sbatch names the option it rejects; sinfo shows the partitions, nodes, CPUs and gres there are.");
  }
  return parse_test_only(r.err + r.out);
}

std::string sbatch_submit(const std::string& script, const std::string& output_pattern) {
  const std::string folder = output_folder(output_pattern);
  if (!folder.empty()) {
    const std::string made = [&]() -> std::string {
      std::string path;
      for (std::size_t i = 0; i <= folder.size(); ++i) {
        if (i < folder.size() && folder[i] != '/') continue;
        path = folder.substr(0, i);
        if (path.empty()) continue;
        if (mkdir(path.c_str(), 0777) != 0 && errno != EEXIST) return path + ": " + std::strerror(errno);
      }
      return "";
    }();
    if (!made.empty()) {
      throw ConfigError("--output " + output_pattern + ": expected to create the log folder, found " + made + ".",
                        "SLURM fails a job whose log folder is missing; create it, or submit from a writable folder.");
    }
  }
  const CommandResult r = run_sbatch({"--parsable"}, script);
  if (r.exit_code != 0) {
    throw ConfigError("sbatch: expected the job to be accepted, found exit code " + std::to_string(r.exit_code) +
                          ": " + trim(r.err + r.out),
                      "sbatch names the option it rejects; try trainctl sbatch --test-only with the same options.");
  }
  const std::string id = trim(r.out).substr(0, trim(r.out).find(';'));  // --parsable: "ID" or "ID;CLUSTER"
  if (id.empty() || !std::all_of(id.begin(), id.end(), [](unsigned char c) { return std::isdigit(c) != 0 || c == '_'; })) {
    throw ConfigError("sbatch --parsable: expected a job id on stdout, found '" + trim(r.out) + "'.",
                      "check squeue -u $USER for the job; the site's sbatch may print extra text.");
  }
  return id;
}

}  // namespace train
