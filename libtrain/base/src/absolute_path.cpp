// files::absolute (train/base/absolute_path.h).
#include "train/base/absolute_path.h"

#include <filesystem>
#include <system_error>

namespace train::files {

std::string absolute(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

}  // namespace train::files
