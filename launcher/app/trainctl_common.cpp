// trainctl's small helpers: printing, writing files, adding a subcommand, required arguments, and
// where trainctl runs (folder, user, scripts/ folder, TRAIN_PYTHON).
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "train/base/error.h"
#include "train/launcher/plotting.h"
#include "trainctl.h"

#ifndef TRAIN_SOURCE_DIR
#define TRAIN_SOURCE_DIR "."
#endif

namespace trainctl {

int print(const std::string& text) {
  const std::size_t written = std::fwrite(text.data(), 1, text.size(), stdout);
  return (written == text.size() && std::fflush(stdout) == 0) ? 0 : kExitError;
}

void write_file(const std::string& path, const std::string& text, const std::string& what, mode_t mode,
                const std::string& expected) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
  file.close();
  if (!file || ::chmod(path.c_str(), mode) != 0) {
    throw train::ConfigError(what + " " + path + ": expected " + expected + ", found it unwritable.",
                             "check that its folder exists and is writable.");
  }
}

CLI::App* add_command(CLI::App& app, const std::string& name, const std::string& description,
                      const std::string& footer) {
  auto* cmd = app.add_subcommand(name, description);
  cmd->footer(footer);
  return cmd;
}

void require_given(bool given, const std::string& name, const std::string& what, const std::string& hint) {
  if (!given) throw train::ConfigError(name + ": expected " + what + ", found none given.", hint);
}

std::string current_folder() {
  char buf[4096];
  if (::getcwd(buf, sizeof(buf)) == nullptr) {
    throw train::ConfigError("the current folder: expected to read its path, found getcwd failing.",
                             "run trainctl from a folder that still exists.");
  }
  return buf;
}

std::string user_name() {
  const passwd* pw = ::getpwuid(::getuid());
  return pw != nullptr ? pw->pw_name : "";
}

std::string train_python() {
  const char* p = std::getenv("TRAIN_PYTHON");
  return p != nullptr ? p : "";
}

std::string scripts_folder() {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  return train::scripts_folder(n > 0 ? std::string(exe, static_cast<std::size_t>(n)) : std::string(), TRAIN_SOURCE_DIR);
}

}  // namespace trainctl
