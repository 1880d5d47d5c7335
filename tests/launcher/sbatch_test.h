// What the sbatch tests share (sbatch_test.cpp, sbatch_script_run_test.cpp, preflight_test.cpp,
// sbatch_health_test.cpp, sweep_test.cpp):
// text checks, files to write, the error checks, and running the trainctl program.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "test_process.h"
#include "test_util.h"
#include "train/base/error.h"

namespace train {

/// Whether `part` occurs in `text`.
inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// The trainctl program of this build.
inline std::string trainctl() { return std::string(TRAIN_BINARY_DIR) + "/bin/trainctl"; }

/// Writes `text` to `path` and gives it `mode`.
inline void write_text(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  chmod(path.c_str(), mode);
}

/// Expects `fn` to throw a ConfigError (or DataError) whose message holds every fragment, names what
/// was expected and found, and ends with a hint.
template <typename ErrorType = ConfigError>
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& fragments,
                  const std::string& context) {
  try {
    fn();
    ADD_FAILURE() << context << ": expected an error with '" << fragments.front() << "'";
  } catch (const ErrorType& e) {
    const std::string what = e.what();
    for (const std::string& f : fragments) EXPECT_TRUE(contains(what, f)) << context << ": '" << f << "' not in: " << what;
    EXPECT_TRUE(contains(what, "expected")) << context << ": " << what;
    EXPECT_TRUE(contains(what, "found")) << context << ": " << what;
    EXPECT_FALSE(e.hint().empty()) << context << ": " << what;
  }
}

/// Runs trainctl with `args` in `env` (60 s at most) and expects it to finish.
inline std::unique_ptr<test::TestProcess> run_trainctl(const std::vector<std::string>& args,
                                                       test::Env env = test::hermetic_env()) {
  std::vector<std::string> argv = {trainctl()};
  argv.insert(argv.end(), args.begin(), args.end());
  auto p = test::run_process(argv, env, 60);
  EXPECT_TRUE(p->finished()) << "trainctl did not finish; stderr: " << p->err();
  return p;
}

}  // namespace train
