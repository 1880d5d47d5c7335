// `trainctl sbatch`'s request checks: the value parsers (--time, --signal, --mem, counts) and
// plan_sbatch, which checks a request and works out its plan. The script itself is written in
// sbatch_script.cpp; the parts that talk to a cluster (sinfo, sbatch) live in sbatch_cluster.cpp.
#include "train/launcher/sbatch.h"

#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "train/base/error.h"
#include "train/base/text.h"
#include "train/base/signals.h"
#include "train/launcher/gres.h"
#include "train/launcher/sweep.h"
#include "train/base/text.h"

namespace train {
namespace {

using text::all_digits;
using text::split;

constexpr char kTimeFormats[] =
    "minutes, minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes, "
    "days-hours:minutes:seconds, or INFINITE";

/// Signals train checkpoints on when --preempt-signals is not given (its default).
const std::vector<std::string> kTrainDefaultPreemptSignals = {"USR2"};

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

/// A decimal number of at most 18 digits (so it fits an int64 and sums of a few stay in range).
bool parse_u64(const std::string& s, std::int64_t& out) {
  if (!all_digits(s) || s.size() > 18) return false;
  out = std::stoll(s);
  return true;
}

/// --option N: a positive integer below 2^31.
int parse_count(const std::string& option, const std::string& value, const std::string& hint) {
  std::int64_t n = 0;
  if (!parse_u64(value, n) || n < 1 || n > 0x7fffffff) {
    throw ConfigError(option + " '" + value + "': expected a positive integer (decimal digits), found '" +
                          value + "'.",
                      hint);
  }
  return static_cast<int>(n);
}

/// Values that end up on an #SBATCH line must be one word: sbatch splits those lines at spaces.
void check_sbatch_word(const std::string& option, const std::string& value) {
  if (value.empty()) {
    throw ConfigError(option + ": expected a value, found an empty one.", "drop the option or give it a value.");
  }
  for (const char c : value) {
    if (std::isspace(static_cast<unsigned char>(c)) != 0 || c == '"' || c == '\'' || c == '\\' ||
        std::iscntrl(static_cast<unsigned char>(c)) != 0) {
      throw ConfigError(option + " '" + value + "': expected one word without spaces, quotes or backslashes "
                            "(it goes on an #SBATCH line), found '" + std::string(1, c) + "'.",
                        "SLURM names, sizes and patterns never need them; check for a stray space or quote.");
    }
  }
}

void check_single_line(const std::string& option, const std::string& value) {
  if (value.find_first_of("\n\r") != std::string::npos) {
    throw ConfigError(option + ": expected a single line, found a line break in '" + value + "'.",
                      "give the option once per line, e.g. --setup 'module load cuda' --setup 'source .venv/bin/activate'.");
  }
}


/// The signals train checkpoints on, as given to it (last --preempt-signals), upper case, no "SIG".
std::vector<std::string> train_preempt_signals(const std::vector<std::string>& args, bool& given) {
  const std::string value = train_flag_value(args, {"--preempt-signals", "--preempt-signal"}, &given);
  if (!given) return kTrainDefaultPreemptSignals;
  std::vector<std::string> out;
  if (value == "none" || value.empty()) return out;
  for (std::string item : split(value, ',')) {
    item = upper(item);
    if (item.rfind("SIG", 0) == 0) item = item.substr(3);
    out.push_back(item);
  }
  return out;
}

std::string duration_text(std::int64_t seconds) {
  if (seconds % 60 == 0) return std::to_string(seconds / 60) + " min";
  return std::to_string(seconds) + " s";
}

}  // namespace

std::string train_flag_value(const std::vector<std::string>& args, const std::vector<std::string>& names,
                            bool* found) {
  std::string value;
  bool seen = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    // train takes --checkpoint_dir for --checkpoint-dir (train/cli.h): the name with '_' as '-'.
    std::string arg = args[i];
    std::replace(arg.begin(), arg.begin() + static_cast<std::ptrdiff_t>(std::min(arg.find('='), arg.size())), '_', '-');
    for (const std::string& name : names) {
      if (arg == name && i + 1 < args.size()) {
        value = args[i + 1];
        seen = true;
      } else if (arg.rfind(name + "=", 0) == 0) {
        value = args[i].substr(name.size() + 1);
        seen = true;
      }
    }
  }
  if (found != nullptr) *found = seen;
  return value;
}


