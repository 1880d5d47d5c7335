# Finds libtrain's dependencies (LibTorch, spdlog, CLI11, nlohmann_json, zlib, OpenSSL, TurboJPEG, libpng,
# Gloo headers); a missing one stops configure with its name, its use and how to get it with or
# without root (docs/getting-started.md). find_package(Torch) lives here only.

# train_find_dependency(NAME PURPOSE NO_ROOT APT [find_package arguments...]): find_package, and
# when it fails a message naming the dependency, what it is for, and where to get it.
macro(train_find_dependency _name _purpose _no_root _apt)
  find_package(${_name} ${ARGN} QUIET)
  if(NOT ${_name}_FOUND)
    if(CMAKE_DISABLE_FIND_PACKAGE_${_name})
      set(_train_found "none (CMAKE_DISABLE_FIND_PACKAGE_${_name} is set)")
    elseif(DEFINED ${_name}_VERSION AND NOT "${${_name}_VERSION}" STREQUAL "")
      set(_train_found "version ${${_name}_VERSION}, which is too old")
    else()
      set(_train_found "none in CMAKE_PREFIX_PATH='${CMAKE_PREFIX_PATH}' or the system folders")
    endif()
    message(FATAL_ERROR
      "libtrain: dependency ${_name} not found. It is needed for ${_purpose}.\n"
      "Expected its CMake package (${_name}Config.cmake, or CMake's Find${_name}), found ${_train_found}.\n"
      "Hint: without root, install it into a prefix you own (${_no_root}) and pass "
      "-DCMAKE_PREFIX_PATH=<prefix> (several prefixes: separate them with ';'); "
      "with root on Debian/Ubuntu: apt-get install ${_apt}. docs/getting-started.md walks through both.")
  endif()
endmacro()

find_package(Threads REQUIRED)
train_find_dependency(spdlog "logging (train::base)"
  "conda install -c conda-forge spdlog; spack install spdlog; or build github.com/gabime/spdlog with cmake --install . --prefix <prefix>"
  "libspdlog-dev")
train_find_dependency(CLI11 "the command lines of train and trainctl"
  "conda install -c conda-forge cli11; spack install cli11; or cmake --install of github.com/CLIUtils/CLI11 (header-only)"
  "libcli11-dev")
train_find_dependency(nlohmann_json "JSON metrics, done lines and sweep indexes (3.9 or newer)"
  "conda install -c conda-forge nlohmann_json; spack install nlohmann-json; or cmake --install of github.com/nlohmann/json (header-only)"
  "nlohmann-json3-dev" 3.9)
train_find_dependency(ZLIB "reading gzipped datasets"
  "conda install -c conda-forge zlib; spack install zlib; most clusters have it already (module load zlib)"
  "zlib1g-dev")
train_find_dependency(OpenSSL "SHA-256 checksums of checkpoints (libcrypto)"
  "conda install -c conda-forge openssl; spack install openssl; or module load openssl; set OPENSSL_ROOT_DIR=<prefix> if it is elsewhere"
  "libssl-dev" COMPONENTS Crypto)
# train::images' decoders (datasets/images/src/image.cpp; the launcher's preflight uses them too);
# cmake/FindTurboJPEG.cmake finds the first.
train_find_dependency(TurboJPEG "decoding JPEG images (train::images; libjpeg-turbo's TurboJPEG API)"
  "conda install -c conda-forge libjpeg-turbo; spack install libjpeg-turbo; or cmake --install of github.com/libjpeg-turbo/libjpeg-turbo"
  "libturbojpeg0-dev")
train_find_dependency(PNG "decoding PNG images (train::images)"
  "conda install -c conda-forge libpng; spack install libpng; or cmake --install of github.com/pnggroup/libpng"
  "libpng-dev")

