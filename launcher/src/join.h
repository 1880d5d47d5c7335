// join(): a list as one string, for the launcher's messages and command lines (node lists, the
// commands it ran, the candidates it tried). Private to the launcher library; train/base/text.h
// holds the text helpers the other components share.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace train::detail {

/// The items with `sep` between them: join({"node1", "node2"}, ",") gives "node1,node2"; no
/// items give "".
inline std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : sep) + items[i];
  return out;
}

}  // namespace train::detail
