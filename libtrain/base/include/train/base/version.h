// libtrain's version: the one definition that the build (CMakeLists.txt reads it for
// project(VERSION) and the package version file), `train --version`, `trainctl --version` and the
// done line take. A 0.x minor version may change the API; CHANGELOG.md says what each changed.
#pragma once

#define TRAIN_VERSION_MAJOR 0
#define TRAIN_VERSION_MINOR 2
#define TRAIN_VERSION_PATCH 0
/// "MAJOR.MINOR.PATCH" of the three above.
#define TRAIN_VERSION_STRING "0.2.0"

namespace train {
/// libtrain's version, "MAJOR.MINOR.PATCH" (TRAIN_VERSION_STRING).
inline constexpr const char* kVersion = TRAIN_VERSION_STRING;
}  // namespace train
