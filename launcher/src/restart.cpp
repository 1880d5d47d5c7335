// `trainctl run`'s decisions (restart.h): reading srun's and train's failure lines, whether a step
// that ended is launched again, and the nodes and tasks of the next launch. Pure: no processes.
#include "train/launcher/restart.h"

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "train/base/error.h"
#include "train/base/hostlist.h"
#include "train/base/text.h"

namespace train {
namespace {


void add_once(std::vector<std::string>& list, const std::string& value) {
  if (!value.empty() && std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
}

bool has(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

// A node list as train or SLURM writes it: "node2", "node1,node3" or "node[1-2]".
std::vector<std::string> nodes_of(const std::string& list) {
  try {
    return hostlist_expand(list);
  } catch (const std::exception&) {
    return text::split(list, ',');
  }
}

// srun's line for tasks that ended badly: "srun: error: node2: task 1: Killed",
// "srun: error: node1: tasks 0-1: Exited with exit code 79".
bool read_srun_task_line(const std::string& line, StepReport& r) {
  static const std::regex kTask(R"(^srun: error: (\S+): tasks? ([0-9,\-]+): (.+)$)");
  std::smatch m;
  if (!std::regex_search(line, m, kTask)) return false;
  const std::string how = text::trim(m[3]);
  // Exit codes are train's own word (read from srun's status); SIGTERM/SIGINT are what srun sends
  // the other tasks once one failed (--kill-on-bad-exit), or scancel: not the failure itself.
  static const std::regex kExit(R"(^Exited with exit code (\d+))");
  std::smatch code;
  if (std::regex_search(how, code, kExit)) {
    if (r.task_exit_code == 0 && code[1] != "0") r.task_exit_code = std::stoi(code[1]);
    return true;
  }
  if (how == "Terminated" || how == "Interrupt") return true;
  // srun writes the signal's description (strsignal): the status is 128 + its number.
  static const std::vector<std::pair<std::string, int>> kSignals = {
      {"Killed", 9}, {"Segmentation fault", 11}, {"Aborted", 6}, {"Bus error", 7}, {"Floating point exception", 8},
      {"Illegal instruction", 4}, {"Hangup", 1}, {"Quit", 3}, {"User defined signal 1", 10},
      {"User defined signal 2", 12}};
  for (const auto& [name, number] : kSignals) {
    if (r.task_exit_code == 0 && how.rfind(name, 0) == 0) r.task_exit_code = 128 + number;
  }
  r.killed.push_back(std::string(m[1]) + ": task " + std::string(m[2]) + ": " + how);
  add_once(r.killed_nodes, m[1]);
  return true;
}

// srun's lines for a node it lost or could not reach.
bool read_srun_node_line(const std::string& line, StepReport& r) {
  static const std::regex kNodeFail(R"(Node failure on (\S+))");
  static const std::regex kLaunch(R"(failed on node (\S+?):)");
  static const std::regex kUnreachable(
      R"(srun: error: (\S+?): .*(Communication connection failure|Zero Bytes were transmitted|Unable to contact))");
  std::smatch m;
  if (std::regex_search(line, m, kNodeFail) || std::regex_search(line, m, kLaunch) ||
      std::regex_search(line, m, kUnreachable)) {
    add_once(r.lost_nodes, m[1]);
    return true;
  }
  return false;
}

// train's lines: the health check's bad nodes (its hint says "sbatch --exclude=NODES"), ranks it
// names dead, frozen or stalled ("rank 1 on node2"), and peers' connections that broke.
void read_train_line(const std::string& line, StepReport& r) {
  static const std::regex kExclude(R"(--health-check: .*sbatch --exclude=([^\s(]+))");
  static const std::regex kRankOn(R"(rank (\d+) on ([A-Za-z0-9_.\-\[\]]+?)[ ,.;(]?(\s|$|\())");
  std::smatch m;
  if (std::regex_search(line, m, kExclude)) {
    for (const std::string& node : nodes_of(m[1])) add_once(r.unhealthy_nodes, node);
  }
  // The roll-call of a stall: the groups after the first are the odd ones out ("; rank 1 on node2 in ...").
  static const std::regex kOddOnes(R"(; ranks? [0-9,\-]+ on ([A-Za-z0-9_.\-]+(,[A-Za-z0-9_.\-]+)*)[ :])");
  if (has(line, "stalled: ") && has(line, "Roll-call: ")) {
    for (auto it = std::sregex_iterator(line.begin(), line.end(), kOddOnes); it != std::sregex_iterator(); ++it) {
      for (const std::string& node : text::split((*it)[1], ',')) add_once(r.stalled_nodes, node);
    }
  }
  if (has(line, "Not responding") || has(line, "stalled") || has(line, "roll-call")) {
    for (auto it = std::sregex_iterator(line.begin(), line.end(), kRankOn); it != std::sregex_iterator(); ++it) {
      add_once(r.silent_nodes, (*it)[2]);
    }
  }
  for (const char* broken : {"Connection closed by peer", "Connection reset by peer", "Broken pipe",
                             "remote process exited", "ncclRemoteError", "ncclSystemError"}) {
    if (has(line, broken)) r.broken_connection = true;
  }
}

bool is_error_line(const std::string& line) {
  if (line.rfind("srun: error:", 0) == 0) {
    return !has(line, ": Terminated") && !has(line, "Exited with exit code") && !has(line, "Interrupt");
  }
  return has(line, " error [rank") || has(line, " ERROR [rank") || has(line, "slurmstepd: error:");
}

RestartDecision stop(const std::string& why) {
  RestartDecision d;
  d.why = why;
  return d;
}

// The failure a step ended with, when it is a lost rank or node; std::nullopt for what no restart fixes.
std::optional<RestartDecision> lost_something(const StepReport& r, const std::set<std::string>& down) {
  RestartDecision d;
  d.restart = true;
  const int rc = step_exit_code(r);
  std::vector<std::string> gone = r.lost_nodes;
  for (const auto* list : {&r.killed_nodes, &r.silent_nodes}) {
    for (const std::string& node : *list) {
      if (down.count(node) != 0) add_once(gone, node);
    }
  }
  if (rc == train_exit::kUnhealthy && !r.unhealthy_nodes.empty()) {
    d.cause = "node failed health check";
    d.nodes = r.unhealthy_nodes;
    d.exclude = true;
  } else if (!gone.empty()) {
    d.cause = "lost node";
    d.nodes = gone;
    d.exclude = true;
  } else if (!r.killed.empty()) {
    d.cause = "lost rank";
    d.nodes = r.killed_nodes;
  } else if (rc == train_exit::kStalled) {
    d.cause = "stalled rank";
    d.nodes = r.stalled_nodes.empty() ? r.silent_nodes : r.stalled_nodes;
  } else if (r.broken_connection || !r.silent_nodes.empty()) {
    d.cause = "broken connection";
    d.nodes = r.silent_nodes;
  } else if (rc > 128 && rc != train_exit::kInterrupted && rc != train_exit::kTerminated) {
    d.cause = "lost rank";  // srun's status of a task killed by a signal it did not name
  } else {
    return std::nullopt;
  }
  return d;
}

// Why a step that lost nothing is not launched again.
std::string why_not(const StepReport& r) {
  const int rc = step_exit_code(r);
  const std::string code = "exit " + std::to_string(rc);
  switch (rc) {
    case train_exit::kError:
      return code + ", an error in the code, configuration or data (the first error above): not restarted, a new "
                    "launch would fail the same way";
    case train_exit::kUsage: return code + ", a flag error: not restarted";
    case train_exit::kNonFinite:
      return code + ", a non-finite loss or gradient: not restarted, a new launch would meet it again";
    case train_exit::kUnhealthy: return code + ", a failed health check that names no node: not restarted";
    case train_exit::kInterrupted:
    case train_exit::kTerminated:
      return code + ", the tasks were stopped by SIGINT/SIGTERM: not restarted";
    default: return code + ", not a lost rank or node: not restarted";
  }
}

}  // namespace

void read_step_line(const std::string& raw, StepReport& report) {
  const std::string line = text::trim(raw);
  if (line.empty()) return;
  const bool first = report.first_error.empty() && is_error_line(line);
  if (first) report.first_error = line;
  const auto lost_count = [&] {
    return report.killed.size() + report.lost_nodes.size() + report.silent_nodes.size() +
           (report.broken_connection ? 1 : 0);
  };
  const std::size_t before = lost_count();
  if (!read_srun_task_line(line, report) && !read_srun_node_line(line, report)) read_train_line(line, report);
  if (first) report.first_error_lost = lost_count() != before || has(line, "Not responding");
}

int step_exit_code(const StepReport& r) { return r.task_exit_code != 0 ? r.task_exit_code : r.exit_code; }

RestartDecision decide_restart(const StepReport& r, int64_t step, const std::optional<PastFailure>& previous,
                               int restarts_done, int max_restarts, const std::set<std::string>& down_nodes,
                               int nodes_left) {
  const int rc = step_exit_code(r);
  if (r.got_term) return stop("trainctl run got SIGTERM/SIGINT (scancel or the time limit): not restarted");
  if (rc == train_exit::kDone) return stop("");
  if (rc == train_exit::kPreempted) {
    return stop("exit 75, preempted: train saved a checkpoint; the job is requeued, not restarted here");
  }
  // A rank's own error came first: what its peers said after it (broken connections, a rank gone)
  // and srun's ending of the step follow from it.
  const bool bug_code = rc == train_exit::kError || rc == train_exit::kUsage || rc == train_exit::kNonFinite;
  if (bug_code && !r.first_error.empty() && !r.first_error_lost && r.lost_nodes.empty()) return stop(why_not(r));
  std::optional<RestartDecision> lost = lost_something(r, down_nodes);
  if (!lost) return stop(why_not(r));
  RestartDecision d = *lost;
  const std::string what = d.cause + (d.nodes.empty() ? "" : " (" + text::join(d.nodes, ",") + ")") + ", exit " +
                           std::to_string(rc);
  if (restarts_done >= max_restarts) {
    return stop(what + ": not restarted, " + std::to_string(restarts_done) + " restart(s) done already (--max-restarts " +
                std::to_string(max_restarts) + ")");
  }
  if (previous && previous->cause == d.cause && step >= 0 && previous->step == step) {
    return stop(what + " at step " + std::to_string(step) + " again, as before the last restart: not restarted, the "
                "same failure at the same step twice in a row is a bug, not a lost rank");
  }
  if (d.exclude && nodes_left - static_cast<int>(d.nodes.size()) < 1) {
    return stop(what + ": not restarted, no node would be left without " + text::join(d.nodes, ","));
  }
  d.why = what + (d.exclude ? "; leaving out " + text::join(d.nodes, ",") : "; all nodes kept");
  return d;
}

std::vector<std::string> LaunchShape::nodes() const {
  std::vector<std::string> out;
  for (const std::string& node : job_nodes) {
    if (std::find(excluded.begin(), excluded.end(), node) == excluded.end()) out.push_back(node);
  }
  return out;
}

int LaunchShape::tasks() const {
  int n = 0;
  for (std::size_t i = 0; i < job_nodes.size() && i < job_tasks.size(); ++i) {
    if (std::find(excluded.begin(), excluded.end(), job_nodes[i]) == excluded.end()) n += job_tasks[i];
  }
  return n;
}

std::vector<int> tasks_per_node(const std::string& per) {
  std::vector<int> out;
  static const std::regex kGroup(R"(^(\d{1,6})(\(x(\d{1,6})\))?$)");
  for (const std::string& group : text::split(per, ',')) {
    std::smatch m;
    if (!std::regex_match(group, m, kGroup)) return {};
    for (int i = 0; i < (m[3].matched ? std::stoi(m[3]) : 1); ++i) out.push_back(std::stoi(m[1]));
  }
  return out;
}

LaunchShape job_shape(const std::function<std::string(const std::string&)>& get) {
  const std::string list = get("SLURM_JOB_NODELIST");
  if (list.empty()) {
    throw ConfigError("SLURM_JOB_NODELIST: expected the job's nodes, found it unset.",
                      "run trainctl run in a batch script or salloc session, where SLURM sets it.");
  }
  LaunchShape shape;
  shape.job_nodes = hostlist_expand(list);
  std::string per = get("SLURM_TASKS_PER_NODE");
  if (per.empty() && !get("SLURM_NTASKS_PER_NODE").empty()) {
    per = get("SLURM_NTASKS_PER_NODE") + "(x" + std::to_string(shape.job_nodes.size()) + ")";
  }
  shape.job_tasks = tasks_per_node(per);
  if (shape.job_tasks.size() != shape.job_nodes.size()) {
    throw ConfigError("SLURM_TASKS_PER_NODE='" + per + "': expected a task count for each node of " + list +
                          " (e.g. 2(x" + std::to_string(shape.job_nodes.size()) + ")), found " +
                          std::to_string(shape.job_tasks.size()) + " count(s).",
                      "run trainctl run in a batch script or salloc session, where SLURM sets it.");
  }
  return shape;
}

LaunchShape without_nodes(const LaunchShape& shape, const std::vector<std::string>& drop) {
  LaunchShape out = shape;
  for (const std::string& node : drop) {
    if (std::find(shape.job_nodes.begin(), shape.job_nodes.end(), node) != shape.job_nodes.end()) {
      add_once(out.excluded, node);
    }
  }
  return out;
}

std::vector<std::string> srun_command(const LaunchShape& shape, const std::vector<std::string>& srun_args,
                                      const std::vector<std::string>& program) {
  std::vector<std::string> argv = {"srun", "--kill-on-bad-exit=1"};
  if (!shape.excluded.empty()) {
    argv.push_back("--exclude=" + text::join(shape.excluded, ","));
    argv.push_back("--nodes=" + std::to_string(shape.nodes().size()));
    argv.push_back("--ntasks=" + std::to_string(shape.tasks()));
  }
  argv.insert(argv.end(), srun_args.begin(), srun_args.end());
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

bool node_state_is_down(const std::string& text) {
  static const std::regex kState(R"(State=(\S+))");
  std::smatch m;
  if (!std::regex_search(text, m, kState)) return false;
  const std::string state = m[1];
  return has(state, "DOWN") || has(state, "NOT_RESPONDING") || has(state, "FAIL") || state.back() == '*';
}

int64_t checkpoint_step(const std::string& path) {
  static const std::regex kName(R"(ckpt-(\d+)\.pt$)");
  std::smatch m;
  return std::regex_search(path, m, kName) ? std::stoll(m[1]) : -1;
}

std::string describe_restart(const RestartEntry& e, int max_restarts) {
  std::string s = "restart " + std::to_string(e.number) + (max_restarts > 0 ? "/" + std::to_string(max_restarts) : "") +
                  ": " + e.cause + (e.nodes.empty() ? "" : " on " + text::join(e.nodes, ",")) + " (exit " +
                  std::to_string(e.exit_code) + "), " +
                  (e.excluded ? "left out " + text::join(e.nodes, ",") : std::string("all nodes kept"));
  if (e.resumed_step >= 0) {
    s += "; resumed from " + (e.launch.source.empty() ? std::string("step ") : "the " + e.launch.source + " of step ") +
         std::to_string(e.resumed_step);
  }
  if (e.seconds > 0) s += ", " + text::format("%.1f", e.seconds) + " s after the failure";
  const LaunchTimes& l = e.launch;
  if (e.seconds > 0 && e.relaunched > 0 && l.started > 0 && l.connecting > 0 && l.connected > 0 && l.loaded > 0 &&
      l.training > 0) {
    const auto part = [](const char* name, double from, double to) {
      return std::string(name) + " " + text::format("%.1f", std::max(0.0, to - from)) + " s";
    };
    s += " (" + part("relaunch", e.time, e.relaunched) + ", " + part("process start", e.relaunched, l.started) + ", " +
         part("set-up", l.started, l.connecting) + ", " + part("rendezvous", l.connecting, l.connected) + ", " +
         part("state load", l.connected, l.loaded) + ", " + part("first step", l.loaded, l.training) + ")";
  }
  return s;
}

}  // namespace train
