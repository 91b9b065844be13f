# Helpers for weft's own CMakeLists.txt. Nothing here is installed or seen by consumers.

# Flags for targets weft builds itself (library, tests, benchmarks, examples, header
# check). PRIVATE: a consumer never inherits -Werror.
function(weft_own_target target)
  target_compile_options(${target} PRIVATE -Wall -Wextra $<$<BOOL:${WEFT_WERROR}>:-Werror>)
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF)
endfunction()

# weft_cc_library(<name> [HDRS <header>...] [SRCS <source>...] [DEPS <target>...]): one of
# weft's libraries, shaped like Bazel's cc_library: weft_<name> (alias weft::<name>,
# exported as weft::<name>, libweft_<name>.a in the build tree's top directory), a static
# library of SRCS, or an INTERFACE library when there are none. Paths are relative to the
# calling CMakeLists.txt (coro/CMakeLists.txt lists lazy.h, detail/config.h, ...). DEPS are
# PUBLIC: a weft library's headers include those of the layers below it. The include
# directories are the top-level CMakeLists.txt's _weft_include_dirs. HDRS are recorded
# in the global property WEFT_HEADERS (coro/lazy.h: include view, header check, install).
# Every file named is recorded as listed (weft_check_listed_files).
function(weft_cc_library name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "HDRS;SRCS;DEPS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "weft_cc_library(${name}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  weft_listed_files(${arg_HDRS} ${arg_SRCS})
  file(RELATIVE_PATH dir "${PROJECT_SOURCE_DIR}" "${CMAKE_CURRENT_SOURCE_DIR}")
  set(headers)
  foreach(header IN LISTS arg_HDRS)
    list(APPEND headers "${dir}/${header}")
  endforeach()
  set_property(GLOBAL APPEND PROPERTY WEFT_HEADERS ${headers})
  set(target weft_${name})
  if(arg_SRCS)
    add_library(${target} STATIC ${arg_SRCS})
    set(scope PUBLIC)
    weft_own_target(${target})
    set_target_properties(${target} PROPERTIES
        OUTPUT_NAME ${target} ARCHIVE_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}")
  else()
    add_library(${target} INTERFACE)
    set(scope INTERFACE)
  endif()
  add_library(weft::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  target_include_directories(${target} ${scope} ${_weft_include_dirs})
  target_compile_features(${target} ${scope} cxx_std_20)
  target_link_libraries(${target} ${scope} ${arg_DEPS})
endfunction()

# weft_listed_files(<file>...): records files (relative to the calling CMakeLists.txt) as
# part of the build, for weft_check_listed_files.
function(weft_listed_files)
  set(files)
  foreach(file IN LISTS ARGN)
    get_filename_component(file "${file}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND files "${file}")
  endforeach()
  set_property(GLOBAL APPEND PROPERTY WEFT_LISTED_FILES ${files})
endfunction()

# weft_check_listed_files(<dir> [EXCLUDE <subdir>...]): fails the configure step when a
# .h, .cc or .S file under <dir> (relative to the project) is in no list of the build
# (weft_cc_library, weft_listed_files), naming each one: a file someone forgot to list
# would otherwise be neither compiled nor installed nor tested, silently. The search is the
# only glob of weft's build, and has CONFIGURE_DEPENDS: a file added later makes the next
# build configure again and fail here. EXCLUDE: subdirectories that are not part of this
# build (test/consumer is a project of its own).
function(weft_check_listed_files dir)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "EXCLUDE")
  set(root "${PROJECT_SOURCE_DIR}/${dir}")
  file(GLOB_RECURSE found CONFIGURE_DEPENDS LIST_DIRECTORIES false
       "${root}/*.h" "${root}/*.cc" "${root}/*.S")
  get_property(listed GLOBAL PROPERTY WEFT_LISTED_FILES)
  set(missing)
  foreach(file IN LISTS found)
    file(RELATIVE_PATH rel "${root}" "${file}")
    set(excluded FALSE)
    foreach(sub IN LISTS arg_EXCLUDE)
      if(rel MATCHES "^${sub}/")
        set(excluded TRUE)
      endif()
    endforeach()
    if(NOT excluded AND NOT file IN_LIST listed)
      list(APPEND missing "${dir}/${rel}")
    endif()
  endforeach()
  if(missing)
    list(SORT missing)
    string(REPLACE ";" "\n  " missing "${missing}")
    message(SEND_ERROR "weft: files in no list of the build (add each to the list in its "
                        "directory's CMakeLists.txt; a test also to WEFT_TESTS in "
                        "BUILD.bazel):\n  ${missing}")
  endif()
endfunction()

# Which modules each module's headers may include (DESIGN.md, "Layers").
set(WEFT_LAYER_executors executors version.h)
set(WEFT_LAYER_coro coro executors version.h)
set(WEFT_LAYER_stackful stackful coro executors version.h)
set(WEFT_LAYER_io io coro executors version.h)
set(WEFT_LAYER_testing testing io stackful coro executors version.h)
set(WEFT_LAYER_version version.h)

# weft_default_fiber_backend(<backend-var> <arch-var>): the default WEFT_FIBER_BACKEND
# for the target platform, and the <arch>_<abi> part of the names of its switch-core
# files (stackful/asm/{make,jump,ontop}_<arch>_<abi>_elf_gas.S), empty when weft has no
# assembly for it. asm on x86-64 and aarch64 Linux, boost elsewhere.
function(weft_default_fiber_backend backend_var arch_var)
  set(arch "")
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
    if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
      set(arch x86_64_sysv)
    elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
      set(arch arm64_aapcs)
    endif()
  endif()
  set(backend boost)
  if(arch AND EXISTS "${PROJECT_SOURCE_DIR}/stackful/asm/make_${arch}_elf_gas.S")
    set(backend asm)
  endif()
  set(${backend_var} ${backend} PARENT_SCOPE)
  set(${arch_var} "${arch}" PARENT_SCOPE)
endfunction()

# weft_add_include_view(<dir> <header>...): <dir> (<build>/include/weft) gets a symbolic
# link to each header (coro/lazy.h -> <dir>/coro/lazy.h), so that <build>/include on the
# include path makes <weft/coro/lazy.h> work and reaches nothing but weft's headers. Links
# to headers that are gone are removed.
function(weft_add_include_view dir)
  file(GLOB_RECURSE existing LIST_DIRECTORIES false RELATIVE "${dir}" "${dir}/*")
  foreach(link IN LISTS existing)
    if(NOT link IN_LIST ARGN)
      file(REMOVE "${dir}/${link}")
    endif()
  endforeach()
  foreach(header IN LISTS ARGN)
    if(NOT IS_SYMLINK "${dir}/${header}")
      get_filename_component(parent "${dir}/${header}" DIRECTORY)
      file(MAKE_DIRECTORY "${parent}")
      file(CREATE_LINK "${PROJECT_SOURCE_DIR}/${header}" "${dir}/${header}" SYMBOLIC)
    endif()
  endforeach()
endfunction()

# weft_add_header_check(<target> <header>...): every header compiles on its own, and
# only with the layers below it; no library file includes another module's detail/ (a
# check <target> runs, also the ctest test cmake/check_detail_includes); no public function
# names detail:: in its signature (likewise, cmake/check_public_signatures). One generated .cc per header includes it (twice, so a
# missing #pragma once fails too); the .cc files of module M are compiled with an include
# root that holds only the modules M may use (symlinks in the build tree), so that e.g.
# executors/x.h including "weft/coro/lazy.h" fails with "weft/coro/lazy.h: No such file".
# version.h, which includes nothing, is checked with nothing else on the path. One
# OBJECT library per module, all in `all`; <target> builds them all. Works with CMake
# 3.22 (no header sets).
function(weft_add_header_check target)
  set(root "${PROJECT_BINARY_DIR}/header_check")
  add_custom_target(${target})
  set(modules)
  foreach(header IN LISTS ARGN)
    string(REGEX MATCH "^[^/]+" module "${header}")
    if(module STREQUAL header)  # version.h
      set(module version)
    endif()
    list(APPEND modules ${module})
    list(APPEND headers_${module} "${header}")
  endforeach()
  list(REMOVE_DUPLICATES modules)
  # And no module includes another's detail/ (cmake/check_detail_includes.cmake, which
  # names file and line): run by <target> and as the test cmake/check_detail_includes.
  set(library_modules ${modules})
  list(REMOVE_ITEM library_modules version)
  string(REPLACE ";" "," library_modules "${library_modules}")  # one argument
  set(detail_check "${CMAKE_COMMAND}" "-DWEFT_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
      "-DWEFT_MODULES=${library_modules}" -P "${PROJECT_SOURCE_DIR}/cmake/check_detail_includes.cmake")
  add_custom_target(${target}_detail_includes COMMAND ${detail_check} VERBATIM)
  add_dependencies(${target} ${target}_detail_includes)
  add_test(NAME cmake/check_detail_includes COMMAND ${detail_check})
  # And no public function names detail:: in its signature
  # (cmake/check_public_signatures.cmake, which names file and line): run by <target> and
  # as the test cmake/check_public_signatures.
  set(signature_check "${CMAKE_COMMAND}" "-DWEFT_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
      "-DWEFT_MODULES=${library_modules}"
      -P "${PROJECT_SOURCE_DIR}/cmake/check_public_signatures.cmake")
  add_custom_target(${target}_public_signatures COMMAND ${signature_check} VERBATIM)
  add_dependencies(${target} ${target}_public_signatures)
  add_test(NAME cmake/check_public_signatures COMMAND ${signature_check})
  # The check must also reject: a header written here with three signatures to report
  # and their look-alikes that are fine (an alias, a constraint, a default argument `= {}`
  # before an initializer, private members, a detail namespace).
  set(fixture "${PROJECT_BINARY_DIR}/check_public_signatures_fixture")
  file(CONFIGURE OUTPUT "${fixture}/bad/bad.h" CONTENT [=[
#pragma once
namespace weft {
namespace detail {
struct Impl {};
inline Impl make() { return {}; }
}  // namespace detail
using Operation = detail::Impl;
inline detail::Impl returnsDetail() { return {}; }
inline void takesDetail(const detail::Impl& impl) { (void)impl; }
inline Operation returnsAlias() { return {}; }
template <class T>
  requires(sizeof(detail::Impl) > 0)
Operation constrained(T) { return {}; }
class Widget {
 public:
  explicit Widget(int x, int y = {})
      : impl_(detail::make()) {}
  detail::Impl member() const { return impl_; }
  Operation aliased() const { return impl_; }

 private:
  detail::Impl hidden() const { return impl_; }
  detail::Impl impl_;
};
}  // namespace weft
]=])
  add_test(NAME cmake/check_public_signatures_rejects
           COMMAND "${CMAKE_COMMAND}" "-DWEFT_SOURCE_DIR=${fixture}" -DWEFT_MODULES=bad
                   -P "${PROJECT_SOURCE_DIR}/cmake/check_public_signatures.cmake")
  set_tests_properties(cmake/check_public_signatures_rejects PROPERTIES
                       PASS_REGULAR_EXPRESSION "weft: 3 public function\\(s\\) name detail::")
  foreach(module IN LISTS modules)
    if(NOT DEFINED WEFT_LAYER_${module})
      message(FATAL_ERROR "weft: module ${module}/ has no WEFT_LAYER_${module} in cmake/weft_helpers.cmake")
    endif()
    set(view "${root}/include/${module}")
    file(MAKE_DIRECTORY "${view}/weft")
    foreach(dep IN LISTS WEFT_LAYER_${module})
      if(NOT EXISTS "${view}/weft/${dep}")
        file(CREATE_LINK "${PROJECT_SOURCE_DIR}/${dep}" "${view}/weft/${dep}" SYMBOLIC)
      endif()
    endforeach()
    string(REPLACE ";" ", " allowed "${WEFT_LAYER_${module}}")
    set(sources)
    foreach(header IN LISTS headers_${module})
      set(out "${root}/${header}.cc")
      # file(CONFIGURE) rewrites only on change: no spurious rebuilds.
      file(CONFIGURE OUTPUT "${out}" CONTENT
"// Generated by weft's CMake (cmake/weft_helpers.cmake): ${header} must compile on its
// own, with only ${allowed} on the include path (DESIGN.md layers).
#include \"weft/${header}\"
#include \"weft/${header}\"
")
      list(APPEND sources "${out}")
    endforeach()
    add_library(${target}_${module} OBJECT ${sources})
    target_include_directories(${target}_${module} PRIVATE "${view}")
    target_compile_features(${target}_${module} PRIVATE cxx_std_20)
    # The module's build-time definitions (e.g. weft::stackful's WEFT_FIBER_BACKEND_*) and
    # the include paths of its dependencies outside weft (Boost), not weft's own root.
    if(TARGET weft_${module})
      target_compile_definitions(${target}_${module} PRIVATE
          $<TARGET_PROPERTY:weft_${module},INTERFACE_COMPILE_DEFINITIONS>)
      if(module STREQUAL "executors" AND TARGET weft_liburing)
        target_include_directories(${target}_${module} SYSTEM PRIVATE
            $<TARGET_PROPERTY:weft_liburing,INTERFACE_INCLUDE_DIRECTORIES>)
      endif()
      if(module STREQUAL "stackful" AND TARGET Boost::context)
        target_include_directories(${target}_${module} SYSTEM PRIVATE
            $<TARGET_PROPERTY:Boost::context,INTERFACE_INCLUDE_DIRECTORIES>)
      endif()
    endif()
    weft_own_target(${target}_${module})
    add_dependencies(${target} ${target}_${module})
  endforeach()
endfunction()

# weft_tail_call_definitions(<out-var>): coro/detail/config.h takes "symmetric transfer
# is a guaranteed tail call" from __clang__ / __OPTIMIZE__. g++ defines __OPTIMIZE__ at
# -O1 and -Og too but only makes the tail call from -O2 on, so for g++ with -O/-O1/-Og as
# the effective level this returns WEFT_TAIL_CALLS_GUARANTEED=0 (per configuration with a
# multi-config generator), for the tests.
function(weft_tail_call_definitions out)
  set(defs)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    get_property(multi GLOBAL PROPERTY GENERATOR_IS_MULTI_CONFIG)
    if(multi)
      set(configs ${CMAKE_CONFIGURATION_TYPES})
    else()
      set(configs "${CMAKE_BUILD_TYPE}")
      if(configs STREQUAL "")
        set(configs "<none>")
      endif()
    endif()
    foreach(config IN LISTS configs)
      string(TOUPPER "${config}" upper)
      set(flags " ${CMAKE_CXX_FLAGS} ")
      if(NOT config STREQUAL "<none>")
        string(APPEND flags "${CMAKE_CXX_FLAGS_${upper}} ")
      endif()
      string(REGEX MATCHALL " -O[^ ]*" levels "${flags}")
      set(level "-O0")
      if(levels)
        list(GET levels -1 level)
        string(STRIP "${level}" level)
      endif()
      if(level MATCHES "^-O(1|g)?$")
        message(STATUS "weft: g++ ${level} (${config}) does not guarantee symmetric-transfer "
                       "tail calls; tests get WEFT_TAIL_CALLS_GUARANTEED=0")
        if(multi)
          list(APPEND defs "$<$<CONFIG:${config}>:WEFT_TAIL_CALLS_GUARANTEED=0>")
        else()
          list(APPEND defs "WEFT_TAIL_CALLS_GUARANTEED=0")
        endif()
      endif()
    endforeach()
  endif()
  set(${out} "${defs}" PARENT_SCOPE)
endfunction()

# weft_add_program(<target-var> <name-var> <source>): one executable for one of weft's
# own program sources, e.g. test/coro/detail/frame_allocator_test.cc gives target
# weft_coro_detail_frame_allocator_test, built as <build>/test/coro/detail/frame_allocator_test,
# and name coro/detail/frame_allocator_test (the ctest name). Links weft::weft.
function(weft_add_program target_var name_var source)
  get_filename_component(stem "${source}" NAME_WE)
  get_filename_component(dir "${source}" DIRECTORY)     # test/coro/detail
  set(name "${stem}")
  if(dir MATCHES "^[^/]+/(.+)$")                         # coro/detail
    set(name "${CMAKE_MATCH_1}/${stem}")
  endif()
  string(REPLACE "/" "_" target "weft_${name}")
  if(dir MATCHES "^examples")
    set(target "weft_examples_${stem}")
  endif()
  add_executable(${target} "${PROJECT_SOURCE_DIR}/${source}")
  target_link_libraries(${target} PRIVATE weft::weft)
  # Their own support headers, "test/support/..." and "benchmark/...", through links in
  # the build tree (the repository root would let "coro/lazy.h" pass unnoticed).
  set(view "${PROJECT_BINARY_DIR}/program_include")
  foreach(dir test benchmark)
    if(NOT EXISTS "${view}/${dir}")
      file(MAKE_DIRECTORY "${view}")
      file(CREATE_LINK "${PROJECT_SOURCE_DIR}/${dir}" "${view}/${dir}" SYMBOLIC)
    endif()
  endforeach()
  target_include_directories(${target} PRIVATE "${view}")
  set_target_properties(${target} PROPERTIES
      OUTPUT_NAME "${stem}"
      RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/${dir}")
  weft_own_target(${target})
  set(${target_var} "${target}" PARENT_SCOPE)
  set(${name_var} "${name}" PARENT_SCOPE)
endfunction()

# _weft_pc_link(<out-var> <library-file> <name>): "-l<name>", preceded by "-L<dir>" when
# <library-file> is not in one of the compiler's own library directories.
function(_weft_pc_link out file name)
  get_filename_component(dir "${file}" DIRECTORY)
  set(flags "-l${name}")
  if(dir AND NOT dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    set(flags "-L${dir} ${flags}")
  endif()
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

# _weft_pc_directories(): sets WEFT_PC_PREFIX_FROM_PCFILEDIR, WEFT_PC_INCLUDEDIR and
# WEFT_PC_LIBDIR for a .pc file in <libdir>/pkgconfig: relative to where the file is, so
# that the install can be moved, unless the install directories are absolute.
macro(_weft_pc_directories)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
    set(WEFT_PC_PREFIX_FROM_PCFILEDIR "")
    set(WEFT_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
    set(WEFT_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  else()
    file(RELATIVE_PATH _weft_pc_up "/root/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/root")  # ../..
    string(REGEX REPLACE "/$" "" WEFT_PC_PREFIX_FROM_PCFILEDIR "${_weft_pc_up}")
    set(WEFT_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
    set(WEFT_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  endif()
endmacro()

# weft_pkg_config_file(<output>): writes weft.pc (cmake/weft.pc.in) for the libraries and
# settings of this build: Cflags with the include directory and the definitions every
# user must share (WEFT_TASK_TRACKING, the fiber backend: _weft_public_definitions), Libs
# with weft's libraries in link order (each before what it uses) and what they link.
# Reads the variables of the top-level CMakeLists.txt. <output> may hold $<CONFIG>.
function(weft_pkg_config_file output)
  _weft_pc_directories()

  set(WEFT_PC_CFLAGS "")
  foreach(def IN LISTS _weft_public_definitions)
    string(APPEND WEFT_PC_CFLAGS " -D${def}")
  endforeach()

  set(libs "-lweft_stackful")
  get_target_property(io_type weft_io TYPE)
  if(NOT io_type STREQUAL "INTERFACE_LIBRARY")
    string(APPEND libs " -lweft_io")
  endif()
  string(APPEND libs " -lweft_coro -lweft_executors")
  set(requires "")
  if(WEFT_FIBER_BACKEND STREQUAL "boost")
    foreach(dir IN LISTS Boost_INCLUDE_DIRS)
      if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
        string(APPEND WEFT_PC_CFLAGS " -I${dir}")
      endif()
    endforeach()
    get_target_property(boost_file Boost::context LOCATION)
    _weft_pc_link(boost_flags "${boost_file}" boost_context)
    string(APPEND libs " ${boost_flags}")
  endif()
  if(_weft_have_liburing)
    # Debian's liburing-dev ships liburing.pc: require it when pkg-config knows it.
    find_package(PkgConfig QUIET)
    set(_weft_liburing_pc FALSE)
    if(PKG_CONFIG_FOUND)
      pkg_check_modules(_WEFT_PC_LIBURING QUIET liburing)
      set(_weft_liburing_pc ${_WEFT_PC_LIBURING_FOUND})
    endif()
    if(_weft_liburing_pc)
      set(requires "liburing")
    else()
      _weft_pc_link(uring_flags "${WEFT_LIBURING_LIBRARY}" uring)
      string(APPEND libs " ${uring_flags}")
      if(NOT WEFT_LIBURING_INCLUDE_DIR IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
        string(APPEND WEFT_PC_CFLAGS " -I${WEFT_LIBURING_INCLUDE_DIR}")
      endif()
    endif()
  endif()
  string(APPEND libs " -pthread")
  foreach(lib IN LISTS CMAKE_DL_LIBS)
    string(APPEND libs " -l${lib}")
  endforeach()
  set(WEFT_PC_LIBS "${libs}")
  set(WEFT_PC_REQUIRES "${requires}")
  configure_file("${PROJECT_SOURCE_DIR}/cmake/weft.pc.in" "${PROJECT_BINARY_DIR}/weft.pc.genex" @ONLY)
  file(GENERATE OUTPUT "${output}" INPUT "${PROJECT_BINARY_DIR}/weft.pc.genex")
endfunction()

# weft_pkg_config_tls_file(<output>): writes weft-tls.pc (cmake/weft-tls.pc.in) for
# weft::tls: Libs -lweft_tls, Requires weft (this version) and OpenSSL. OpenSSL comes as
# `Requires: openssl >= 3` when pkg-config knows the OpenSSL that CMake found (Debian's
# libssl-dev, vcpkg's openssl ship openssl.pc), else as its libraries' paths in Libs (and
# its include directory in Cflags, unless the compiler searches it anyway). Reads the
# variables of the top-level CMakeLists.txt and FindOpenSSL's. <output> may hold
# $<CONFIG>.
function(weft_pkg_config_tls_file output)
  _weft_pc_directories()
  set(WEFT_PC_TLS_REQUIRES "")
  set(WEFT_PC_TLS_CFLAGS "")
  set(WEFT_PC_TLS_LIBS "")
  find_package(PkgConfig QUIET)
  set(openssl_pc FALSE)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(_WEFT_PC_OPENSSL QUIET openssl>=3)
    # The same OpenSSL as CMake's (not another one pkg-config happens to know).
    if(_WEFT_PC_OPENSSL_FOUND AND OPENSSL_SSL_LIBRARY)
      get_filename_component(cmake_dir "${OPENSSL_SSL_LIBRARY}" DIRECTORY)
      get_filename_component(cmake_dir "${cmake_dir}" REALPATH)
      set(pc_dirs ${_WEFT_PC_OPENSSL_LIBDIR} ${_WEFT_PC_OPENSSL_LIBRARY_DIRS})
      foreach(dir IN LISTS pc_dirs)
        get_filename_component(dir "${dir}" REALPATH)
        if(dir STREQUAL cmake_dir)
          set(openssl_pc TRUE)
        endif()
      endforeach()
    endif()
  endif()
  if(openssl_pc)
    set(WEFT_PC_TLS_REQUIRES ", openssl >= 3")
  else()
    _weft_pc_link(ssl_flags "${OPENSSL_SSL_LIBRARY}" ssl)
    _weft_pc_link(crypto_flags "${OPENSSL_CRYPTO_LIBRARY}" crypto)
    set(WEFT_PC_TLS_LIBS " ${ssl_flags} ${crypto_flags}")
    if(OPENSSL_INCLUDE_DIR AND NOT OPENSSL_INCLUDE_DIR IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
      set(WEFT_PC_TLS_CFLAGS " -I${OPENSSL_INCLUDE_DIR}")
    endif()
  endif()
  configure_file("${PROJECT_SOURCE_DIR}/cmake/weft-tls.pc.in"
                 "${PROJECT_BINARY_DIR}/weft-tls.pc.genex" @ONLY)
  file(GENERATE OUTPUT "${output}" INPUT "${PROJECT_BINARY_DIR}/weft-tls.pc.genex")
endfunction()
