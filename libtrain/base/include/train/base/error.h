// train::Error and its kinds: every failure libtrain reports names the input, what was expected,
// what was found, and ends with a hint. No LibTorch here, so the launcher can use it too.
#pragma once

#include <stdexcept>
#include <string>

namespace train {

/// Base of every error libtrain throws. what() is "<message> Hint: <hint>".
class Error : public std::runtime_error {
 public:
  /// @param message what happened: the input, what was expected, what was found.
  /// @param hint what the user can do about it (may be empty).
  Error(const std::string& message, const std::string& hint = "")
      : std::runtime_error(hint.empty() ? message : message + " Hint: " + hint),
        message_(message), hint_(hint) {}
  const std::string& message() const { return message_; }
  const std::string& hint() const { return hint_; }

 private:
  std::string message_;
  std::string hint_;
};

/// Bad flags, environment variables or option combinations.
class ConfigError : public Error { using Error::Error; };
/// Unreadable, missing or malformed dataset files.
class DataError : public Error { using Error::Error; };
/// A collective or rendezvous failed (peer died, connection refused).
class CommError : public Error { using Error::Error; };
/// A collective or rendezvous did not finish in time.
class TimeoutError : public CommError { using CommError::CommError; };
/// A checkpoint could not be written, or a checkpoint file is corrupt.
class CheckpointError : public Error { using Error::Error; };

/// The exit status of `train` and `trainctl` for a command line that doesn't parse or a
/// configuration that is wrong (a ConfigError), as getopt-based tools use.
inline constexpr int kExitUsage = 2;

}  // namespace train