std::string shell_quote(const std::string& value) {
  const bool plain = !value.empty() && std::all_of(value.begin(), value.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || std::string("_@%+=:,./-").find(static_cast<char>(c)) != std::string::npos;
  });
  if (plain) return value;
  std::string out = "'";
  for (const char c : value) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string per_rank_pattern(const std::string& pattern) {
  const std::size_t slash = pattern.rfind('/');
  const std::size_t name_start = slash == std::string::npos ? 0 : slash + 1;
  const std::size_t dot = pattern.rfind('.');
  if (dot == std::string::npos || dot <= name_start) return pattern + "-%t";
  return pattern.substr(0, dot) + "-%t" + pattern.substr(dot);
}

std::string output_folder(const std::string& output_pattern) {
  const std::size_t slash = output_pattern.rfind('/');
  if (slash == std::string::npos || slash == 0) return "";
  const std::string folder = output_pattern.substr(0, slash);
  return folder.find('%') == std::string::npos ? folder : "";
}

SignalSpec parse_signal_spec(const std::string& option, const std::string& value) {
  const std::string hint =
      "write [B:|R:]SIG[@SECONDS], e.g. USR2@120 (SIG a name such as USR2 or SIGUSR2, or a number; "
      "SECONDS 0-65535, default 60).";
  SignalSpec spec;
  std::string rest = value;
  const std::size_t colon = rest.find(':');
  if (colon != std::string::npos) {
    const std::string flags = upper(rest.substr(0, colon));
    if (flags.empty() || flags.size() > 2 || flags.find_first_not_of("RB") != std::string::npos) {
      throw ConfigError(option + " '" + value + "': expected the prefix B:, R: or RB: before the signal, found '" +
                            rest.substr(0, colon + 1) + "'.",
                        hint);
    }
    spec.batch_only = flags.find('B') != std::string::npos;
    spec.reservation = flags.find('R') != std::string::npos;
    rest = rest.substr(colon + 1);
  }
  std::string sig = rest;
  const std::size_t at = rest.find('@');
  if (at != std::string::npos) {
    sig = rest.substr(0, at);
    const std::string secs = rest.substr(at + 1);
    std::int64_t n = 60;
    if (!secs.empty() && (!parse_u64(secs, n) || n > 65535)) {
      throw ConfigError(option + " '" + value + "': expected the seconds before the time limit after '@' (0-65535), "
                            "found '" + secs + "'.",
                        hint);
    }
    spec.lead_seconds = static_cast<int>(n);
  }
  std::string name = upper(sig);
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  if (all_digits(name)) {
    std::int64_t n = 0;
    if (!parse_u64(name, n) || n < 1 || n > 64) {
      throw ConfigError(option + " '" + value + "': expected a signal number 1-64, found '" + sig + "'.", hint);
    }
    spec.number = static_cast<int>(n);
    spec.name = signal_short_name(spec.number).empty() ? name : signal_short_name(spec.number);
    return spec;
  }
  if (const int number = signal_number(name); number != 0) {
    spec.name = signal_short_name(number);
    spec.number = number;
    return spec;
  }
  throw ConfigError(option + " '" + value + "': expected a signal name (USR1, USR2, TERM, ...) or number, found '" +
                        sig + "'.",
                    hint);
}

std::int64_t parse_time_limit(const std::string& option, const std::string& value) {
  const std::string hint = "e.g. 30 (minutes), 02:00:00 (two hours) or 1-00:00:00 (a day); sbatch rejects other forms.";
  const std::string u = upper(value);
  if (u == "INFINITE" || u == "UNLIMITED") return kTimeUnlimited;
  auto bad = [&](const std::string& why) {
    return ConfigError(option + " '" + value + "': expected " + kTimeFormats + ", found " + why + ".", hint);
  };
  std::int64_t days = 0;
  std::string clock = value;
  const std::size_t dash = value.find('-');
  if (dash != std::string::npos) {
    if (!parse_u64(value.substr(0, dash), days)) throw bad("'" + value.substr(0, dash) + "' before '-' (days)");
    clock = value.substr(dash + 1);
  }
  const std::vector<std::string> fields = split(clock, ':');
  std::vector<std::int64_t> n(fields.size(), 0);
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (!parse_u64(fields[i], n[i])) {
      throw bad(fields[i].empty() ? "an empty field in '" + value + "'" : "'" + fields[i] + "', not a decimal number");
    }
  }
  if (fields.size() > 3) throw bad(std::to_string(fields.size()) + " ':'-separated fields");
  std::int64_t seconds = 0;
  if (dash != std::string::npos) {
    // days-hours[:minutes[:seconds]]
    seconds = days * 86400 + n[0] * 3600 + (n.size() > 1 ? n[1] * 60 : 0) + (n.size() > 2 ? n[2] : 0);
  } else if (n.size() == 1) {
    seconds = n[0] * 60;  // minutes
  } else if (n.size() == 2) {
    seconds = n[0] * 60 + n[1];  // minutes:seconds
  } else {
    seconds = n[0] * 3600 + n[1] * 60 + n[2];  // hours:minutes:seconds
  }
  return seconds == 0 ? kTimeUnlimited : seconds;  // sbatch: a limit of 0 means none
}

