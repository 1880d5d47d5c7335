// spdlog-backed implementation of train::log. Must never include torch headers (fmt clash).
#include "train/base/log.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <mutex>

namespace train::log {
namespace {

/// Hands every formatted line (the same text stderr would get, prefix included) to a callback.
class CallbackSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit CallbackSink(std::function<void(Level, const std::string&)> fn) : fn_(std::move(fn)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    std::string line(buf.data(), buf.size());
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    fn_(from_spd(msg.level), line);
  }
  void flush_() override {}

 private:
  static Level from_spd(spdlog::level::level_enum l) {
    switch (l) {
      case spdlog::level::trace:
      case spdlog::level::debug: return Level::debug;
      case spdlog::level::info: return Level::info;
      case spdlog::level::warn: return Level::warn;
      default: return Level::error;
    }
  }
  std::function<void(Level, const std::string&)> fn_;
};

struct State {
  std::mutex mu;
  int rank = 0;
  bool all_ranks_info = false;
  std::string pattern;
  Level level = Level::info;
  std::shared_ptr<spdlog::logger> logger;
  std::string level_warning;  ///< set when TRAIN_LOG_LEVEL was not understood; printed once
};

std::string pattern_for(int rank, int world_size, const std::string& host) {
  return "%Y-%m-%dT%H:%M:%S.%e %^%l%$ [rank " + std::to_string(rank) + "/" + std::to_string(world_size) + " " +
         host + "] %v";
}

spdlog::level::level_enum to_spd(Level l) {
  switch (l) {
    case Level::debug: return spdlog::level::debug;
    case Level::info: return spdlog::level::info;
    case Level::warn: return spdlog::level::warn;
    default: return spdlog::level::err;
  }
}

State& state() {
  static State* s = [] {
    auto* st = new State();
    // Logs go to stderr so the last line of stdout stays the machine-readable result.
    st->logger = std::make_shared<spdlog::logger>("train", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    st->pattern = pattern_for(0, 1, hostname());
    st->logger->set_pattern(st->pattern);
    // The logger passes everything; emit() filters by our own level, so that an error is never hidden.
    st->logger->set_level(spdlog::level::debug);
    if (const char* lvl = std::getenv("TRAIN_LOG_LEVEL")) {
      if (!parse_level(lvl, st->level)) {
        st->level_warning = std::string("TRAIN_LOG_LEVEL='") + lvl +
                            "': expected debug, info, warn or error, found an unknown level; using info. "
                            "Hint: export TRAIN_LOG_LEVEL=debug for more detail, or unset it.";
      }
    }
    return st;
  }();
  return *s;
}

void emit(Level level, const std::string& message) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.level_warning.empty()) {
    const std::string w = std::move(s.level_warning);
    s.level_warning.clear();
    s.logger->log(spdlog::level::warn, w);
    s.logger->flush();
  }
  // Errors are always printed, whatever the level: the error that ends a run must be seen.
  if (level != Level::error) {
    if (level <= Level::info && s.rank != 0 && !s.all_ranks_info) return;
    if (level < s.level) return;
  }
  s.logger->log(to_spd(level), message);
  if (level >= Level::warn) s.logger->flush();
}

}  // namespace

bool parse_level(const std::string& name, Level& out) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (n == "debug" || n == "trace") {
    out = Level::debug;
  } else if (n == "info") {
    out = Level::info;
  } else if (n == "warn" || n == "warning") {
    out = Level::warn;
  } else if (n == "error" || n == "err") {
    out = Level::error;
  } else {
    return false;
  }
  return true;
}

std::string hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  std::string h(buf);
  auto dot = h.find('.');
  return dot == std::string::npos ? h : h.substr(0, dot);
}

void configure(int rank, int world_size, const std::string& host, bool all_ranks_info) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.rank = rank;
  s.all_ranks_info = all_ranks_info;
  s.pattern = pattern_for(rank, world_size, host);
  s.logger->set_pattern(s.pattern);
}

void set_level(Level level) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.level = level;
}

void debug(const std::string& m) { emit(Level::debug, m); }
void info(const std::string& m) { emit(Level::info, m); }
void warn(const std::string& m) { emit(Level::warn, m); }
void error(const std::string& m) { emit(Level::error, m); }

void set_sink(std::function<void(Level, const std::string&)> sink) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto& sinks = s.logger->sinks();
  sinks.clear();
  if (sink) {
    sinks.push_back(std::make_shared<CallbackSink>(std::move(sink)));
  } else {
    sinks.push_back(std::make_shared<spdlog::sinks::stderr_sink_mt>());
  }
  s.logger->set_pattern(s.pattern);  // the new sink formats like the old one
}

}  // namespace train::log
