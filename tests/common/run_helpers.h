// What the tests that run the train program (or a program on the public API) share: command lines,
// the done (or event) line parsed with its params_sha256, text searches of the logs, and a folder's
// files read back. Header-only; needs nlohmann_json (and train::base for folder_bytes).
#pragma once

#include "test_util.h"
#include "train/base/files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace train::test {

/// `trainctl local --nproc N --no-prefix -- ARGS...` (ARGS starts with the program).
inline std::vector<std::string> local_command(int nproc, std::vector<std::string> args) {
  std::vector<std::string> cmd = {bin("trainctl"), "local", "--nproc", std::to_string(nproc), "--no-prefix", "--"};
  cmd.insert(cmd.end(), std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
  return cmd;
}

/// The run's last stdout line parsed (train's done line); an empty object, and a test failure
/// that shows the output, when it isn't JSON.
inline nlohmann::json done_json(const RunResult& r) {
  auto j = nlohmann::json::parse(last_line(r.out), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
  return j.is_discarded() ? nlohmann::json::object() : j;
}

/// `a` with `b` appended: a command line with a test's extra flags.
inline std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// The stdout's last event line parsed (train's done or preempted line, event_line); an empty
/// object, and a test failure that shows the output, when there is none.
inline nlohmann::json event_of(const RunResult& r) {
  auto j = nlohmann::json::parse(event_line(r.out), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "no event line\n" << r.out << r.err;
  return j.is_discarded() ? nlohmann::json::object() : j;
}

/// The params_sha256 of the run's event line (event_of), or "missing".
inline std::string sha_of(const RunResult& r) { return event_of(r).value("params_sha256", std::string("missing")); }

/// Whether `text` holds `part`.
inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// How many times `part` starts in `text` (overlapping ones counted).
inline int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (auto p = text.find(part); p != std::string::npos; p = text.find(part, p + 1)) ++n;
  return n;
}

/// A folder's files, names to their bytes (a subfolder gives ""): to see whether a run changed a
/// folder (its checkpoints, its data).
inline std::map<std::string, std::string> folder_bytes(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const std::string& name : train::files::list_dir(dir)) {
    std::ifstream f(dir + "/" + name, std::ios::binary);
    out[name] = std::string(std::istreambuf_iterator<char>(f), {});
  }
  return out;
}

}  // namespace train::test
