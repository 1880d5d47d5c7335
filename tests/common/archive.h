// An archive written and read back, as a checkpoint's reader gets it (tests with LibTorch).
#pragma once

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <sstream>

namespace train::test {

/// `out`'s bytes loaded into an InputArchive.
inline torch::serialize::InputArchive read_back(torch::serialize::OutputArchive& out) {
  std::stringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  return in;
}

}  // namespace train::test