if(TRAIN_WITH_TORCH)
  if(NOT Torch_DIR AND NOT DEFINED ENV{Torch_DIR})
    # Ask the Python that owns torch where its CMake files are: the repo's .venv first.
    set(_train_py "")
    if(EXISTS "${PROJECT_SOURCE_DIR}/.venv/bin/python")
      set(_train_py "${PROJECT_SOURCE_DIR}/.venv/bin/python")
    else()
      find_program(_train_py NAMES python3 python)
    endif()
    if(_train_py)
      execute_process(COMMAND "${_train_py}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                      OUTPUT_VARIABLE _train_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                      RESULT_VARIABLE _train_rc ERROR_QUIET)
      if(_train_rc EQUAL 0 AND _train_torch_prefix)
        list(APPEND CMAKE_PREFIX_PATH "${_train_torch_prefix}")
      endif()
    endif()
  endif()
  find_package(Torch QUIET)
  if(NOT Torch_FOUND)
    message(FATAL_ERROR
      "libtrain: dependency Torch (LibTorch) not found. It is needed for everything but the launcher.\n"
      "Expected torch's CMake package (TorchConfig.cmake) from Torch_DIR or the Python that has torch "
      "(the repo's .venv first), found none.\n"
      "Hint: without root: python3 -m venv .venv && .venv/bin/pip install torch==2.11.0 (scripts/setup.sh does it), or "
      "pass -DTorch_DIR=$(python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch; "
      "-DTRAIN_WITH_TORCH=OFF builds only the launcher.")
  endif()
  # libtorch's own target carries no include of its bundled fmt; nothing else to add.
  get_filename_component(TRAIN_TORCH_ROOT "${TORCH_INSTALL_PREFIX}" ABSOLUTE)

  # Gloo headers: the wheel ships the c10d headers that include <gloo/...> but not gloo's own.
  # Only the headers are needed (gloo's code is inside libtorch).
  find_path(TRAIN_GLOO_INCLUDE_DIR gloo/config.h HINTS ${TRAIN_DEPS_DIR}/include)
  if(NOT TRAIN_GLOO_INCLUDE_DIR)
    message(FATAL_ERROR
      "libtrain: dependency Gloo (headers only) not found. It is needed for the CPU process group "
      "(torch's c10d Gloo headers include <gloo/...>, which the torch wheel doesn't ship).\n"
      "Expected gloo/config.h under <prefix>/include for a prefix in CMAKE_PREFIX_PATH, TRAIN_DEPS_DIR or the "
      "system folders, found none.\n"
      "Hint: without root, put gloo's headers into a prefix you own: cmake configure, build and --install "
      "github.com/facebookincubator/gloo (the commit torch pins in third_party/gloo; configuring writes gloo/config.h), "
      "spack install gloo, or copy include/gloo from a machine that has libgloo-dev; then pass "
      "-DCMAKE_PREFIX_PATH=<prefix> or -DTRAIN_DEPS_DIR=<prefix>; with root on Debian/Ubuntu: apt-get install libgloo-dev.")
  endif()

  # NCCL: torch_cuda carries ProcessGroupNCCL; we only need nccl.h to compile against it.
  set(TRAIN_HAVE_NCCL OFF)
  if(NOT TRAIN_NCCL STREQUAL "OFF" AND TARGET torch_cuda)
    set(_train_nccl_hints "${TRAIN_TORCH_ROOT}/../nvidia/nccl/include")
    find_path(TRAIN_NCCL_INCLUDE_DIR nccl.h HINTS ${_train_nccl_hints} /usr/local/cuda/include /usr/include)
    find_path(TRAIN_CUDA_INCLUDE_DIR cuda_runtime_api.h HINTS ${CUDA_INCLUDE_DIRS} /usr/local/cuda/include)
    if(TRAIN_NCCL_INCLUDE_DIR AND TRAIN_CUDA_INCLUDE_DIR)
      set(TRAIN_HAVE_NCCL ON)
    endif()
  endif()
  if(TRAIN_NCCL STREQUAL "ON" AND NOT TRAIN_HAVE_NCCL)
    set(_train_cuda_torch "no")
    if(TARGET torch_cuda)
      set(_train_cuda_torch "yes")
    endif()
    message(FATAL_ERROR
      "libtrain: TRAIN_NCCL=ON: expected torch with CUDA and nccl.h, found torch with CUDA: "
      "${_train_cuda_torch}, nccl.h: '${TRAIN_NCCL_INCLUDE_DIR}'.\n"
      "Hint: install a CUDA build of torch (its wheel brings nvidia/nccl/include), or use TRAIN_NCCL=AUTO.")
  endif()
  # A CUDA build of libtrain: torch with CUDA and nccl.h (src/cuda/*.cpp compile; src/cpu/no_cuda.cpp otherwise).
  set(TRAIN_HAVE_CUDA ${TRAIN_HAVE_NCCL})
  message(STATUS "libtrain: torch ${Torch_VERSION} at ${TRAIN_TORCH_ROOT}; NCCL path: ${TRAIN_HAVE_NCCL}")
endif()
