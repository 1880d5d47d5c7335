// Helpers shared by the test suites: temp folders, running programs, the venv's Python.
#pragma once

#include <cstdint>
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace train::test {

/// Where the SLURM tests submit their jobs from, outside the project: $TRAIN_TEST_JOB_DIR, else
/// ${TMPDIR:-/tmp}/libtrain-jobs-UID. `trainctl status` lists the user's jobs under the folder it is
/// run in, so jobs submitted from the build tree would crowd the user's view of their checkout.
std::string job_root();

/// A fresh folder under the build tree (or under `root`), removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& tag, const std::string& root = "");
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// Result of a finished child process.
struct RunResult {
  int exit_code = -1;     ///< exit status, or -1 when killed by a signal
  int signal = 0;         ///< the signal that ended it, 0 if it exited
  std::string out;        ///< stdout
  std::string err;        ///< stderr
  double seconds = 0;
};

/// Called with the child's pid and each line of its stderr as it comes (run_program).
using ErrLineFn = std::function<void(pid_t pid, const std::string& line)>;

/// Runs `argv` with extra environment entries ("NAME=value"), capturing stdout and stderr.
/// Kills it (SIGKILL) after timeout_sec so a test can never hang. With `on_err_line`, each stderr
/// line goes to it as it comes, so a test can act on an event of the run (a signal once a progress
/// line is printed); the stderr pipe then holds one page (F_SETPIPE_SZ), so the run blocks on its
/// log a few dozen lines past a line the test hasn't read yet and can't run far ahead of the test.
RunResult run_program(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                      double timeout_sec = 300, const ErrLineFn& on_err_line = {});

/// Writes bytes to a file, creating or truncating it.
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);
std::string read_text(const std::string& path);

/// The venv's python (TRAIN_SOURCE_DIR/.venv/bin/python) if it can import torch, else "".
std::string venv_python();

/// Path of a program built into build/bin.
std::string bin(const std::string& name);

/// The last non-empty line of `text`.
std::string last_line(const std::string& text);

/// The last line of `text` that starts with `{"event"` (train's done, preempted, ... line), or ""
/// when there is none. A SLURM job's output file merges train's stdout (the event line) and its
/// stderr (the log) through two separate streams, so a log line may land after the event line:
/// tests that read a job's output look for the event line, not the last line.
std::string event_line(const std::string& text);

/// A TCP port on 127.0.0.1 that the OS just handed out (bound to port 0, then released), for a
/// rendezvous in a test. Never derive ports from pids or fixed numbers.
int free_port();

/// Debian's Fashion-MNIST folder, or "" when the package is not installed.
std::string fashion_mnist_dir();

}  // namespace train::test
