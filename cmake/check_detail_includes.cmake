# check_detail_includes.cmake: fails, naming file and line, when a library file of module
# X (X/*.h, X/*.cc, X/detail/*) includes weft/Y/detail/... for a module Y other than X.
# detail/ is private to the module that owns it (DESIGN.md, "Layers"): a module uses
# another only through its public headers (the awaitable author's kit,
# coro/awaitable_support.h; the runtime integrator's hooks, coro/runtime_hooks.h; ...).
# Tests and benchmarks may include any detail header: they are not scanned.
#
# Run as a script: cmake -DWEFT_SOURCE_DIR=<repository> -DWEFT_MODULES=coro,executors,...
#                        -P cmake/check_detail_includes.cmake
# (weft_add_header_check runs it as part of the header check, and ctest as
# build/detail_includes.)

if(NOT WEFT_SOURCE_DIR OR NOT WEFT_MODULES)
  message(FATAL_ERROR "check_detail_includes.cmake: set WEFT_SOURCE_DIR and WEFT_MODULES")
endif()

string(REPLACE "," ";" WEFT_MODULES "${WEFT_MODULES}")
set(violations 0)
foreach(module IN LISTS WEFT_MODULES)
  file(GLOB_RECURSE files RELATIVE "${WEFT_SOURCE_DIR}"
       "${WEFT_SOURCE_DIR}/${module}/*.h" "${WEFT_SOURCE_DIR}/${module}/*.cc")
  list(SORT files)
  foreach(file IN LISTS files)
    file(STRINGS "${WEFT_SOURCE_DIR}/${file}" lines)
    set(number 0)
    foreach(line IN LISTS lines)
      math(EXPR number "${number} + 1")
      if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*[<\"]weft/([a-z_0-9]+)/detail/([^>\"]*)[>\"]")
        set(owner "${CMAKE_MATCH_1}")
        set(header "weft/${owner}/detail/${CMAKE_MATCH_2}")
        if(NOT owner STREQUAL module)
          message(SEND_ERROR "${WEFT_SOURCE_DIR}/${file}:${number}: includes ${header}: "
                             "${owner}/detail/ is private to ${owner}/; ${module}/ may use "
                             "only its public headers")
          math(EXPR violations "${violations} + 1")
        endif()
      endif()
    endforeach()
  endforeach()
endforeach()

if(violations GREATER 0)
  message(FATAL_ERROR "weft: ${violations} include(s) of another module's detail/ (see above)")
endif()
message(STATUS "weft: no module includes another module's detail/ (${WEFT_MODULES})")
