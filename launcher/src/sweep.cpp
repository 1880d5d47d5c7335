// `trainctl sweep`'s grid and index file, and `trainctl sweep-report`'s table: parsing --param,
// the combinations, DIR/sweep.json, and the final metrics each task's metrics file holds.
#include "train/launcher/sweep.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "train/base/error.h"
#include "train/base/files.h"

namespace train {
namespace {

constexpr char kParamHint[] =
    "write --param NAME=V1,V2,... with train's flag name and comma-separated values, e.g. --param lr=0.1,0.5,1.0 "
    "--param batch-size=64,128.";

/// The metric columns of the report, in order, where any task has them.
const std::vector<std::string> kReportMetrics = {"test_accuracy", "test_loss", "train_loss", "epochs",
                                                 "images_per_sec"};

std::string format_number(const std::string& name, double v) {
  char buf[64];
  if (name == "epochs" || name == "steps") {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else if (name == "images_per_sec") {
    std::snprintf(buf, sizeof(buf), "%.1f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.4f", v);
  }
  return buf;
}

std::vector<std::string> present_metrics(const std::vector<SweepResult>& results) {
  std::vector<std::string> names;
  for (const std::string& m : kReportMetrics) {
    for (const SweepResult& r : results) {
      if (r.metrics.count(m) != 0) {
        names.push_back(m);
        break;
      }
    }
  }
  return names;
}

}  // namespace

SweepParam parse_sweep_param(const std::string& text) {
  const std::size_t eq = text.find('=');
  if (eq == std::string::npos) {
    throw ConfigError("--param '" + text + "': expected NAME=V1,V2,..., found no '='.", kParamHint);
  }
  SweepParam p;
  p.name = text.substr(0, eq);
  if (p.name.rfind("--", 0) == 0) p.name = p.name.substr(2);
  const bool name_ok = !p.name.empty() && std::isalpha(static_cast<unsigned char>(p.name[0])) != 0 &&
                       std::all_of(p.name.begin(), p.name.end(), [](unsigned char c) {
                         return std::isalnum(c) != 0 || c == '-' || c == '_';
                       });
  if (!name_ok) {
    throw ConfigError("--param '" + text + "': expected a flag name before '=' (letters, digits, '-', '_', starting "
                          "with a letter), found '" + text.substr(0, eq) + "'.",
                      kParamHint);
  }
  const std::string list = text.substr(eq + 1);
  std::size_t start = 0;
  std::set<std::string> seen;
  while (true) {
    const std::size_t comma = list.find(',', start);
    const std::string value = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (value.empty()) {
      throw ConfigError("--param '" + text + "': expected a value for " + p.name + " between every pair of commas, "
                            "found an empty one.",
                        kParamHint);
    }
    for (const char c : value) {
      if (std::isspace(static_cast<unsigned char>(c)) != 0 || std::iscntrl(static_cast<unsigned char>(c)) != 0) {
        throw ConfigError("--param '" + text + "': expected values without spaces or control characters, found '" +
                              value + "'.",
                          kParamHint);
      }
    }
    if (!seen.insert(value).second) {
      throw ConfigError("--param '" + text + "': expected distinct values of " + p.name + ", found '" + value +
                            "' twice.",
                        "give each value once; a repeated value would train the same combination twice.");
    }
    p.values.push_back(value);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return p;
}

std::vector<SweepPoint> sweep_grid(const std::vector<SweepParam>& params) {
  if (params.empty()) {
    throw ConfigError("sweep: expected at least one --param NAME=V1,V2,..., found none: the sweep would be empty.",
                      kParamHint);
  }
  std::set<std::string> names;
  std::size_t total = 1;
  for (const SweepParam& p : params) {
    if (!names.insert(p.name).second) {
      throw ConfigError("--param " + p.name + ": expected each parameter once, found " + p.name + " twice.",
                        "list all its values in one --param, e.g. --param " + p.name + "=0.1,0.5.");
    }
    if (p.values.empty()) {
      throw ConfigError("--param " + p.name + ": expected at least one value, found none: the sweep would be empty.",
                        kParamHint);
    }
    total *= p.values.size();
    if (total > static_cast<std::size_t>(kMaxSweepTasks)) {
      throw ConfigError("sweep: expected at most " + std::to_string(kMaxSweepTasks) +
                            " combinations (SLURM's default MaxArraySize), found more than that in the grid.",
                        "sweep fewer values, or split the grid into several sweeps.");
    }
  }
  std::vector<SweepPoint> grid(1);
  for (const SweepParam& p : params) {
    std::vector<SweepPoint> next;
    for (const SweepPoint& base : grid) {
      for (const std::string& v : p.values) {
        SweepPoint point = base;
        point.emplace_back(p.name, v);
        next.push_back(std::move(point));
      }
    }
    grid = std::move(next);
  }
  return grid;
}

std::vector<std::string> sweep_point_args(const SweepPoint& point) {
  std::vector<std::string> args;
  for (const auto& [name, value] : point) {
    args.push_back("--" + name);
    args.push_back(value);
  }
  return args;
}

std::string sweep_task_dir(const std::string& output_dir, int task) {
  return files::join(output_dir, "task-" + std::to_string(task));
}

std::string render_sweep_index(const SweepIndex& index) {
  nlohmann::ordered_json j;
  j["job_name"] = index.job_name;
  j["job_id"] = index.job_id;
  j["output_dir"] = index.output_dir;
  j["params"] = index.param_names;
  j["train_args"] = index.train_args;
  nlohmann::ordered_json tasks = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < index.tasks.size(); ++i) {
    nlohmann::ordered_json values = nlohmann::ordered_json::object();
    for (const auto& [name, value] : index.tasks[i]) values[name] = value;
    tasks.push_back({{"task", i}, {"run_dir", "task-" + std::to_string(i)}, {"params", values}});
  }
  j["tasks"] = tasks;
  return j.dump(2) + "\n";
}

SweepIndex parse_sweep_index(const std::string& text, const std::string& path) {
  const auto bad = [&](const std::string& what) {
    return ConfigError(path + ": expected a sweep index written by trainctl sweep (job_name, params, tasks), found " +
                           what + ".",
                       "point sweep-report at the --output-dir of a sweep, the folder that holds sweep.json.");
  };
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw bad("text that is not a JSON object");
  if (!j.contains("params") || !j["params"].is_array() || !j.contains("tasks") || !j["tasks"].is_array()) {
    throw bad("no params or tasks list");
  }
  SweepIndex index;
  index.job_name = j.value("job_name", "");
  index.job_id = j.value("job_id", "");
  index.output_dir = j.value("output_dir", "");
  for (const auto& name : j["params"]) {
    if (!name.is_string()) throw bad("a parameter name that is not a string");
    index.param_names.push_back(name.get<std::string>());
  }
  if (j.contains("train_args") && j["train_args"].is_array()) {
    for (const auto& a : j["train_args"]) {
      if (a.is_string()) index.train_args.push_back(a.get<std::string>());
    }
  }
  for (std::size_t i = 0; i < j["tasks"].size(); ++i) {
    const auto& t = j["tasks"][i];
    if (!t.is_object() || t.value("task", -1) != static_cast<int>(i) || !t.contains("params") ||
        !t["params"].is_object()) {
      throw bad("task entry " + std::to_string(i) + " without its task number or params");
    }
    SweepPoint point;
    for (const std::string& name : index.param_names) {
      if (!t["params"].contains(name) || !t["params"][name].is_string()) {
        throw bad("task " + std::to_string(i) + " without a value for " + name);
      }
      point.emplace_back(name, t["params"][name].get<std::string>());
    }
    index.tasks.push_back(std::move(point));
  }
  if (index.tasks.empty()) throw bad("no tasks (an empty sweep)");
  return index;
}

SweepResult parse_task_metrics(int task, const SweepPoint& params, const std::string& metrics_text) {
  SweepResult r;
  r.task = task;
  r.params = params;
  r.status = "no metrics";
  nlohmann::json last_epoch, last_done;
  std::istringstream in(metrics_text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    const std::string event = j.value("event", "");
    if (event == "epoch") last_epoch = j;
    if (event == "done" || event == "preempted") last_done = j;
  }
  const nlohmann::json& chosen = !last_done.is_null() && last_done.value("event", "") == "done" ? last_done : last_epoch;
  if (!chosen.is_null()) {
    for (const auto& [key, value] : chosen.items()) {
      if (value.is_number()) r.metrics[key] = value.get<double>();
    }
  }
  if (!last_done.is_null() && last_done.value("event", "") == "done") {
    r.status = "done";
  } else if (!last_epoch.is_null()) {
    r.status = "epoch " + std::to_string(last_epoch.value("epoch", 0));
    if (!last_done.is_null()) r.status += ", preempted";
  } else if (!last_done.is_null()) {
    r.status = "preempted";
  }
  return r;
}

std::pair<SweepIndex, std::vector<SweepResult>> read_sweep(const std::string& output_dir) {
  const std::string path = files::join(output_dir, kSweepIndexFile);
  bool ok = false;
  const std::string text = files::read_text(path, &ok);
  if (!ok) {
    throw ConfigError("sweep-report " + output_dir + ": expected the sweep's index file " + path + ", found none.",
                      "give the --output-dir of a sweep made with trainctl sweep (it writes " +
                          std::string(kSweepIndexFile) + " there).");
  }
  SweepIndex index = parse_sweep_index(text, path);
  std::vector<SweepResult> results;
  for (std::size_t i = 0; i < index.tasks.size(); ++i) {
    // train appends epoch lines to its --metrics file and prints its done line last on stdout, into
    // the task's log (DIR/task-N/train.out unless --output moved it).
    const std::string task_dir = sweep_task_dir(output_dir, static_cast<int>(i));
    const std::string metrics = files::read_text(files::join(task_dir, kSweepMetricsFile)) + "\n" +
                                files::read_text(files::join(task_dir, kSweepLogFile));
    results.push_back(parse_task_metrics(static_cast<int>(i), index.tasks[i], metrics));
  }
  return {index, results};
}

std::string render_sweep_table(const SweepIndex& index, const std::vector<SweepResult>& results) {
  const std::vector<std::string> metrics = present_metrics(results);
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"task"};
  header.insert(header.end(), index.param_names.begin(), index.param_names.end());
  header.push_back("status");
  header.insert(header.end(), metrics.begin(), metrics.end());
  rows.push_back(header);
  for (const SweepResult& r : results) {
    std::vector<std::string> row = {std::to_string(r.task)};
    for (const auto& [name, value] : r.params) row.push_back(value);
    row.push_back(r.status);
    for (const std::string& m : metrics) {
      const auto it = r.metrics.find(m);
      row.push_back(it == r.metrics.end() ? "-" : format_number(m, it->second));
    }
    rows.push_back(row);
  }
  std::vector<std::size_t> width(header.size(), 0);
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string render_sweep_csv(const SweepIndex& index, const std::vector<SweepResult>& results) {
  const std::vector<std::string> metrics = present_metrics(results);
  const auto csv = [](const std::string& v) {
    if (v.find_first_of(",\"") == std::string::npos) return v;
    std::string q = "\"";
    for (const char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  std::string out = "task";
  for (const std::string& name : index.param_names) out += "," + csv(name);
  out += ",status";
  for (const std::string& m : metrics) out += "," + m;
  out += "\n";
  for (const SweepResult& r : results) {
    out += std::to_string(r.task);
    for (const auto& [name, value] : r.params) out += "," + csv(value);
    out += "," + csv(r.status);
    for (const std::string& m : metrics) {
      const auto it = r.metrics.find(m);
      out += "," + (it == r.metrics.end() ? std::string() : format_number(m, it->second));
    }
    out += "\n";
  }
  return out;
}

}  // namespace train
