// Logging for libtrain: one logger with a "[rank r/w host]" prefix, behind a plain-string API.
// This header and log.cpp include no LibTorch: Debian's spdlog (fmt 9) can't share a file with
// torch's bundled fmt 12 headers (see docs/design.md).
#pragma once

#include <functional>
#include <string>

namespace train::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };

/// Sets the prefix and who prints INFO: by default only rank 0 prints INFO and DEBUG,
/// every rank prints WARN and ERROR. Safe to call again (e.g. once the rank is known).
void configure(int rank, int world_size, const std::string& host, bool all_ranks_info = false);

/// Lowest level that is printed (default info; TRAIN_LOG_LEVEL=debug|info|warn|error overrides;
/// an unknown TRAIN_LOG_LEVEL is reported as a warning and info applies). ERROR lines are printed
/// at every level and from every rank: the error that ends a run is never hidden.
void set_level(Level level);

/// Parses a level name (debug, info, warn/warning, error; any case). Returns false, leaving
/// `out` alone, for anything else.
bool parse_level(const std::string& name, Level& out);

void debug(const std::string& message);
void info(const std::string& message);
void warn(const std::string& message);
void error(const std::string& message);

/// Replaces the output (stderr) with a callback receiving the level and the formatted line, exactly
/// as stderr would get it (time, level, "[rank r/w host]" prefix, message); pass nullptr to restore
/// stderr. Meant for tests.
void set_sink(std::function<void(Level, const std::string&)> sink);

/// Short host name of this machine.
std::string hostname();

}  // namespace train::log
