# train_add_test(NAME SOURCES... LIBS... LABELS...): one GoogleTest binary registered with CTest.
include(CMakeParseArguments)
include(GoogleTest)
train_find_dependency(GTest "the test suites (TRAIN_BUILD_TESTS=ON; -DTRAIN_BUILD_TESTS=OFF skips them)"
  "conda install -c conda-forge gtest; spack install googletest; or cmake --install of github.com/google/googletest"
  "libgtest-dev")
function(train_add_test name)
  cmake_parse_arguments(T "SERIAL" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_definitions(${name} PRIVATE
    TRAIN_SOURCE_DIR="${PROJECT_SOURCE_DIR}" TRAIN_BINARY_DIR="${CMAKE_BINARY_DIR}")
  set(_serial FALSE)
  if(T_SERIAL)
    set(_serial TRUE)  # runs alone: e.g. it stops a daemon other tests use
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT "${T_TIMEOUT}" RUN_SERIAL "${_serial}")
endfunction()
