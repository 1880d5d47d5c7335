// What the tests that run the train program (or a program on the public API) share: the
// `trainctl local` command line and the done line parsed. Header-only; needs nlohmann_json.
#pragma once

#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

}  // namespace train::test
