# Finds libjpeg-turbo's TurboJPEG API (turbojpeg.h, libturbojpeg) and defines TurboJPEG::TurboJPEG.
# Debian's libjpeg-turboConfig.cmake is not used: it fails unless libjpeg62-turbo-dev is installed too.
# pkg-config's libturbojpeg.pc, where present, only hints; TurboJPEG_ROOT and CMAKE_PREFIX_PATH win.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_TurboJPEG QUIET libturbojpeg)
endif()
find_path(TurboJPEG_INCLUDE_DIR turbojpeg.h HINTS ${PC_TurboJPEG_INCLUDE_DIRS})
find_library(TurboJPEG_LIBRARY NAMES turbojpeg HINTS ${PC_TurboJPEG_LIBRARY_DIRS})
if(PC_TurboJPEG_VERSION)
  set(TurboJPEG_VERSION "${PC_TurboJPEG_VERSION}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(TurboJPEG REQUIRED_VARS TurboJPEG_LIBRARY TurboJPEG_INCLUDE_DIR
                                  VERSION_VAR TurboJPEG_VERSION)
if(TurboJPEG_FOUND AND NOT TARGET TurboJPEG::TurboJPEG)
  add_library(TurboJPEG::TurboJPEG UNKNOWN IMPORTED)
  set_target_properties(TurboJPEG::TurboJPEG PROPERTIES IMPORTED_LOCATION "${TurboJPEG_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${TurboJPEG_INCLUDE_DIR}")
endif()
mark_as_advanced(TurboJPEG_INCLUDE_DIR TurboJPEG_LIBRARY)
