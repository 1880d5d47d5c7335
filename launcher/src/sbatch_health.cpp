// The health-check and network-interface options of `trainctl sbatch` and `trainctl
// sweep` (--health-check, --health-min-fraction, --health-warn-only, --exclude-bad-nodes,
// --interface), checked as train checks its own flags, and the train arguments they become. The
// script writer (sbatch_script.cpp) adds those arguments and exports TRAIN_INTERFACE.
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "train/base/error.h"
#include "train/launcher/sbatch.h"

namespace train {
namespace {

/// How `name` appears among train's arguments ("--name", "--name VALUE" for a flag that takes one,
/// or "--name=..."), or "" when it doesn't.
std::string among_train_args(const std::vector<std::string>& args, const std::string& name, bool takes_value = false) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind(name + "=", 0) == 0) return args[i];
    if (args[i] == name) return takes_value && i + 1 < args.size() ? name + " " + args[i + 1] : name;
  }
  return "";
}

/// A flag given both as a trainctl option (`here`, as typed; "" when not) and after "--": one place
/// is enough, and two would make the script's train command line say it twice.
void check_given_once(const std::vector<std::string>& train_args, const std::string& name, const std::string& here,
                      bool takes_value = false) {
  if (here.empty()) return;
  const std::string there = among_train_args(train_args, name, takes_value);
  if (there.empty()) return;
  throw ConfigError(name + ": expected it once, found it both as a trainctl option (" + here +
                        ") and among train's arguments after '--' (" + there + ").",
                    "drop one of the two: the trainctl option " +
                        (name == "--interface" ? std::string("exports TRAIN_INTERFACE for the job's tasks")
                                               : std::string("goes on train's command line in the script")) +
                        ", and an argument after '--' goes to train as it is.");
}

/// --health-min-fraction F: a decimal number in (0, 1], as train takes it.
void check_min_fraction(const std::string& text) {
  const std::string hint = "a node is bad when its GEMM throughput is below F x the other nodes' median; the default "
                           "is 0.5, e.g. --health-min-fraction 0.7.";
  const bool decimal = !text.empty() && text.find_first_not_of("0123456789.eE+-") == std::string::npos &&
                       text.find_first_of("0123456789") != std::string::npos;
  char* end = nullptr;
  const double value = decimal ? std::strtod(text.c_str(), &end) : 0.0;
  if (!decimal || end == nullptr || *end != '\0' || !std::isfinite(value)) {
    throw ConfigError("--health-min-fraction '" + text + "': expected a fraction in (0, 1], found " +
                          (text.empty() ? std::string("an empty value") : "'" + text + "', not a decimal number") + ".",
                      hint);
  }
  if (!(value > 0 && value <= 1)) {
    throw ConfigError("--health-min-fraction '" + text + "': expected a fraction in (0, 1], found " + text + ".", hint);
  }
}

/// --interface IF: the syntax of a Linux interface name. Whether the nodes have it is train's check,
/// on the nodes: the submit host's interfaces say nothing about theirs.
void check_interface_name(const std::string& name) {
  const std::string hint = "name it as `ip -brief link` lists it on the compute nodes, e.g. --interface ib0 or eth0 "
                           "(trainctl doesn't look for it on this host; train checks it on the nodes and lists theirs).";
  const std::string what = "--interface '" + name + "': expected a network interface name (1-" +
                           std::to_string(kMaxInterfaceName) + " characters, no '/' or whitespace), found ";
  if (name.empty()) throw ConfigError(what + "an empty one.", hint);
  if (name.size() > kMaxInterfaceName) {
    throw ConfigError(what + std::to_string(name.size()) + " characters.", hint);
  }
  if (name == "." || name == "..") throw ConfigError(what + "'" + name + "'.", hint);
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '/' || std::isspace(u) != 0 || std::iscntrl(u) != 0 || c == '\'' || c == '"' || c == '\\') {
      throw ConfigError(what + (std::isspace(u) != 0 || std::iscntrl(u) != 0 ? std::string("whitespace")
                                                                             : "'" + std::string(1, c) + "'") +
                            " in it.",
                        hint);
    }
  }
}

}  // namespace

std::vector<std::string> check_health_options(const SbatchOptions& o) {
  const std::vector<std::string>& args = o.train_args;
  check_given_once(args, "--health-check", o.health_check ? "--health-check" : "");
  check_given_once(args, "--health-min-fraction",
                   o.health_min_fraction ? "--health-min-fraction " + *o.health_min_fraction : "", true);
  check_given_once(args, "--health-warn-only", o.health_warn_only ? "--health-warn-only" : "");
  check_given_once(args, "--exclude-bad-nodes", o.exclude_bad_nodes ? "--exclude-bad-nodes" : "");
  check_given_once(args, "--interface", o.interface ? "--interface " + *o.interface : "", true);
  if (o.health_min_fraction) check_min_fraction(*o.health_min_fraction);
  if (o.interface) check_interface_name(*o.interface);

  const bool check = o.health_check || !among_train_args(args, "--health-check").empty();
  const bool warn_only = o.health_warn_only || !among_train_args(args, "--health-warn-only").empty();
  const bool exclude = o.exclude_bad_nodes || !among_train_args(args, "--exclude-bad-nodes").empty();
  for (const auto& [given, name] : {std::pair{o.exclude_bad_nodes, "--exclude-bad-nodes"},
                                    std::pair{o.health_warn_only, "--health-warn-only"}}) {
    if (given && !check) {
      throw ConfigError(std::string(name) + ": expected --health-check too, found it alone.",
                        std::string("add --health-check (") + name + " acts on the nodes it finds bad), or drop " +
                            name + ".");
    }
  }
  if ((o.exclude_bad_nodes || o.health_warn_only) && warn_only && exclude) {
    throw ConfigError("--exclude-bad-nodes with --health-warn-only: expected one of them, found both.",
                      "keep one: --health-warn-only names the bad nodes and trains on them anyway; "
                      "--exclude-bad-nodes requeues the job without them.");
  }
  std::vector<std::string> warnings;
  if (o.health_min_fraction && !check) {
    warnings.push_back("--health-min-fraction " + *o.health_min_fraction +
                       " without --health-check: it applies only to jobs submitted with --health-check "
                       "(e.g. sbatch SCRIPT --health-check).");
  }
  return warnings;
}

std::vector<std::string> health_train_args(const SbatchOptions& o) {
  std::vector<std::string> out;
  if (o.health_check) out.push_back("--health-check");
  if (o.health_min_fraction) {
    out.push_back("--health-min-fraction");
    out.push_back(*o.health_min_fraction);
  }
  if (o.health_warn_only) out.push_back("--health-warn-only");
  if (o.exclude_bad_nodes) out.push_back("--exclude-bad-nodes");
  return out;
}

}  // namespace train
