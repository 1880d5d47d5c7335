// Shared SLURM test helpers (slurm_util.h).
#include "slurm_util.h"

#include <sys/stat.h>

#include <cstdlib>
#include <sstream>

namespace train::test {

std::string slurm_conf() {
  const char* conf = std::getenv("SLURM_CONF");
  if (conf != nullptr && *conf != '\0') return conf;
  const std::string local = std::string(TRAIN_SOURCE_DIR) + "/.slurm/slurm.conf";
  struct stat st {};
  return stat(local.c_str(), &st) == 0 ? local : "";
}

Env slurm_env() {
  Env env = hermetic_env();
  const std::string conf = slurm_conf();
  if (!conf.empty()) env["SLURM_CONF"] = conf;
  return env;
}

std::unique_ptr<TestProcess> run_in(const std::string& dir, const std::vector<std::string>& argv, const Env& env,
                                    double timeout_s) {
  std::vector<std::string> full = {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", dir};
  full.insert(full.end(), argv.begin(), argv.end());
  return run_process(full, env, timeout_s);
}

std::string cluster_problem(const Env& env) {
  for (const char* tool : {"sbatch", "sinfo", "scontrol", "scancel", "srun", "salloc"}) {
    if (find_on_path(tool).empty()) return std::string(tool) + " is not on PATH (SLURM's client is not installed).";
  }
  const auto p = run_process({find_on_path("sinfo"), "-h", "-N", "-o", "%N %t %c"}, env, 20);
  if (!p->finished() || p->exit_code() != 0) {
    std::string err = p->err();
    while (!err.empty() && err.back() == '\n') err.pop_back();
    return "sinfo fails (exit " + std::to_string(p->exit_code()) + "): " + err + " (SLURM_CONF=" +
           (env.count("SLURM_CONF") ? env.at("SLURM_CONF") : "unset") + ")";
  }
  int ready = 0;
  for (const std::string& line : lines_of(p->out())) {
    std::istringstream in(line);
    std::string node, state;
    int cpus = 0;
    in >> node >> state >> cpus;
    const bool up = state.rfind("idle", 0) == 0 || state.rfind("mix", 0) == 0 || state.rfind("alloc", 0) == 0 ||
                    state.rfind("comp", 0) == 0;
    if (up && cpus >= 2) ++ready;
  }
  if (ready < 2) return "expected 2 nodes with 2 CPUs up (idle, mix, alloc or comp), found sinfo says:\n" + p->out();
  return "";
}

}  // namespace train::test
