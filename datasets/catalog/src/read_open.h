// Opening a dataset file for reading, with the error every reader of the catalog gives. Private.
#pragma once

#include "train/base/error.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace train::catalog::detail {

/// The file descriptor of `path`, opened read-only. @throws train::DataError naming the file and
/// the cause; `missing_hint` is the hint where the cause is not the permissions.
inline int open_readable(const std::string& path, const std::string& missing_hint) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw DataError(path + ": expected a file this user can read on this node, found it unreadable (" +
                        std::strerror(err) + ").",
                    err == EACCES ? "fix its permissions (chmod a+r) or read it as its owner." : missing_hint);
  }
  return fd;
}

}  // namespace train::catalog::detail
