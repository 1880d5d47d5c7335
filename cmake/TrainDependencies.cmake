# Finds libtrain's dependencies: LibTorch from the repo's .venv (a user's Torch_DIR wins),
# Debian's spdlog, CLI11, nlohmann-json, zlib, OpenSSL and gloo headers. find_package(Torch) lives here only.
find_package(Threads REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json 3.9 REQUIRED)
find_package(ZLIB REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)

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
      "libtrain: LibTorch was not found.\n"
      "Expected torch's CMake package (TorchConfig.cmake) from the repo's .venv or from Torch_DIR.\n"
      "Hint: run scripts/setup.sh (it does 'pip install torch==2.11.0' into .venv), or pass -DTorch_DIR=<libtorch>/share/cmake/Torch.")
  endif()
  # libtorch's own target carries no include of its bundled fmt; nothing else to add.
  get_filename_component(TRAIN_TORCH_ROOT "${TORCH_INSTALL_PREFIX}" ABSOLUTE)

  # Gloo headers: the wheel ships the c10d headers that include <gloo/...> but not gloo's own.
  find_path(TRAIN_GLOO_INCLUDE_DIR gloo/config.h HINTS ${TRAIN_DEPS_DIR}/include /usr/include)
  if(NOT TRAIN_GLOO_INCLUDE_DIR)
    message(FATAL_ERROR "libtrain: gloo headers (gloo/config.h) not found. Hint: apt-get install libgloo-dev, or pass -DTRAIN_DEPS_DIR=<dir with include/gloo>.")
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
    message(FATAL_ERROR "libtrain: TRAIN_NCCL=ON but torch has no CUDA or nccl.h was not found.")
  endif()
  message(STATUS "libtrain: torch ${Torch_VERSION} at ${TRAIN_TORCH_ROOT}; NCCL path: ${TRAIN_HAVE_NCCL}")
endif()
