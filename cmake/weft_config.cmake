# The build's choices that more than one module (and the install) depend on, and the system
# libraries they need: the event loop (WEFT_IO_URING, liburing), task tracking
# (WEFT_TASK_TRACKING), the fibers' switch core (WEFT_FIBER_BACKEND, Boost.Context) and TLS
# (WEFT_TLS, OpenSSL). include()d by the top-level CMakeLists.txt before the modules, so
# that the imported targets found here are visible in every directory. Sets
# _weft_have_liburing, _weft_task_tracking, _weft_fiber_asm_arch,
# _weft_fiber_backend_define and _weft_have_tls for the modules' CMakeLists.txt.

find_package(Threads REQUIRED)

# The event loops of ThreadPool's workers: io_uring through liburing (Debian
# liburing-dev) when it is found, and epoll always. WEFT_IO_URING=AUTO (the default) uses
# liburing if it is installed, ON requires it, OFF builds the epoll loop only. Which one
# runs is decided at run time (executors/io_loop.h): io_uring when the kernel allows it.
set(WEFT_IO_URING AUTO CACHE STRING "Build the io_uring event loop (liburing): AUTO, ON or OFF")
set_property(CACHE WEFT_IO_URING PROPERTY STRINGS AUTO ON OFF)
set(_weft_have_liburing OFF)
if(NOT WEFT_IO_URING STREQUAL "OFF")
  find_path(WEFT_LIBURING_INCLUDE_DIR liburing.h)
  find_library(WEFT_LIBURING_LIBRARY uring)
  if(WEFT_LIBURING_INCLUDE_DIR AND WEFT_LIBURING_LIBRARY)
    set(_weft_have_liburing ON)
    if(NOT TARGET weft_liburing)
      add_library(weft_liburing UNKNOWN IMPORTED)
      set_target_properties(weft_liburing PROPERTIES
          IMPORTED_LOCATION "${WEFT_LIBURING_LIBRARY}"
          INTERFACE_INCLUDE_DIRECTORIES "${WEFT_LIBURING_INCLUDE_DIR}")
    endif()
  elseif(WEFT_IO_URING STREQUAL "ON")
    message(FATAL_ERROR "weft: WEFT_IO_URING=ON but liburing was not found "
                        "(Debian/Ubuntu: apt-get install liburing-dev)")
  endif()
endif()
message(STATUS "weft: io_uring event loop: ${_weft_have_liburing} (epoll: always)")

# WEFT_TASK_TRACKING (coro/detail/config.h): the root-task registry and Lazys' wait notes
# that task dumps and gdb's `weft tasks` list (docs/debugging.md). ON, the default, in
# every build type (Release too: services hang in Release); OFF leaves it out. AUTO, the
# default of earlier versions (Debug only), is kept as a value so that build trees and
# scripts that name it still configure: it is the default, ON. A PUBLIC definition of
# weft::coro with the value weft is built with, so that weft and every program linking it
# agree.
set(WEFT_TASK_TRACKING ON CACHE STRING
    "Task dumps list root tasks and what Lazys wait on: ON (default, every build type) or OFF; AUTO is ON")
set_property(CACHE WEFT_TASK_TRACKING PROPERTY STRINGS ON OFF AUTO)
if(WEFT_TASK_TRACKING STREQUAL "AUTO" OR WEFT_TASK_TRACKING)
  set(_weft_task_tracking 1)
else()
  set(_weft_task_tracking 0)
endif()
# (cmake/weft_install.cmake writes one build_config.h and weft.pc per configuration.)
get_property(_weft_multi_config_generator GLOBAL PROPERTY GENERATOR_IS_MULTI_CONFIG)
message(STATUS "weft: task tracking (root tasks in task dumps): ${_weft_task_tracking}")

# The fibers' switch core: asm (weft's own, x86-64 and aarch64 Linux: the files listed in
# stackful/CMakeLists.txt) or boost (Boost.Context's fcontext, anything Boost supports).
weft_default_fiber_backend(_weft_default_fiber_backend _weft_fiber_asm_arch)
set(WEFT_FIBER_BACKEND "${_weft_default_fiber_backend}" CACHE STRING
    "Switch core of weft's fibers: asm (own assembly; x86-64/aarch64 Linux) or boost")
option(WEFT_FIBER_SAVE_FPU_CONTROL
       "asm switch core: preserve MXCSR/x87 CW (aarch64: FPCR) per context (stackful/detail/context_layout.h)"
       ON)
set_property(CACHE WEFT_FIBER_BACKEND PROPERTY STRINGS asm boost)
if(WEFT_FIBER_BACKEND STREQUAL "asm")
  if(NOT _weft_fiber_asm_arch)
    message(FATAL_ERROR "weft: WEFT_FIBER_BACKEND=asm has no switch core for "
                        "${CMAKE_SYSTEM_NAME}/${CMAKE_SYSTEM_PROCESSOR}: use -DWEFT_FIBER_BACKEND=boost")
  endif()
  # The .S files are preprocessed (<cet.h>, macros): assemble them with the C++ compiler
  # driver unless a toolchain chose an assembler. (enable_language belongs in the
  # top-level directory, which this file is included from.)
  if(NOT CMAKE_ASM_COMPILER)
    set(CMAKE_ASM_COMPILER "${CMAKE_CXX_COMPILER}")
  endif()
  enable_language(ASM)
  set(_weft_fiber_backend_define WEFT_FIBER_BACKEND_ASM=1)
  if(NOT WEFT_FIBER_SAVE_FPU_CONTROL)
    list(APPEND _weft_fiber_backend_define WEFT_FIBER_SAVE_FPU_CONTROL=0)
  endif()
elseif(WEFT_FIBER_BACKEND STREQUAL "boost")
  find_package(Boost REQUIRED COMPONENTS context)
  set(_weft_fiber_backend_define WEFT_FIBER_BACKEND_BOOST=1)
else()
  message(FATAL_ERROR "weft: WEFT_FIBER_BACKEND must be asm or boost, not '${WEFT_FIBER_BACKEND}'")
endif()
message(STATUS "weft: fiber switch core: ${WEFT_FIBER_BACKEND}")

# weft::tls: TlsContext and TlsStream on OpenSSL 3 (Debian: libssl-dev). WEFT_TLS=AUTO
# (the default) builds it when OpenSSL is found, ON requires it, OFF never builds it.
set(WEFT_TLS AUTO CACHE STRING "Build weft::tls (OpenSSL 3): AUTO, ON or OFF")
set(_weft_have_tls OFF)
if(WEFT_TLS STREQUAL "ON")
  find_package(OpenSSL 3 REQUIRED)
elseif(NOT WEFT_TLS STREQUAL "OFF")
  find_package(OpenSSL 3 QUIET)
endif()
if(OpenSSL_FOUND AND NOT WEFT_TLS STREQUAL "OFF")
  set(_weft_have_tls ON)
endif()
message(STATUS "weft: TLS (weft::tls, OpenSSL 3): ${_weft_have_tls}")
