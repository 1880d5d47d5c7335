// Test helpers: processes with timeouts and captured output, temp folders, the venv's Python.
#include "test_util.h"

#include "train/base/files.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace train::test {

std::string job_root() {
  const char* dir = std::getenv("TRAIN_TEST_JOB_DIR");
  if (dir != nullptr && *dir != '\0') return dir;
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/libtrain-jobs-" + std::to_string(::getuid());
}

TempDir::TempDir(const std::string& tag, const std::string& root) {
  static std::atomic<int> counter{0};
  path_ = (root.empty() ? std::string(TRAIN_BINARY_DIR) + "/test-tmp" : root) + "/" + tag + "-" +
          std::to_string(::getpid()) + "-" + std::to_string(counter++);
  files::remove_tree(path_);
  files::make_dirs(path_);
}

TempDir::~TempDir() {
  files::remove_tree(path_);
}

RunResult run_program(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                      double timeout_sec, const ErrLineFn& on_err_line) {
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) throw std::runtime_error("pipe failed");
  if (on_err_line) (void)fcntl(err_pipe[1], F_SETPIPE_SZ, 4096);
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    close(out_pipe[0]);
    close(err_pipe[0]);
    for (const auto& e : env) putenv(const_cast<char*>(strdup(e.c_str())));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s failed: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  RunResult r;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  bool killed = false;
  size_t line_start = 0;  // the first byte of r.err not handed to on_err_line yet
  char buf[65536];
  while (open_fds > 0) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!killed && elapsed > timeout_sec) {
      kill(-pid, SIGKILL);
      killed = true;
    }
    int n = poll(fds, 2, 200);
    if (n <= 0) continue;
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t got = read(fds[k].fd, buf, sizeof(buf));
      if (got <= 0) {
        close(fds[k].fd);
        fds[k].fd = -1;
        --open_fds;
      } else {
        (k == 0 ? r.out : r.err).append(buf, got);
        for (size_t nl; k == 1 && on_err_line && (nl = r.err.find('\n', line_start)) != std::string::npos;
             line_start = nl + 1) {
          on_err_line(pid, r.err.substr(line_start, nl - line_start));
        }
      }
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  }
  if (killed) r.err += "\n[test harness: killed after " + std::to_string(timeout_sec) + " s]\n";
  return r;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string venv_python() {
  // TRAIN_TEST_PYTHON: a Python with torch elsewhere (scripts/gpu-check.sh sets the GPU node's).
  const char* given = std::getenv("TRAIN_TEST_PYTHON");
  std::string py = given != nullptr && *given != '\0' ? given : std::string(TRAIN_SOURCE_DIR) + "/.venv/bin/python";
  if (!files::exists(py)) return "";
  RunResult r = run_program({py, "-c", "import torch"}, {}, 120);
  return r.exit_code == 0 ? py : "";
}

std::string bin(const std::string& name) { return std::string(TRAIN_BINARY_DIR) + "/bin/" + name; }

std::string last_line(const std::string& text) {
  std::string s = text;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  auto nl = s.rfind('\n');
  return nl == std::string::npos ? s : s.substr(nl + 1);
}

std::string event_line(const std::string& text) {
  std::string found;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("{\"event\"", 0) == 0) found = line;
  }
  while (!found.empty() && (found.back() == '\r' || found.back() == ' ')) found.pop_back();
  return found;
}

std::string fashion_mnist_dir() {
  const char* env = std::getenv("TRAIN_FASHION_MNIST_DIR");
  const char* d = env != nullptr && *env != '\0' ? env : "/usr/share/datasets/fashion-mnist";
  return files::exists(std::string(d) + "/train-images-idx3-ubyte.gz") ? d : "";
}

}  // namespace train::test

namespace train::test {

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  int port = 0;
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace train::test
