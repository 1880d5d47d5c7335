// The one table of Linux signal names.
#include "train/base/signals.h"

#include <algorithm>
#include <cctype>
#include <csignal>

namespace train {
namespace {

struct SignalName {
  const char* name;
  int number;
};

constexpr SignalName kSignals[] = {
    {"HUP", SIGHUP},       {"INT", SIGINT},     {"QUIT", SIGQUIT},   {"ILL", SIGILL},     {"TRAP", SIGTRAP},
    {"ABRT", SIGABRT},     {"BUS", SIGBUS},     {"FPE", SIGFPE},     {"KILL", SIGKILL},   {"USR1", SIGUSR1},
    {"SEGV", SIGSEGV},     {"USR2", SIGUSR2},   {"PIPE", SIGPIPE},   {"ALRM", SIGALRM},   {"TERM", SIGTERM},
    {"STKFLT", SIGSTKFLT}, {"CHLD", SIGCHLD},   {"CONT", SIGCONT},   {"STOP", SIGSTOP},   {"TSTP", SIGTSTP},
    {"TTIN", SIGTTIN},     {"TTOU", SIGTTOU},   {"URG", SIGURG},     {"XCPU", SIGXCPU},   {"XFSZ", SIGXFSZ},
    {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF},   {"WINCH", SIGWINCH}, {"IO", SIGIO},       {"PWR", SIGPWR},
    {"SYS", SIGSYS},
};

}  // namespace

int signal_number(const std::string& name) {
  std::string n;
  for (char c : name) {
    if (c != ' ') n += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  if (!n.empty() && std::all_of(n.begin(), n.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
    if (n.size() > 2) return 0;
    const int v = std::stoi(n);
    return v >= 1 && v < NSIG ? v : 0;
  }
  if (n.rfind("SIG", 0) == 0) n = n.substr(3);
  for (const auto& s : kSignals) {
    if (n == s.name) return s.number;
  }
  return 0;
}

std::string signal_short_name(int number) {
  for (const auto& s : kSignals) {
    if (s.number == number) return s.name;
  }
  return "";
}

std::string signal_name(int number) {
  const std::string s = signal_short_name(number);
  return s.empty() ? "signal " + std::to_string(number) : "SIG" + s;
}

}  // namespace train
