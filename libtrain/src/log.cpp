// spdlog-backed implementation of train::log. Must never include torch headers (fmt clash).
#include "train/log.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <mutex>

namespace train::log {
namespace {

struct State {
  std::mutex mu;
  int rank = 0;
  bool all_ranks_info = false;
  std::function<void(Level, const std::string&)> sink;
  std::shared_ptr<spdlog::logger> logger;
};

State& state() {
  static State* s = [] {
    auto* st = new State();
    // Logs go to stderr so the last line of stdout stays the machine-readable result.
    st->logger = std::make_shared<spdlog::logger>("train", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    st->logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [rank 0/1 " + hostname() + "] %v");
    st->logger->set_level(spdlog::level::info);
    if (const char* lvl = std::getenv("TRAIN_LOG_LEVEL")) {
      st->logger->set_level(spdlog::level::from_str(lvl));
    }
    return st;
  }();
  return *s;
}

spdlog::level::level_enum to_spd(Level l) {
  switch (l) {
    case Level::debug: return spdlog::level::debug;
    case Level::info: return spdlog::level::info;
    case Level::warn: return spdlog::level::warn;
    default: return spdlog::level::err;
  }
}

void emit(Level level, const std::string& message) {
  State& s = state();
  if (level <= Level::info && s.rank != 0 && !s.all_ranks_info) return;
  if (!s.logger->should_log(to_spd(level))) return;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.sink) {
    s.sink(level, message);
    return;
  }
  s.logger->log(to_spd(level), message);
  if (level >= Level::warn) s.logger->flush();
}

}  // namespace

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
  s.logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [rank " + std::to_string(rank) + "/" +
                        std::to_string(world_size) + " " + host + "] %v");
}

void set_level(Level level) { state().logger->set_level(to_spd(level)); }
void debug(const std::string& m) { emit(Level::debug, m); }
void info(const std::string& m) { emit(Level::info, m); }
void warn(const std::string& m) { emit(Level::warn, m); }
void error(const std::string& m) { emit(Level::error, m); }

void set_sink(std::function<void(Level, const std::string&)> sink) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.sink = std::move(sink);
}

}  // namespace train::log
