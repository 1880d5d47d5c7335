# train::train: the LibTorch half of libtrain (process groups, DDP, sampler, Adadelta, trainer).
add_library(train STATIC
  ${CMAKE_CURRENT_LIST_DIR}/src/adadelta.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/augment.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/builtin.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/checkpoint.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/cli.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/data.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/ddp.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/metrics.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/preemption.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/profile.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/process_group.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/sampler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/train_step.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/trainer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/training_state.cpp)
add_library(train::train ALIAS train)
target_include_directories(train PUBLIC
  $<BUILD_INTERFACE:${CMAKE_CURRENT_LIST_DIR}/include> $<INSTALL_INTERFACE:include>)
target_include_directories(train PRIVATE ${CMAKE_CURRENT_LIST_DIR}/src ${CMAKE_CURRENT_LIST_DIR}/base/src ${TRAIN_GLOO_INCLUDE_DIR})
target_compile_definitions(train PRIVATE USE_C10D_GLOO)
if(TRAIN_HAVE_NCCL)
  target_compile_definitions(train PRIVATE USE_C10D_NCCL TRAIN_HAVE_NCCL TRAIN_HAVE_CUDA)
  target_include_directories(train PRIVATE ${TRAIN_NCCL_INCLUDE_DIR} ${TRAIN_CUDA_INCLUDE_DIR})
endif()
target_compile_options(train PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-interference-size>)
target_link_libraries(train
  PUBLIC train::base train::launcher train::models train::datasets ${TORCH_LIBRARIES}
  PRIVATE nlohmann_json::nlohmann_json CLI11::CLI11)
set_target_properties(train PROPERTIES EXPORT_NAME train)

# The fused CUDA Adadelta kernel (src/cuda): built where torch has CUDA and a CUDA compiler is
# found; without one the optimizer uses torch's foreach ops. TRAIN_CUDA_ARCHITECTURES picks the
# GPUs (default: Ampere and Hopper machine code, plus PTX that newer GPUs compile at load).
option(TRAIN_FUSED_CUDA "Compile libtrain's own CUDA kernels when a CUDA compiler is found" ON)
set(TRAIN_CUDA_ARCHITECTURES "80-real;90" CACHE STRING "CUDA architectures of libtrain's own kernels")
set(TRAIN_HAVE_FUSED_CUDA OFF)
if(TRAIN_HAVE_NCCL AND TRAIN_FUSED_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(TRAIN_CCACHE)
      set(CMAKE_CUDA_COMPILER_LAUNCHER ${TRAIN_CCACHE})
    endif()
    enable_language(CUDA)
    # torch's package appends its own -gencode list (autodetected, possibly for architectures
    # this nvcc no longer has) to CMAKE_CUDA_FLAGS and sets CMAKE_CUDA_ARCHITECTURES to OFF:
    # TRAIN_CUDA_ARCHITECTURES decides here.
    string(REGEX REPLACE "-gencode[ ;]+arch=[^ ;]+" "" CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS}")
    # Its own object library: the kernels include no torch header, so none of torch's CUDA flags
    # (its architecture list) reach nvcc. The CUDA runtime comes with torch (torch::cudart in
    # TORCH_LIBRARIES): link no second one.
    add_library(train_cuda_kernels OBJECT ${CMAKE_CURRENT_LIST_DIR}/src/cuda/adadelta_fused.cu
                ${CMAKE_CURRENT_LIST_DIR}/src/cuda/peer_allreduce.cu)
    set_target_properties(train_cuda_kernels PROPERTIES CUDA_ARCHITECTURES "${TRAIN_CUDA_ARCHITECTURES}"
                          CUDA_RUNTIME_LIBRARY None POSITION_INDEPENDENT_CODE ON)
    target_sources(train PRIVATE $<TARGET_OBJECTS:train_cuda_kernels> ${CMAKE_CURRENT_LIST_DIR}/src/peer_reduce.cpp)
    set_target_properties(train PROPERTIES CUDA_RUNTIME_LIBRARY None)
    target_compile_definitions(train PRIVATE TRAIN_HAVE_FUSED_CUDA)
    set(TRAIN_HAVE_FUSED_CUDA ON)
  endif()
endif()
message(STATUS "libtrain: fused CUDA kernels: ${TRAIN_HAVE_FUSED_CUDA}")
