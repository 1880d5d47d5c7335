# train::train: the LibTorch half of libtrain (process groups, the reducer, DDP, the training
# step, sampler, Adadelta, Trainer). What differs by device is chosen by file, not by #ifdef:
# src/cuda/*.cpp in a CUDA build (torch with CUDA and nccl.h), src/cpu/no_cuda.cpp otherwise;
# libtrain's own kernels (src/cuda/*.cu) where a CUDA compiler is found, src/cuda/kernels_stub.cpp
# where not.
set(_train_src ${CMAKE_CURRENT_LIST_DIR}/src)
add_library(train STATIC
  ${_train_src}/checkpoint/checkpoint.cpp
  ${_train_src}/checkpoint/checkpoint_session.cpp
  ${_train_src}/checkpoint/snapshot.cpp
  ${_train_src}/checkpoint/training_state.cpp
  ${_train_src}/comm/comm_plan.cpp
  ${_train_src}/comm/eager_hooks.cpp
  ${_train_src}/comm/reducer.cpp
  ${_train_src}/comm/shard_comm.cpp
  ${_train_src}/config/cli.cpp
  ${_train_src}/config/config.cpp
  ${_train_src}/data/augment.cpp
  ${_train_src}/data/data.cpp
  ${_train_src}/data/epoch_orders.cpp
  ${_train_src}/data/index_feed.cpp
  ${_train_src}/data/loader.cpp
  ${_train_src}/data/eval_batches.cpp
  ${_train_src}/data/sample_reads.cpp
  ${_train_src}/data/sampler.cpp
  ${_train_src}/data/scalable_order.cpp
  ${_train_src}/device/cpu_kernels.cpp
  ${_train_src}/device/train_device.cpp
  ${_train_src}/dist/ddp.cpp
  ${_train_src}/dist/process_group.cpp
  ${_train_src}/health/fault_injection.cpp
  ${_train_src}/health/health_check.cpp
  ${_train_src}/health/health_groups.cpp
  ${_train_src}/health/health_verdict.cpp
  ${_train_src}/health/rank_record.cpp
  ${_train_src}/health/rollcall.cpp
  ${_train_src}/health/straggler.cpp
  ${_train_src}/health/straggler_watch.cpp
  ${_train_src}/log/metrics.cpp
  ${_train_src}/log/profile.cpp
  ${_train_src}/log/run_log.cpp
  ${_train_src}/optim/adadelta.cpp
  ${_train_src}/optim/device_rates.cpp
  ${_train_src}/optim/fused_optim.cpp
  ${_train_src}/optim/lr_schedules.cpp
  ${_train_src}/optim/optimizer_sharding.cpp
  ${_train_src}/optim/schedule.cpp
  ${_train_src}/optim/sharded_optimizer.cpp
  ${_train_src}/step/eager_step.cpp
  ${_train_src}/step/grad_clip.cpp
  ${_train_src}/step/loss.cpp
  ${_train_src}/step/step_observers.cpp
  ${_train_src}/step/step_choice.cpp
  ${_train_src}/stops/nonfinite.cpp
  ${_train_src}/stops/preemption.cpp
  ${_train_src}/stops/stop_agreement.cpp
  ${_train_src}/trainer/early_stop.cpp
  ${_train_src}/trainer/evaluation.cpp
  ${_train_src}/trainer/run_plan.cpp
  ${_train_src}/trainer/train_result.cpp
  ${_train_src}/trainer/trainer.cpp
  ${_train_src}/trainer/trainer_controls.cpp
  ${_train_src}/trainer/trainer_end.cpp
  ${_train_src}/trainer/trainer_loop.cpp
  ${_train_src}/trainer/user_code.cpp
  ${_train_src}/trainer/weight_average.cpp)
add_library(train::train ALIAS train)
target_include_directories(train PUBLIC
  $<BUILD_INTERFACE:${CMAKE_CURRENT_LIST_DIR}/include> $<INSTALL_INTERFACE:include>)
