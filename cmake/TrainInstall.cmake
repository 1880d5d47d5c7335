# Installs the libraries, headers, programs and a CMake package so that out-of-tree projects can
# `find_package(libtrain)` and link `train::train` (and `train::builtin` for the built-in models).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_train_targets train_base train_catalog train_images train_launcher)
if(TARGET trainctl)
  list(APPEND _train_targets trainctl)
endif()
if(TRAIN_WITH_TORCH)
  list(APPEND _train_targets train_datasets train_models train train_builtin train_program)
endif()
# Installed programs find LibTorch (in its venv) and the other shared libraries where they were
# linked from. CMake keeps link folders outside the project only, and the repo's .venv is inside
# it, so Torch's lib folder is named explicitly.
foreach(_t train_program trainctl)
  if(TARGET ${_t})
    set_target_properties(${_t} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  endif()
endforeach()
if(TARGET train_program)
  set_target_properties(train_program PROPERTIES INSTALL_RPATH "${TRAIN_TORCH_ROOT}/lib")
endif()
install(TARGETS ${_train_targets} EXPORT libtrainTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
foreach(_dir libtrain/base libtrain libtrain/builtin launcher datasets/catalog datasets/images datasets models)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_dir}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endforeach()
install(EXPORT libtrainTargets NAMESPACE train:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/libtrain)
# The same targets for the build tree, next to the package config and version file below, so that
# find_package(libtrain) also works with CMAKE_PREFIX_PATH=<this build folder>, without installing.
# The imported targets name the libraries in this build and the sources' include/ folders (their
# BUILD_INTERFACE), so a consumer sees edits to them after a rebuild here.
export(EXPORT libtrainTargets NAMESPACE train:: FILE ${PROJECT_BINARY_DIR}/libtrainTargets.cmake)
# Hints for the package config: where this build found zlib, OpenSSL, TurboJPEG and libpng (find
# modules, no _DIR). train::images is a static library: its private TurboJPEG and libpng are on
# its consumers' link line, so the package finds them too, with our FindTurboJPEG.cmake beside it.
get_filename_component(_train_zlib_root "${ZLIB_INCLUDE_DIR}" DIRECTORY)
get_filename_component(_train_openssl_root "${OPENSSL_INCLUDE_DIR}" DIRECTORY)
get_filename_component(_train_turbojpeg_root "${TurboJPEG_INCLUDE_DIR}" DIRECTORY)
get_filename_component(_train_png_root "${PNG_PNG_INCLUDE_DIR}" DIRECTORY)
configure_file(${PROJECT_SOURCE_DIR}/cmake/FindTurboJPEG.cmake ${PROJECT_BINARY_DIR}/FindTurboJPEG.cmake COPYONLY)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/libtrainConfig.cmake.in
  ${PROJECT_BINARY_DIR}/libtrainConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/libtrain)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/libtrainConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/libtrainConfig.cmake ${PROJECT_BINARY_DIR}/libtrainConfigVersion.cmake
  ${PROJECT_BINARY_DIR}/FindTurboJPEG.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/libtrain)
