// One absolute, normalized spelling of a path, for what several writers name alike (the run
// record's folders from train and trainctl run, the snapshot key of a --checkpoint-dir).
#pragma once

#include <string>

namespace train::files {

/// `path` made absolute against the current folder and normalized ("./ck/../ck2" -> "/cwd/ck2");
/// "" stays "", and a path the system can't resolve comes back as given.
std::string absolute(const std::string& path);

}  // namespace train::files
