# check_doc_examples.cmake: the documents' worked examples are the code that tests compile
# and run. A test holds an example between the lines `// BEGIN docs/<name>.md` and
# `// END docs/<name>.md`; the document must contain that text word for word (in a code
# block). Fails, naming the test and the document, when they differ.
#
# Run as a script: cmake -DWEFT_SOURCE_DIR=<repository> -P cmake/check_doc_examples.cmake
# (the ctest test cmake/check_doc_examples).

if(NOT WEFT_SOURCE_DIR)
  message(FATAL_ERROR "check_doc_examples.cmake: set WEFT_SOURCE_DIR")
endif()

file(GLOB_RECURSE tests RELATIVE "${WEFT_SOURCE_DIR}" "${WEFT_SOURCE_DIR}/test/*.cc")
list(SORT tests)
set(examples 0)
set(failures 0)
foreach(test IN LISTS tests)
  file(READ "${WEFT_SOURCE_DIR}/${test}" text)
  while(text MATCHES "// BEGIN (docs/[a-z_0-9.-]+\\.md)\n")
    set(doc "${CMAKE_MATCH_1}")
    string(FIND "${text}" "// BEGIN ${doc}\n" begin)
    string(LENGTH "// BEGIN ${doc}\n" skip)
    math(EXPR begin "${begin} + ${skip}")
    string(SUBSTRING "${text}" ${begin} -1 text)
    string(FIND "${text}" "// END ${doc}" end)
    if(end EQUAL -1)
      message(SEND_ERROR "${WEFT_SOURCE_DIR}/${test}: // BEGIN ${doc} without // END ${doc}")
      math(EXPR failures "${failures} + 1")
      break()
    endif()
    string(SUBSTRING "${text}" 0 ${end} example)
    math(EXPR examples "${examples} + 1")
    if(NOT EXISTS "${WEFT_SOURCE_DIR}/${doc}")
      message(SEND_ERROR "${WEFT_SOURCE_DIR}/${test}: ${doc} does not exist")
      math(EXPR failures "${failures} + 1")
    else()
      file(READ "${WEFT_SOURCE_DIR}/${doc}" document)
      string(FIND "${document}" "${example}" at)
      if(at EQUAL -1)
        message(SEND_ERROR "${WEFT_SOURCE_DIR}/${test}: the example between // BEGIN ${doc} "
                           "and // END ${doc} is not in ${doc} word for word: copy it there")
        math(EXPR failures "${failures} + 1")
      endif()
    endif()
    string(SUBSTRING "${text}" ${end} -1 text)
  endwhile()
endforeach()

if(failures GREATER 0)
  message(FATAL_ERROR "weft: ${failures} documented example(s) out of step with their tests")
endif()
message(STATUS "weft: ${examples} documented example(s) match their tests")
