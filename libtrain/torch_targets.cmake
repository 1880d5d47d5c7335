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
  ${CMAKE_CURRENT_LIST_DIR}/src/preemption.cpp
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
