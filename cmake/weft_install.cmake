# weft's install rules, include()d by the top-level CMakeLists.txt when WEFT_INSTALL is on:
# headers under <prefix>/include/weft/ (keeping coro/detail/ etc.), the static libraries, a
# CMake package so that find_package(weft CONFIG REQUIRED) gives weft::weft, weft.pc and
# weft-tls.pc for pkg-config, and the license. Reads WEFT_HEADERS and the _weft_* results
# of cmake/weft_config.cmake.
foreach(header IN LISTS WEFT_HEADERS)
  get_filename_component(dir "${header}" DIRECTORY)
  install(FILES "${header}" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/weft/${dir}")
endforeach()
set(_weft_installed_targets weft_executors weft_coro weft_io weft_stackful weft_testing weft)
if(_weft_have_tls)
  list(APPEND _weft_installed_targets weft_tls)
endif()
install(TARGETS ${_weft_installed_targets}
        EXPORT weftTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
        LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
        RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
set(WEFT_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/weft")
install(EXPORT weftTargets NAMESPACE weft:: DESTINATION "${WEFT_CMAKE_DIR}")
# weftConfig.cmake.in looks for Boost.Context when the installed weft::stackful uses it.
set(WEFT_PACKAGE_FIBER_BACKEND "${WEFT_FIBER_BACKEND}")
set(WEFT_PACKAGE_LIBURING "${_weft_have_liburing}")
set(WEFT_PACKAGE_TLS "${_weft_have_tls}")
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/weftConfig.cmake.in"
    "${PROJECT_BINARY_DIR}/weftConfig.cmake" INSTALL_DESTINATION "${WEFT_CMAKE_DIR}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/weftConfigVersion.cmake"
    COMPATIBILITY SameMajorVersion)
install(FILES "${PROJECT_BINARY_DIR}/weftConfig.cmake"
              "${PROJECT_BINARY_DIR}/weftConfigVersion.cmake"
        DESTINATION "${WEFT_CMAKE_DIR}")

# The settings users must share with the installed libraries (WEFT_TASK_TRACKING, the
# fiber backend): <prefix>/include/weft/build_config.h for builds that pass no -D
# (cmake/build_config.h.in), and weft.pc's Cflags. With a multi-config generator: one
# file per configuration (generated/<config>/).
set(_weft_public_definitions "WEFT_TASK_TRACKING=${_weft_task_tracking}"
    ${_weft_fiber_backend_define})
set(WEFT_BUILD_CONFIG_DEFINES "")
foreach(def IN LISTS _weft_public_definitions)
  string(REGEX MATCH "^[A-Z_0-9]+" name "${def}")
  string(REGEX REPLACE "^[A-Z_0-9]+=" "" value "${def}")
  set(other "")
  if(name STREQUAL "WEFT_FIBER_BACKEND_ASM")
    set(other WEFT_FIBER_BACKEND_BOOST)
  elseif(name STREQUAL "WEFT_FIBER_BACKEND_BOOST")
    set(other WEFT_FIBER_BACKEND_ASM)
  endif()
  if(other)
    string(APPEND WEFT_BUILD_CONFIG_DEFINES
           "#if defined(${other}) && ${other}\n"
           "#error \"weft: this weft was built with ${name}=${value}, not ${other}\"\n"
           "#endif\n")
  endif()
  string(APPEND WEFT_BUILD_CONFIG_DEFINES
         "#ifndef ${name}\n#define ${name} ${value}\n#elif ${name} != ${value}\n"
         "#error \"weft: this weft was built with ${name}=${value}: build with the same value\"\n"
         "#endif\n")
endforeach()
if(_weft_multi_config_generator)
  set(_weft_generated_dir "${PROJECT_BINARY_DIR}/generated/$<CONFIG>")
else()
  set(_weft_generated_dir "${PROJECT_BINARY_DIR}/generated")
endif()
configure_file("${PROJECT_SOURCE_DIR}/cmake/build_config.h.in"
               "${PROJECT_BINARY_DIR}/build_config.h.genex" @ONLY)
file(GENERATE OUTPUT "${_weft_generated_dir}/build_config.h"
     INPUT "${PROJECT_BINARY_DIR}/build_config.h.genex")
install(FILES "${_weft_generated_dir}/build_config.h"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/weft")

# weft.pc for pkg-config (cmake/weft.pc.in), in <libdir>/pkgconfig. weft's libraries
# are static, so what they link (liburing, Boost.Context, threads, libdl) is in Requires
# and Libs, not in the .private fields that only `pkg-config --static` reads. No -std:
# the user chooses C++20 or later (as fmt's and abseil's .pc files leave it to them).
weft_pkg_config_file("${_weft_generated_dir}/weft.pc")
install(FILES "${_weft_generated_dir}/weft.pc"
        DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
# weft-tls.pc beside it for weft::tls (cmake/weft-tls.pc.in): -lweft_tls, requiring weft
# and OpenSSL, so that only programs that ask for weft-tls link OpenSSL.
if(_weft_have_tls)
  weft_pkg_config_tls_file("${_weft_generated_dir}/weft-tls.pc")
  install(FILES "${_weft_generated_dir}/weft-tls.pc"
          DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
endif()

# The license (Apache-2.0) travels with the libraries: <prefix>/share/doc/weft/LICENSE.
install(FILES "${PROJECT_SOURCE_DIR}/LICENSE" DESTINATION "${CMAKE_INSTALL_DOCDIR}")
