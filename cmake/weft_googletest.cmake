# GoogleTest and GoogleMock for weft's tests (test/, and examples/*_test.cc), include()d by
# the top-level CMakeLists.txt when WEFT_BUILD_TESTS is on, so that GTest::* are visible
# in every directory. A cross build cannot link the host's libgtest: it builds GoogleTest
# from its sources (Debian/Ubuntu: /usr/src/googletest from libgtest-dev / googletest).
option(WEFT_GTEST_FROM_SOURCE "Build GoogleTest from WEFT_GTEST_SOURCE_DIR" ${CMAKE_CROSSCOMPILING})
set(WEFT_GTEST_SOURCE_DIR "/usr/src/googletest" CACHE PATH "GoogleTest sources (WEFT_GTEST_FROM_SOURCE)")
if(WEFT_GTEST_FROM_SOURCE)
  if(NOT EXISTS "${WEFT_GTEST_SOURCE_DIR}/CMakeLists.txt")
    message(FATAL_ERROR "weft: WEFT_GTEST_FROM_SOURCE: no GoogleTest sources in ${WEFT_GTEST_SOURCE_DIR}")
  endif()
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  add_subdirectory("${WEFT_GTEST_SOURCE_DIR}" "${PROJECT_BINARY_DIR}/googletest" EXCLUDE_FROM_ALL)
else()
  find_package(GTest REQUIRED)
endif()
if(NOT TARGET GTest::gmock OR NOT TARGET GTest::gtest_main)
  message(FATAL_ERROR "weft's tests need GTest::gtest_main and GTest::gmock "
                      "(Debian/Ubuntu: apt-get install libgtest-dev libgmock-dev)")
endif()
