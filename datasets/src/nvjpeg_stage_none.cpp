// --decode gpu in a build without nvjpeg.h (CMake found no CUDA build of torch, or no nvJPEG header
// in the CUDA toolkit): the stage can't be made, and says why. CMake compiles this file instead of
// nvjpeg_stage.cpp.
#include "gpu_records.h"

#include "train/base/error.h"

namespace train::datasets::detail {

std::shared_ptr<DeviceStage> make_nvjpeg_stage(const ImageDataset& data, const at::Device& device) {
  (void)data;
  throw ConfigError("--decode gpu on " + device.str() +
                        ": expected a libtrain built with nvJPEG (a CUDA build of torch and the CUDA toolkit's "
                        "nvjpeg.h, found at configure time), found a build without it.",
                    "reconfigure where the CUDA toolkit is installed (cmake -DTRAIN_NVJPEG_INCLUDE_DIR=<toolkit>/include "
                    "if it is elsewhere), or use --decode cpu.");
}

}  // namespace train::datasets::detail
