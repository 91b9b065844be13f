# Checks ports/weft/portfile.cmake without vcpkg (test/consumer/run.sh vcpkg):
#   cmake -DPORT_DIR=<weft>/ports/weft -DOUT=<empty dir> -DFEATURES="io-uring;..." -P this file
# The vcpkg functions the portfile calls are stand-ins that check their arguments and
# print the call, so what is checked is the CMake syntax, which functions are called with
# what, that SOURCE_PATH is a weft checkout and that weft's CMake configures with the
# port's options -- not a build.
cmake_minimum_required(VERSION 3.22)
foreach(var PORT_DIR OUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "vcpkg_portfile_check: -D${var}=... is required")
  endif()
endforeach()

set(PORT weft)
set(CURRENT_PACKAGES_DIR "${OUT}/packages")
set(VCPKG_TARGET_ARCHITECTURE x64)
set(VCPKG_CMAKE_SYSTEM_NAME Linux)
set(_check_called "")

function(vcpkg_check_linkage)
  cmake_parse_arguments(PARSE_ARGV 0 arg "ONLY_STATIC_LIBRARY;ONLY_DYNAMIC_LIBRARY;ONLY_DYNAMIC_CRT" "" "")
  message(STATUS "vcpkg_check_linkage(${ARGN})")
endfunction()

# Sets OUT_FEATURE_OPTIONS to -D<option>=ON/OFF for each FEATURES pair, as vcpkg does.
function(vcpkg_check_features)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "OUT_FEATURE_OPTIONS" "FEATURES;INVERTED_FEATURES")
  if(NOT arg_OUT_FEATURE_OPTIONS)
    message(FATAL_ERROR "vcpkg_check_features: OUT_FEATURE_OPTIONS is required")
  endif()
  list(LENGTH arg_FEATURES n)
  math(EXPR odd "${n} % 2")
  if(odd)
    message(FATAL_ERROR "vcpkg_check_features: FEATURES takes pairs: ${arg_FEATURES}")
  endif()
  set(options "")
  math(EXPR last "${n} - 1")
  foreach(i RANGE 0 ${last} 2)
    math(EXPR j "${i} + 1")
    list(GET arg_FEATURES ${i} feature)
    list(GET arg_FEATURES ${j} option)
    if(feature IN_LIST FEATURES)
      list(APPEND options "-D${option}=ON")
    else()
      list(APPEND options "-D${option}=OFF")
    endif()
  endforeach()
  set(${arg_OUT_FEATURE_OPTIONS} "${options}" PARENT_SCOPE)
endfunction()

function(vcpkg_cmake_configure)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "SOURCE_PATH" "OPTIONS;OPTIONS_RELEASE;OPTIONS_DEBUG")
  if(NOT EXISTS "${arg_SOURCE_PATH}/CMakeLists.txt" OR NOT EXISTS "${arg_SOURCE_PATH}/version.h")
    message(FATAL_ERROR "vcpkg_cmake_configure: SOURCE_PATH ${arg_SOURCE_PATH} is no weft checkout")
  endif()
  message(STATUS "vcpkg_cmake_configure(SOURCE_PATH ${arg_SOURCE_PATH} OPTIONS ${arg_OPTIONS})")
  # weft's CMake must accept the options: configure (no build) with them, and fail on an
  # option it does not know ("Manually-specified variables were not used").
  execute_process(
      COMMAND "${CMAKE_COMMAND}" -S "${arg_SOURCE_PATH}" -B "${OUT}/configure" ${arg_OPTIONS}
      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0 OR out MATCHES "not used by the project")
    message(FATAL_ERROR "vcpkg_cmake_configure: weft's CMake rejects the port's options:\n${out}")
  endif()
endfunction()

function(vcpkg_cmake_install)
  message(STATUS "vcpkg_cmake_install(${ARGN})")
endfunction()

function(vcpkg_cmake_config_fixup)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "CONFIG_PATH;PACKAGE_NAME" "")
  message(STATUS "vcpkg_cmake_config_fixup(CONFIG_PATH ${arg_CONFIG_PATH})")
endfunction()

function(vcpkg_fixup_pkgconfig)
  message(STATUS "vcpkg_fixup_pkgconfig(${ARGN})")
endfunction()

# As vcpkg's: the files, concatenated, become share/<port>/copyright; a missing one fails.
function(vcpkg_install_copyright)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "" "FILE_LIST")
  message(STATUS "vcpkg_install_copyright(FILE_LIST ${arg_FILE_LIST})")
  if(NOT arg_FILE_LIST)
    message(FATAL_ERROR "vcpkg_install_copyright: FILE_LIST is required")
  endif()
  set(text "")
  foreach(file IN LISTS arg_FILE_LIST)
    if(NOT EXISTS "${file}")
      message(FATAL_ERROR "vcpkg_install_copyright: ${file} does not exist")
    endif()
    file(READ "${file}" content)
    string(APPEND text "${content}")
  endforeach()
  file(WRITE "${CURRENT_PACKAGES_DIR}/share/${PORT}/copyright" "${text}")
endfunction()

set(CMAKE_CURRENT_LIST_DIR "${PORT_DIR}")
include("${PORT_DIR}/portfile.cmake")
foreach(file usage copyright)
  if(NOT EXISTS "${CURRENT_PACKAGES_DIR}/share/${PORT}/${file}")
    message(FATAL_ERROR "vcpkg_portfile_check: the portfile installed no share/${PORT}/${file}")
  endif()
endforeach()
message(STATUS "vcpkg_portfile_check: ${PORT_DIR}/portfile.cmake: ok")