std::int64_t parse_memory_mb(const std::string& option, const std::string& value) {
  std::string digits = value;
  std::int64_t scale_kb = 1024;  // M is the default unit
  if (!digits.empty() && std::isalpha(static_cast<unsigned char>(digits.back())) != 0) {
    const char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(digits.back())));
    const std::string units = "KMGT";
    const std::size_t pos = units.find(unit);
    if (pos == std::string::npos) {
      throw ConfigError(option + " '" + value + "': expected a size N[K|M|G|T] (MiB without a unit), found the unit '" +
                            std::string(1, digits.back()) + "'.",
                        "e.g. --mem 16G or --mem 32000M (memory per node).");
    }
    scale_kb = std::int64_t(1) << (10 * pos);
    digits.pop_back();
  }
  std::int64_t n = 0;
  if (!parse_u64(digits, n) || digits.size() > 12) {
    throw ConfigError(option + " '" + value + "': expected a size N[K|M|G|T] (MiB without a unit), found '" + value + "'.",
                      "e.g. --mem 16G or --mem 32000M (memory per node).");
  }
  const std::int64_t kb = n * scale_kb;
  return (kb + 1023) / 1024;
}

namespace {

// plan_sbatch()'s steps, in the order it runs them: each checks one group of options and fills in
// its part of the plan, so the first error a user sees stays the same as the options grow.

/// --job-name, or the default: it becomes part of log and checkpoint paths, so no '/' or '%'.
std::string checked_job_name(const SbatchOptions& o) {
  const std::string job_name = o.job_name.empty() ? kDefaultJobName : o.job_name;
  check_sbatch_word("--job-name", job_name);
  if (job_name.find('/') != std::string::npos || job_name.find('%') != std::string::npos) {
    throw ConfigError("--job-name '" + job_name + "': expected a name without '/' or '%', found one.",
                      "the name becomes part of the log and checkpoint paths (logs/%x-%j.out, "
                      "checkpoints/NAME-JOBID); use letters, digits, '-' and '_'.");
  }
  return job_name;
}

/// Every option copied onto an #SBATCH line as it is, checked before any is parsed.
void check_sbatch_words(const SbatchOptions& o) {
  for (const auto& [option, value] :
       std::vector<std::pair<std::string, std::string>>{{"--partition", o.partition}, {"--account", o.account},
                                                        {"--qos", o.qos}, {"--constraint", o.constraint},
                                                        {"--gres", o.gres}, {"--mem", o.mem}, {"--time", o.time},
                                                        {"--output", o.output}, {"--error", o.error},
                                                        {"--gpus-per-node", o.gpus_per_node}}) {
    if (!value.empty()) check_sbatch_word(option, value);
  }
}

/// GPUs: --gpus-per-node [TYPE:]N, --gres gpu[:TYPE]:N or --gres shard[:TYPE]:N, asked for one way only.
void plan_gpus(const SbatchOptions& o, SbatchPlan& plan) {
  int gpus_per_node = 0;
  if (!o.gpus_per_node.empty()) {
    const std::size_t colon = o.gpus_per_node.rfind(':');
    const std::string count = colon == std::string::npos ? o.gpus_per_node : o.gpus_per_node.substr(colon + 1);
    gpus_per_node = parse_count("--gpus-per-node", count, "write N or TYPE:N, e.g. --gpus-per-node 4 or a100:4.");
  }
  GresRequest gres;
  if (!o.gres.empty()) gres = parse_gres_request(o.gres);
  if (gpus_per_node > 0 && (gres.gpus > 0 || gres.shards > 0)) {
    throw ConfigError("--gpus-per-node " + o.gpus_per_node + " and --gres " + gres.item +
                          ": expected GPUs requested once, found both options.",
                      "keep one: --gres gpu:N (one task per GPU) or --gpus-per-node N.");
  }
  if (gres.gpus > 0 && gres.shards > 0) {
    throw ConfigError("--gres '" + o.gres + "': expected whole GPUs (gpu:N) or shards of one (shard:N), found both.",
                      "use gpu:N for one task per GPU, or shard:N for a single task on a shared GPU.");
  }
  if (gpus_per_node > 0) {
    plan.gpus_per_node = gpus_per_node;
    plan.gpu_request = "--gpus-per-node " + o.gpus_per_node;
  } else if (gres.gpus > 0) {
    plan.gpus_per_node = gres.gpus;
    plan.gpu_request = "--gres " + gres.item;
  } else if (gres.shards > 0) {
    plan.gpus_per_node = 1;
    plan.shard = true;
    plan.gpu_request = "--gres " + gres.item;
  }
}

/// --ntasks: at least one per node, within --ntasks-per-node, one per whole GPU. Returns the tasks
/// per node, derived from --ntasks when neither --ntasks-per-node nor GPUs fix them (0: not yet known).
int plan_ntasks(const SbatchOptions& o, int tasks, SbatchPlan& plan) {
  if (o.ntasks.empty()) return tasks;
  plan.ntasks = parse_count("--ntasks", o.ntasks, "e.g. --ntasks 4: ranks in all, spread over the nodes.");
  if (plan.ntasks < plan.nodes) {
    throw ConfigError("--ntasks " + o.ntasks + " with --nodes " + std::to_string(plan.nodes) +
                          ": expected at least one task per node, found fewer tasks than nodes.",
                      "ask for at least as many tasks as nodes, or fewer nodes.");
  }
  if (tasks > 0 && plan.ntasks > plan.nodes * tasks) {
    throw ConfigError("--ntasks " + o.ntasks + ": expected at most --nodes x --ntasks-per-node = " +
                          std::to_string(plan.nodes * tasks) + " tasks, found " + o.ntasks + ".",
                      "drop --ntasks-per-node (SLURM spreads the tasks), or ask for more nodes.");
  }
  if (tasks == 0 && plan.gpus_per_node == 0) tasks = (plan.ntasks + plan.nodes - 1) / plan.nodes;
  if (plan.gpus_per_node > 0 && !plan.shard && plan.ntasks != plan.nodes * plan.gpus_per_node) {
    throw ConfigError("--ntasks " + o.ntasks + " with " + plan.gpu_request + " on " + std::to_string(plan.nodes) +
                          " node(s): expected one task per GPU (" +
                          std::to_string(plan.nodes * plan.gpus_per_node) + " tasks), found " + o.ntasks + ".",
                      "drop --ntasks (it follows the GPUs), or request as many GPUs as tasks.");
  }
  return tasks;
}

/// Tasks per node: one per whole GPU (NCCL needs a GPU per rank), a single one on a shared GPU.
void plan_tasks_per_node(int tasks, SbatchPlan& plan) {
  if (tasks == 0) tasks = plan.gpus_per_node > 0 && !plan.shard ? plan.gpus_per_node : 1;
  plan.tasks_per_node = tasks;
  if (plan.shard && tasks > 1) {
    throw ConfigError("--ntasks-per-node " + std::to_string(tasks) + " with " + plan.gpu_request +
                          ": expected 1 task per node on a shared GPU, found " + std::to_string(tasks) + ".",
                      "shards give a node's tasks one GPU between them, and NCCL needs a GPU per rank; use "
                      "--ntasks-per-node 1, or --gres gpu:N for N ranks per node.");
  }
  if (plan.gpus_per_node > 0 && !plan.shard && tasks != plan.gpus_per_node) {
    throw ConfigError("--ntasks-per-node " + std::to_string(tasks) + " with " + plan.gpu_request +
                          ": expected one task per GPU (" + std::to_string(plan.gpus_per_node) +
                          " tasks per node), found " + std::to_string(tasks) + ".",
                      "drop --ntasks-per-node (it follows the GPUs), or request as many GPUs as tasks.");
  }
}

/// Nodes, CPUs, tasks and GPUs, which must agree with each other.
void plan_layout(const SbatchOptions& o, SbatchPlan& plan) {
  if (!o.nodes.empty()) plan.nodes = parse_count("--nodes", o.nodes, "e.g. --nodes 2 (whole nodes, not tasks).");
  if (!o.cpus_per_task.empty()) {
    plan.cpus_per_task = parse_count("--cpus-per-task", o.cpus_per_task,
                                     "e.g. --cpus-per-task 4: CPU cores for each rank's threads.");
  }
  int tasks = 0;
  if (!o.ntasks_per_node.empty()) {
    tasks = parse_count("--ntasks-per-node", o.ntasks_per_node,
                        "e.g. --ntasks-per-node 2: ranks per node (one per GPU on GPU nodes).");
  }
  plan_gpus(o, plan);
  tasks = plan_ntasks(o, tasks, plan);
  plan_tasks_per_node(tasks, plan);
}

/// --array-chain: chunks of one training, each resuming from the last one's checkpoint.
void plan_array_chain(const SbatchOptions& o, SbatchPlan& plan) {
  if (o.array_chain.empty()) return;
  plan.array_chain = parse_count("--array-chain", o.array_chain,
                                 "e.g. --array-chain 3 --time 1-00:00:00: three 24 h chunks, each resuming "
                                 "from the last one's checkpoint.");
  if (plan.array_chain < 2 || plan.array_chain > kMaxArrayChain) {
    throw ConfigError("--array-chain " + o.array_chain + ": expected 2-" + std::to_string(kMaxArrayChain) +
                          " chunks, found " + o.array_chain + ".",
                      "drop the option for a single job; SLURM's MaxArraySize is 1001 by default.");
  }
}

/// A sweep's job array (trainctl sweep): no chain on top, a task count SLURM takes, and a run folder
/// that can go into log paths.
void plan_array_tasks(const SbatchOptions& o, SbatchPlan& plan) {
  if (!o.array_tasks) return;
  const ArrayTasks& a = *o.array_tasks;
  if (plan.array_chain > 0) {
    throw ConfigError("--array-chain " + o.array_chain + " in a sweep: expected one job array, found a chain "
                          "requested as well.",
                      "drop --array-chain: each task of a sweep requeues itself and resumes from its own "
                      "checkpoints when its time runs out.");
  }
  if (a.task_args.empty() || static_cast<int>(a.task_args.size()) > kMaxArrayChain + 1) {
    throw ConfigError("sweep: expected 1-" + std::to_string(kMaxArrayChain + 1) + " tasks in the job array, found " +
                          std::to_string(a.task_args.size()) + ".",
                      "SLURM's MaxArraySize is 1001 by default; split the grid into several sweeps.");
  }
  if (a.throttle < 0) {
    throw ConfigError("--throttle " + std::to_string(a.throttle) + ": expected a count of tasks, found a negative one.",
                      "e.g. --throttle 2: at most 2 tasks of the sweep run at once.");
  }
  check_sbatch_word("--output-dir", a.run_root);
  if (a.run_root.front() != '/' || a.run_root.find('%') != std::string::npos) {
    throw ConfigError("--output-dir '" + a.run_root + "': expected an absolute folder without '%', found '" +
                          a.run_root + "'.",
                      "trainctl sweep makes the folder absolute itself; avoid '%', which SLURM expands in log paths.");
  }
  plan.array_tasks = static_cast<int>(a.task_args.size());
}

/// Log paths: a sweep logs into each task's run folder, a chain gets one log per chunk.
void plan_logs(const SbatchOptions& o, SbatchPlan& plan) {
  plan.output = !o.output.empty()          ? o.output
                : plan.array_tasks > 0     ? o.array_tasks->run_root + "/task-%a/" + kSweepLogFile
                : plan.array_chain > 0     ? kDefaultArrayOutput
                                           : kDefaultOutput;
  plan.error = o.error;
  if (o.per_rank_logs) {
    plan.rank_output = per_rank_pattern(plan.output);
    if (!plan.error.empty()) plan.rank_error = per_rank_pattern(plan.error);
  }
}

/// The signal: it must reach the tasks, train must checkpoint on it, and it must come before the end.
void plan_signal(const SbatchOptions& o, SbatchPlan& plan) {
  const std::string signal = o.signal.empty() ? kDefaultSignal : o.signal;
  if (signal == "none") return;
  const SignalSpec spec = parse_signal_spec("--signal", signal);
  if (spec.batch_only) {
    throw ConfigError("--signal '" + signal + "': expected the signal to go to the job's tasks, found 'B:', "
                          "which sends it to the batch shell only.",
                      "drop 'B:' (e.g. --signal " + spec.name + "@" + std::to_string(spec.lead_seconds) +
                          "): train runs in srun's tasks and checkpoints when they get the signal; the batch "
                          "shell runs no training.");
  }
  bool given = false;
  const std::vector<std::string> handled = train_preempt_signals(o.train_args, given);
  if (std::find(handled.begin(), handled.end(), spec.name) == handled.end()) {
    throw ConfigError("--signal '" + signal + "': expected a signal train checkpoints and requeues on (" +
                          (handled.empty() ? std::string("none, with --preempt-signals none")
                                           : text::join(handled, ", ") + (given ? "" : ", its default")) +
                          "), found " + spec.name + ".",
                      "use --signal USR2@120, or pass train --preempt-signals with " + spec.name +
                          " after '--'; --signal none sends nothing.");
  }
  if (plan.time_seconds > 0 && spec.lead_seconds >= plan.time_seconds) {
    throw ConfigError("--signal '" + signal + "' with --time " + o.time + ": expected the signal's " +
                          std::to_string(spec.lead_seconds) + " s lead to be shorter than the time limit (" +
                          duration_text(plan.time_seconds) + "), found it longer.",
                      "the signal would come as the job starts, and train would checkpoint and requeue at "
                      "once, for ever; give a longer --time or a shorter lead, e.g. --signal " + spec.name + "@" +
                          std::to_string(std::max<std::int64_t>(10, plan.time_seconds / 4)) + ".");
  }
  if (spec.name == "USR1") {
    plan.warnings.push_back("--signal " + signal + ": NCCL may use SIGUSR1 itself; USR2 is the safer choice "
                            "(submitit moved its default to USR2 for that reason).");
  }
  plan.signal = spec;
}

/// --setup lines and --container go into the script as they are, so each must be one line.
void check_setup_and_container(const SbatchOptions& o) {
  for (const std::string& line : o.setup) {
    check_single_line("--setup", line);
    if (line.find_first_not_of(" \t") == std::string::npos) {
      throw ConfigError("--setup: expected a shell command, found an empty line.",
                        "e.g. --setup 'module load cuda/12.2' or --setup 'source .venv/bin/activate'.");
    }
  }
  if (!o.container.empty()) check_single_line("--container", o.container);
}

/// --tensorboard ROOT: one plain word, as the script echoes it and `trainctl status` reads it back.
void check_tensorboard(const SbatchOptions& o) {
  if (o.tensorboard.empty()) return;
  for (const char c : o.tensorboard) {
    if (std::isspace(static_cast<unsigned char>(c)) != 0 || std::iscntrl(static_cast<unsigned char>(c)) != 0 ||
        std::string("\"'\\$`").find(c) != std::string::npos) {
      throw ConfigError("--tensorboard '" + o.tensorboard + "': expected a folder path without spaces, quotes, "
                            "backslashes, $ or ` (it goes into the script's log lines, from which trainctl status "
                            "reads it back), found '" + std::string(1, c) + "'.",
                        "pick a folder without spaces, e.g. --tensorboard runs (then: tensorboard --logdir runs).");
    }
  }
}

}  // namespace

SbatchPlan plan_sbatch(const SbatchOptions& o) {
  SbatchPlan plan;
  plan.job_name = checked_job_name(o);
  check_sbatch_words(o);
  plan_layout(o, plan);
  if (!o.time.empty()) plan.time_seconds = parse_time_limit("--time", o.time);
  if (!o.mem.empty()) plan.mem_mb = parse_memory_mb("--mem", o.mem);
  plan_array_chain(o, plan);
  plan_array_tasks(o, plan);
  plan_logs(o, plan);
  plan_signal(o, plan);  // after --time: the signal's lead must fit in the time limit
  check_setup_and_container(o);
  plan.stage = plan_staging(o);
  check_tensorboard(o);
  for (std::string& w : check_health_options(o)) plan.warnings.push_back(std::move(w));
  return plan;
}

}  // namespace train