target_include_directories(train PRIVATE ${_train_src} ${TRAIN_GLOO_INCLUDE_DIR})
target_compile_definitions(train PRIVATE USE_C10D_GLOO)
target_compile_options(train PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-interference-size>)
target_link_libraries(train
  PUBLIC train::base ${TORCH_LIBRARIES}
  PRIVATE nlohmann_json::nlohmann_json CLI11::CLI11)
set_target_properties(train PROPERTIES EXPORT_NAME train)

# libtrain's own CUDA kernels (fused Adadelta, the GPUs' peer all-reduce, the non-finite watch's
# note): built where a CUDA compiler is found; without one the optimizer uses torch's foreach ops,
# the GPUs average through NCCL and the watch notes with ATen ops. TRAIN_CUDA_ARCHITECTURES picks
# the GPUs (default: Ampere and Hopper machine code, plus PTX that newer GPUs compile at load).
option(TRAIN_FUSED_CUDA "Compile libtrain's own CUDA kernels when a CUDA compiler is found" ON)
set(TRAIN_CUDA_ARCHITECTURES "80-real;90" CACHE STRING "CUDA architectures of libtrain's own kernels")
set(TRAIN_HAVE_FUSED_CUDA OFF)
if(TRAIN_HAVE_CUDA)
  target_compile_definitions(train PRIVATE USE_C10D_NCCL)
  target_include_directories(train PRIVATE ${TRAIN_NCCL_INCLUDE_DIR} ${TRAIN_CUDA_INCLUDE_DIR})
  target_sources(train PRIVATE
    ${_train_src}/cuda/optimizer_epilogues.cpp
    ${_train_src}/cuda/adadelta_fused_step.cpp
    ${_train_src}/cuda/cuda_device.cpp
    ${_train_src}/cuda/graph_comm.cpp
    ${_train_src}/cuda/graph_step.cpp
    ${_train_src}/cuda/loader_copy.cpp
    ${_train_src}/cuda/nccl_calls.cpp
    ${_train_src}/cuda/nccl_backend.cpp
    ${_train_src}/cuda/nonfinite_note.cpp
    ${_train_src}/cuda/peer_reduce.cpp
    ${_train_src}/cuda/shard_graph.cpp)
  if(TRAIN_FUSED_CUDA)
    include(CheckLanguage)
    check_language(CUDA)
  endif()
  if(TRAIN_FUSED_CUDA AND CMAKE_CUDA_COMPILER)
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
    add_library(train_cuda_kernels OBJECT ${_train_src}/cuda/adadelta_fused.cu ${_train_src}/cuda/adadelta_peer.cu
                ${_train_src}/cuda/adam_peer.cu
                ${_train_src}/cuda/graph_memsets.cu ${_train_src}/cuda/nonfinite_fused.cu ${_train_src}/cuda/peer_allreduce.cu
                ${_train_src}/cuda/step_inputs.cu)
    set_target_properties(train_cuda_kernels PROPERTIES CUDA_ARCHITECTURES "${TRAIN_CUDA_ARCHITECTURES}"
                          CUDA_RUNTIME_LIBRARY None POSITION_INDEPENDENT_CODE ON)
    target_sources(train PRIVATE $<TARGET_OBJECTS:train_cuda_kernels>)
    set_target_properties(train PROPERTIES CUDA_RUNTIME_LIBRARY None)
    set(TRAIN_HAVE_FUSED_CUDA ON)
  else()
    target_sources(train PRIVATE ${_train_src}/cuda/kernels_stub.cpp)
  endif()
else()
  target_sources(train PRIVATE ${_train_src}/cpu/no_cuda.cpp ${_train_src}/cpu/adadelta_no_fused.cpp
                 ${_train_src}/cpu/nonfinite_no_kernel.cpp ${_train_src}/cpu/loader_copy_no_cuda.cpp)
endif()
message(STATUS "libtrain: CUDA: ${TRAIN_HAVE_CUDA}; its own CUDA kernels: ${TRAIN_HAVE_FUSED_CUDA}")
