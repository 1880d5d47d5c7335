// The options trainctl's job subcommands share: a job's shape (sbatch, sweep, interactive,
// resources), a batch script's logs, signal, data and health check (sbatch, sweep), and the plan
// with its partition checks.
#include <iostream>
#include <string>
#include <vector>

#include "train/launcher/sbatch.h"
#include "trainctl.h"

namespace trainctl {
namespace {

/// A text option of a job request: its flag, the field of SbatchOptions it sets, its --help line and
/// the name its value gets there.
struct JobOption {
  const char* flag;
  std::string train::SbatchOptions::*field;
  std::string help;
  const char* type_name;
};

/// Adds the options of `table` to `cmd` in order, each setting its field of `o`.
void add_job_options(CLI::App* cmd, train::SbatchOptions& o, const std::vector<JobOption>& table) {
  for (const JobOption& opt : table) cmd->add_option(opt.flag, o.*opt.field, opt.help)->type_name(opt.type_name);
}

/// The nodes' health check and the network interface, which the script passes on to train
/// (checked by train::check_health_options); shared by sbatch and sweep through add_batch_options.
void add_health_options(CLI::App* cmd, train::SbatchOptions& o) {
  cmd->add_flag("--health-check", o.health_check,
                "train measures each node's GEMM throughput and all-reduce bandwidth before training and stops "
                "(exit 69) naming the nodes below --health-min-fraction of the others' median");
  cmd->add_option_function<std::string>("--health-min-fraction", [&o](const std::string& v) { o.health_min_fraction = v; },
                                        "with --health-check: a node is bad below F x the others' median GEMM "
                                        "throughput, F in (0, 1] (train's default 0.5)")
      ->type_name("F");
  cmd->add_flag("--health-warn-only", o.health_warn_only, "with --health-check: name the bad nodes, then train anyway");
  cmd->add_flag("--exclude-bad-nodes", o.exclude_bad_nodes,
                "with --health-check: train requeues the job without the bad nodes (at most 3 times; the script "
                "keeps #SBATCH --requeue)");
  cmd->add_option_function<std::string>("--interface", [&o](const std::string& v) { o.interface = v; },
                                        "network interface for train's Gloo, NCCL and rendezvous store, e.g. ib0: "
                                        "exported as TRAIN_INTERFACE. Only the name's syntax is checked here, not "
                                        "that it exists: the compute nodes must have it (train checks it there)")
      ->type_name("IF");
}

/// The flag that turns plan_job()'s partition checks off.
constexpr char kNoClusterChecks[] = "--no-cluster-checks";

}  // namespace

void add_shape_options(CLI::App* cmd, train::SbatchOptions& o) {
  using O = train::SbatchOptions;
  add_job_options(cmd, o, {
      {"--nodes", &O::nodes, "nodes (default 1)", "N"},
      {"--ntasks-per-node", &O::ntasks_per_node, "ranks per node (default: the GPUs per node, else 1)", "N"},
      {"--ntasks", &O::ntasks, "ranks in all, spread over the nodes (instead of --ntasks-per-node)", "N"},
      {"--gpus-per-node", &O::gpus_per_node, "GPUs per node, [TYPE:]N; one rank per GPU", "[TYPE:]N"},
      {"--cpus-per-task", &O::cpus_per_task, "CPU cores per rank", "N"},
      {"--mem", &O::mem, "memory per node, N[K|M|G|T]", "SIZE"},
      {"--time", &O::time, "time limit: minutes, m:s, h:m:s, d-h, d-h:m, d-h:m:s or INFINITE", "LIMIT"},
      {"--partition", &O::partition, "partition (default: the cluster's default)", "NAME"},
      {"--account", &O::account, "account to charge", "NAME"},
      {"--qos", &O::qos, "quality of service", "NAME"},
      {"--gres", &O::gres, "generic resources per node: gpu:N, gpu:TYPE:N, shard:N", "SPEC"},
      {"--constraint", &O::constraint, "node features, e.g. v100", "FEATURES"},
      {"--job-name", &O::job_name, std::string("job name (default ") + train::kDefaultJobName + ")", "NAME"},
  });
}

void add_batch_options(CLI::App* cmd, train::SbatchOptions& o) {
  using O = train::SbatchOptions;
  add_job_options(cmd, o, {
      {"--output", &O::output, std::string("log file pattern (default ") + train::kDefaultOutput + ")", "PATTERN"},
      {"--error", &O::error, "stderr's own file pattern, e.g. logs/err%j.log (default: in the --output log)", "PATTERN"},
  });
  cmd->add_flag("--per-rank-logs", o.per_rank_logs,
                "one log per rank: srun --output=LOG-%t.EXT (and --error), next to the job's log");
  add_job_options(cmd, o, {
      {"--signal", &O::signal, std::string("[R:]SIG[@SECONDS] sent to the tasks before the time limit, or none (default ") +
                                   train::kDefaultSignal + ")", "SPEC"},
  });
  cmd->add_option("--setup", o.setup, "a shell line run before srun, e.g. 'module load cuda' (repeatable)")
      ->allow_extra_args(false)
      ->type_name("LINE");
  add_job_options(cmd, o, {
      {"--container", &O::container, "run the tasks in `apptainer exec --nv IMAGE`", "IMAGE"},
      {"--stage-data", &O::stage_data,
       "data put on every node's local disk ($SLURM_TMPDIR) and given to train as --data: a tar archive, extracted; "
       "or shards copied as they are: a pattern 'DIR/train-{000000..000127}.tar', a '::' list, or a folder of *.tar",
       "SOURCE"},
      {"--stage-subdir", &O::stage_subdir, "the folder inside the --stage-data archive that holds the data files", "DIR"},
      {"--stage-mode", &O::stage_mode,
       "auto (default: an archive is extracted, a pattern or folder copied), copy (also a single file, as it is) "
       "or extract", "MODE"},
      {"--program", &O::program, "run PATH in the tasks instead of train (default: $TRAIN_BIN, else build/bin/train)", "PATH"},
      {"--tensorboard", &O::tensorboard,
       "train writes TensorBoard event files into a folder per job under ROOT (ROOT/NAME-JOBID), where a requeued "
       "run goes on; trainctl status shows it", "ROOT"},
  });
  // A callback rather than CLI11's "!--no-preflight" negation, which --help shows as `--no-preflight{false}`.
  cmd->add_flag_callback("--no-preflight", [&o] { o.preflight = false; },
                         "skip the `trainctl preflight` step before training");
  cmd->add_option("--max-restarts", o.max_restarts,
                  "trainctl run launches the training step again in the allocation after a lost rank or node, at "
                  "most N times (0: never)")
      ->check(CLI::Range(0, 1000))
      ->type_name("N")
      ->capture_default_str();
  add_health_options(cmd, o);
}

void add_no_cluster_checks_flag(CLI::App* cmd) {
  cmd->add_flag(kNoClusterChecks, "don't compare the request with the partitions sinfo reports");
}

train::SbatchPlan plan_job(const train::SbatchOptions& o, const CLI::App& cmd, bool with_plan_warnings) {
  const train::SbatchPlan plan = train::plan_sbatch(o);
  std::vector<std::string> warnings;
  if (with_plan_warnings) warnings = plan.warnings;
  if (cmd.count(kNoClusterChecks) == 0) {
    if (const auto partitions = train::query_partitions()) {
      for (std::string& w : train::check_against_partitions(o, plan, *partitions)) warnings.push_back(std::move(w));
    }
  }
  for (const std::string& w : warnings) std::cerr << "trainctl " << cmd.get_name() << ": warning: " << w << std::endl;
  return plan;
}

}  // namespace trainctl
