// `trainctl sbatch`: generates the sbatch scripts users submit (scripts/ddp*.sh are its output),
// validates a request before it reaches the queue, and asks the cluster (sinfo, sbatch) when it can.
// See docs/slurm.md. No LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/base/env.h"

namespace train {

/// The tasks of a job array that runs one training per task with its own arguments (a sweep made by
/// `trainctl sweep`, see sweep.h): task i runs in `run_root`/task-i, which holds its checkpoints and
/// metrics, with `task_args[i]` appended to train's arguments.
struct ArrayTasks {
  std::vector<std::vector<std::string>> task_args;  ///< extra train arguments of each task (0-based)
  int throttle = 0;                                 ///< at most this many tasks at once (%N); 0: all
  std::string run_root;                             ///< absolute folder that holds the task folders
};

/// A request for a generated sbatch script, as typed on `trainctl sbatch`'s command line. Every
/// value is the user's text ("" when not given), so that it lands verbatim in the #SBATCH lines once
/// plan_sbatch() has checked it.
struct SbatchOptions {
  std::string nodes;             ///< --nodes N (default 1)
  std::string ntasks_per_node;   ///< --ntasks-per-node N (default: GPUs per node, else 1)
  std::string ntasks;            ///< --ntasks N, ranks in all (default: nodes x tasks per node)
  std::string gpus_per_node;     ///< --gpus-per-node [TYPE:]N: one task per GPU
  std::string cpus_per_task;     ///< --cpus-per-task N
  std::string mem;               ///< --mem SIZE, per node: N[K|M|G|T]
  std::string time;              ///< --time LIMIT, in one of SLURM's formats (see parse_time_limit)
  std::string partition;         ///< --partition (default: the cluster's default partition)
  std::string account;           ///< --account
  std::string qos;               ///< --qos
  std::string gres;              ///< --gres, e.g. gpu:2, gpu:a100:2 or shard:16
  std::string constraint;        ///< --constraint
  std::string job_name;          ///< --job-name (default kDefaultJobName)
  std::string output;            ///< --output (default kDefaultOutput, kDefaultArrayOutput for chains)
  std::string error;             ///< --error: stderr's own file (default: with stdout in --output)
  bool per_rank_logs = false;    ///< --per-rank-logs: srun writes one file per rank (per_rank_pattern)
  std::string program;           ///< --program PATH: what srun runs instead of train (TRAIN_BIN)
  bool preflight = true;         ///< false with --no-preflight: no `trainctl preflight` step
  int max_restarts = 3;          ///< --max-restarts N: `trainctl run` relaunches a step that lost a rank or node
  std::optional<ArrayTasks> array_tasks;  ///< a sweep's job array (trainctl sweep), or none
  std::string array_chain;       ///< --array-chain N: `--array=1-N%1`, chunks that resume in turn
  std::string signal;            ///< --signal [R:]SIG[@SECONDS]; "" = kDefaultSignal; "none" = no line
  std::vector<std::string> setup;       ///< --setup LINE, run in the batch shell before srun
  std::string container;         ///< --container IMAGE: tasks run in `apptainer exec --nv IMAGE`
  /// --stage-data SOURCE: what the script puts on every node's local disk for train's --data: a tar
  /// archive, extracted there; or shards copied as they are: a brace pattern
  /// (DIR/train-{000000..000127}.tar), a "::" list of patterns, or a folder of *.tar files (plan_staging)
  std::string stage_data;
  std::string stage_subdir;      ///< --stage-subdir DIR: the folder inside the archive train reads
  std::string stage_mode;        ///< --stage-mode auto|copy|extract ("" = auto; see plan_staging)
  /// --tensorboard ROOT: train writes TensorBoard event files into a folder per job under ROOT
  /// (ROOT/<job name>-<job id>; a sweep's task: ROOT/<job name>-<array id>/task-N), where a
  /// requeued run or the next chunk goes on; relative to the submit dir, so on the shared file system
  std::string tensorboard;
  // The nodes' health check and the network interface, passed on to train (see
  // check_health_options). A flag given here must not be among train_args as well.
  bool health_check = false;                        ///< --health-check: train measures the nodes first
  std::optional<std::string> health_min_fraction;   ///< --health-min-fraction F, as typed
  bool health_warn_only = false;                    ///< --health-warn-only: name bad nodes, train anyway
  bool exclude_bad_nodes = false;                   ///< --exclude-bad-nodes: requeue without bad nodes
  std::optional<std::string> interface;             ///< --interface IF: exported as TRAIN_INTERFACE
  std::vector<std::string> train_args;  ///< arguments for train, after "--"
  /// The trainctl command line that made this request (the words after "trainctl"), recorded in the
  /// script's header so that it can be regenerated; empty for none.
  std::vector<std::string> command;
};

/// Job name when --job-name is not given.
constexpr char kDefaultJobName[] = "train";
/// Log file when --output is not given: logs/<job name>-<job id>.out, relative to the submit dir.
constexpr char kDefaultOutput[] = "logs/%x-%j.out";
/// Log file of an array chain's chunk: logs/<job name>-<array job id>_<chunk>.out.
constexpr char kDefaultArrayOutput[] = "logs/%x-%A_%a.out";
/// Signal the job's tasks get before the time limit: USR2 (not USR1, which NCCL may use), 120 s
/// before, to the job steps rather than to the batch shell (no "B:").
constexpr char kDefaultSignal[] = "USR2@120";
/// Longest array chain: SLURM's default MaxArraySize is 1001 (indices 0-1000).
constexpr int kMaxArrayChain = 1000;
/// parse_time_limit()'s result for INFINITE, UNLIMITED and 0.
constexpr std::int64_t kTimeUnlimited = -1;

/// A parsed --signal value.
struct SignalSpec {
  bool batch_only = false;   ///< "B:": only the batch shell gets it
  bool reservation = false;  ///< "R:": also when a reservation ends
  std::string name;          ///< canonical name without "SIG" (USR2), or the number as given
  int number = 0;            ///< signal number
  int lead_seconds = 60;     ///< seconds before the time limit (SLURM's default 60)
};

/// Parses `[{R|B|RB}:]SIG[@SECONDS]` as sbatch --signal does: SIG is a name with or without "SIG"
/// (any case) or a number; SECONDS is 0-65535 (empty or missing: 60).
/// @param option the option the value came from, for messages.
/// @throws train::ConfigError for anything sbatch would reject.
SignalSpec parse_signal_spec(const std::string& option, const std::string& value);

/// Parses a time limit in the formats sbatch accepts: "minutes", "minutes:seconds",
/// "hours:minutes:seconds", "days-hours", "days-hours:minutes", "days-hours:minutes:seconds", and
/// INFINITE or UNLIMITED (any case). Fields are decimal and unbounded, as in SLURM (1:90:00 is 2.5 h).
/// @return the limit in seconds, or kTimeUnlimited for INFINITE, UNLIMITED and 0.
/// @throws train::ConfigError naming `option` for any other text.
std::int64_t parse_time_limit(const std::string& option, const std::string& value);

/// Parses a memory size as sbatch --mem does: N with an optional unit K, M (default), G or T.
/// @return the size in MiB (rounded up).
/// @throws train::ConfigError naming `option` for any other text.
std::int64_t parse_memory_mb(const std::string& option, const std::string& value);

/// Longest network interface name Linux takes (IFNAMSIZ - 1).
constexpr std::size_t kMaxInterfaceName = 15;

/// Checks the health-check and interface options of a request as train checks its own
/// flags: --health-warn-only and --exclude-bad-nodes need --health-check (here or among train's
/// arguments) and exclude each other; --health-min-fraction is a number in (0, 1]; --interface is an
/// interface name's syntax (1-15 characters, no '/', whitespace or quotes; whether the compute nodes
/// have it is train's check, there); a flag given here is not among train's arguments as well.
/// @return warnings (--health-min-fraction without --health-check).
/// @throws train::ConfigError naming the option, with what was expected and found, and a hint.
std::vector<std::string> check_health_options(const SbatchOptions& options);

/// The train arguments for the health-check options of a request, in train's spelling, e.g.
/// {"--health-check", "--health-min-fraction", "0.7"}; empty when none was given.
std::vector<std::string> health_train_args(const SbatchOptions& options);

/// How --stage-data puts the data on the nodes.
enum class StageMode {
  none,     ///< no --stage-data
  extract,  ///< one tar archive, extracted on every node (tar -xf)
  copy,     ///< files (WebDataset shards) copied as they are, names kept, into one folder per node
};

/// What --stage-data stages, as plan_staging() works it out.
struct StagePlan {
  StageMode mode = StageMode::none;
  std::string archive;              ///< extract: the archive, as given (checked on the nodes, not here)
  std::vector<std::string> files;   ///< copy: the files, in the pattern's order (a folder's sorted), as given
  std::int64_t bytes = 0;           ///< copy: their total size when the script was generated
  bool from_folder = false;         ///< copy: --stage-data named a folder (train gets the staged folder)
  /// copy: train's --data under the staged folder, one per "::" item: the pattern's file part as typed
  /// ("train-{000000..000127}.tar"), so train expands it as the user wrote it; empty for a folder
  std::vector<std::string> data_names;
};

/// Works out --stage-data, --stage-subdir and --stage-mode, reading the file system for shards:
/// - auto (the default): a folder copies its *.tar files (sorted by name); a brace pattern or a "::"
///   list (what expand_braces() expands to more than the text itself) copies the files it names;
///   anything else is one tar archive, extracted on every node as before (it may exist only there);
/// - copy: also a single file is copied as it is (a lone shard);
/// - extract: one tar archive, never a folder or a pattern.
/// Copied files must exist, be regular and readable, have distinct names, and a pattern's braces must
/// be in its file name (the copies share one folder); their total size is measured here and again
/// in the script. --stage-subdir is for an archive only; train's --data must not be given as well.
/// @throws train::ConfigError naming the option and the file (for a pattern, the first one missing),
///   with what was expected and found, and a hint.
StagePlan plan_staging(const SbatchOptions& options);

/// A request after validation: the numbers plan_sbatch() derived.
struct SbatchPlan {
  int nodes = 1;
  int tasks_per_node = 1;
  int cpus_per_task = 0;              ///< 0: not requested (SLURM's default, 1)
  int gpus_per_node = 0;              ///< GPUs each node must show (1 for shards), 0: none requested
  std::string gpu_request;            ///< how the GPUs were requested, for messages ("--gres gpu:2")
  bool shard = false;                 ///< GPUs requested as shards of a shared GPU
  std::int64_t time_seconds = 0;      ///< --time in seconds; 0 not given; kTimeUnlimited
  std::int64_t mem_mb = 0;            ///< --mem in MiB; 0 not given
  std::optional<SignalSpec> signal;   ///< none with --signal none
  int array_chain = 0;                ///< chunks; 0 for a single job
  int ntasks = 0;                     ///< --ntasks; 0 when not given (nodes x tasks_per_node)
  int array_tasks = 0;                ///< tasks of a sweep's job array; 0 for none
  std::string job_name;
  std::string output;
  std::string error;                  ///< --error pattern, "" when stderr goes with stdout
  std::string rank_output;            ///< srun's --output per rank with --per-rank-logs, else ""
  std::string rank_error;             ///< srun's --error per rank with --per-rank-logs and --error
  StagePlan stage;                    ///< --stage-data: what each node gets, and how
  std::vector<std::string> warnings;  ///< things worth saying that don't stop the generation
};

/// Checks a request and derives its layout. Checks: counts are positive integers; --time, --mem,
/// --signal and --gres parse; --gpus-per-node, --gres gpu:N and --ntasks-per-node agree (one task
/// per GPU); shards come with one task per node; the signal's lead time is shorter than the time
/// limit and the signal is one train checkpoints on (not B:, which reaches only the batch shell);
/// values on #SBATCH lines have no spaces or quotes; --setup lines are single lines; --stage-data
/// passes plan_staging() (which reads the file system for shards); the health-check and
/// --interface options pass check_health_options().
/// @throws train::ConfigError naming the option, with what was expected and found, and a hint.
SbatchPlan plan_sbatch(const SbatchOptions& options);

/// The job's shape and resource flags as sbatch and salloc take them, in #SBATCH order: --job-name,
/// --nodes, --ntasks, --ntasks-per-node, --cpus-per-task, --gpus-per-node, --gres, --mem, --time,
/// --partition, --account, --qos, --constraint (each "--flag=value", only those that apply). The batch
/// script's directives and `trainctl interactive`'s salloc line both come from this one list.
std::vector<std::string> job_shape_flags(const SbatchOptions& options, const SbatchPlan& plan);

/// The batch script for a request that plan_sbatch() accepted.
std::string render_sbatch_script(const SbatchOptions& options, const SbatchPlan& plan);

/// plan_sbatch() then render_sbatch_script().
/// @throws train::ConfigError as plan_sbatch().
std::string generate_sbatch_script(const SbatchOptions& options);

/// One partition as sinfo reports it, merged over its lines (one per node configuration).
struct PartitionInfo {
  std::string name;
  bool is_default = false;
  std::string availability;           ///< "up", "down", "drain", "inact"
  int nodes = 0;                      ///< nodes in the partition
  int max_cpus_per_node = 0;          ///< CPUs of its biggest node
  std::int64_t max_memory_mb = 0;     ///< RealMemory of its biggest node
  std::vector<std::string> gres;      ///< gres of its node configurations ("(null)" dropped)
  std::int64_t max_time_seconds = kTimeUnlimited;  ///< MaxTime
};

/// The sinfo format parse_sinfo_partitions() reads: partition|avail|nodes|cpus|memory|gres|timelimit.
constexpr char kSinfoPartitionFormat[] = "%P|%a|%D|%c|%m|%G|%l";

/// Parses the output of `sinfo -h -o kSinfoPartitionFormat` (the default partition carries a '*').
/// Lines that don't parse are skipped.
std::vector<PartitionInfo> parse_sinfo_partitions(const std::string& text);

/// Asks the cluster about its partitions with sinfo (10 s at most).
/// @return std::nullopt when sinfo is not installed or fails (no cluster reachable): the caller
///   skips the checks that need it.
std::optional<std::vector<PartitionInfo>> query_partitions();

/// Checks a plan against the partition it will run in (--partition, else the default one): the
/// partition exists, has enough nodes, CPUs per node for tasks x CPUs per task, memory per node,
/// a MaxTime that admits --time, and GPUs (gres gpu or shard) when GPUs are requested.
/// @return warnings (e.g. the partition is down).
/// @throws train::ConfigError naming the option that can't be satisfied, with sinfo's numbers.
std::vector<std::string> check_against_partitions(const SbatchOptions& options, const SbatchPlan& plan,
                                                  const std::vector<PartitionInfo>& partitions);

/// What `sbatch --test-only` says about a script.
struct TestOnlyResult {
  std::string job_id;       ///< the id sbatch used for the test (not a real job)
  std::string start_time;   ///< "2026-11-26T02:42:19"
  std::string processors;   ///< "4"
  std::string nodes;        ///< "node[1-2]"
  std::string partition;    ///< "debug"
  std::string raw;          ///< sbatch's whole message
};

/// Parses sbatch --test-only's message ("sbatch: Job 12 to start at T using P processors on nodes N
/// in partition P").
/// @throws train::ConfigError when the message has no start time.
TestOnlyResult parse_test_only(const std::string& message);

/// Runs `sbatch --test-only` on a script (given as text, passed on stdin) in the current folder.
/// @throws train::ConfigError when sbatch is missing, rejects the script, or says no start time.
TestOnlyResult sbatch_test_only(const std::string& script);

/// Submits a script (given as text, passed on stdin) with `sbatch --parsable` from the current
/// folder, after creating the folder of its log file (SLURM fails a job whose log folder is
/// missing, before the script runs).
/// @return the job id.
/// @throws train::ConfigError when sbatch is missing or rejects the script.
std::string sbatch_submit(const std::string& script, const std::string& output_pattern);

/// The folder part of an --output pattern when it must exist before submission ("logs" for
/// "logs/%x-%j.out"); "" when there is none or it contains a '%' pattern.
std::string output_folder(const std::string& output_pattern);

/// The per-rank form of a log file pattern, for srun's --output/--error: "-%t" (the task's rank)
/// before the extension of the file name, e.g. logs/out%j.log gives logs/out%j-%t.log and logs/x
/// gives logs/x-%t. trainctl logs finds a rank's file the same way from the job's log path.
std::string per_rank_pattern(const std::string& pattern);

/// `value` quoted for bash when it needs it: plain words stay as they are, others get single quotes.
std::string shell_quote(const std::string& value);

/// The value of the last `--flag V` or `--flag=V` among train's arguments (train keeps the last
/// copy of a flag, and takes `_` for `-` in a flag's name: `--checkpoint_dir`), or "" when it is
/// not there. `names` are the flag's spellings; `found`, if
/// given, says whether any was there.
std::string train_flag_value(const std::vector<std::string>& args, const std::vector<std::string>& names,
                            bool* found = nullptr);

}  // namespace train
