// How many NVIDIA GPUs this machine has, for the GPU tests' skips.
#pragma once

#include "test_util.h"

#include <cstdlib>

namespace train::test {

/// NVIDIA GPUs on this machine, as nvidia-smi lists them (0 without a driver).
inline int nvidia_gpus() {
  auto r = run_program({"sh", "-c", "nvidia-smi -L 2>/dev/null | grep -c '^GPU'"}, {}, 30);
  return r.exit_code == 0 ? std::atoi(r.out.c_str()) : 0;
}

}  // namespace train::test
