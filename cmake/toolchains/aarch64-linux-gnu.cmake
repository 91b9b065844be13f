# Cross-compiling weft for aarch64 Linux on an x86-64 Debian/Ubuntu host, with the tests
# run under qemu-user (apt-get install g++-aarch64-linux-gnu qemu-user):
#
#   cmake -S . -B build/aarch64 -G Ninja \
#     -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake \
#     -DWEFT_BUILD_BENCHMARKS=OFF -DWEFT_BUILD_EXAMPLES=OFF
#   cmake --build build/aarch64 && ctest --test-dir build/aarch64
#
# GoogleTest is built from /usr/src/googletest (WEFT_GTEST_FROM_SOURCE defaults to ON when
# cross-compiling): the host's libgtest is x86-64. ctest runs each test binary through
# CMAKE_CROSSCOMPILING_EMULATOR, qemu-aarch64 with the cross sysroot as its -L prefix
# (binfmt_misc is not needed).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(WEFT_AARCH64_TRIPLE aarch64-linux-gnu CACHE STRING "GNU triple of the aarch64 cross toolchain")
set(CMAKE_C_COMPILER "${WEFT_AARCH64_TRIPLE}-gcc")
set(CMAKE_CXX_COMPILER "${WEFT_AARCH64_TRIPLE}-g++")
set(WEFT_AARCH64_SYSROOT "/usr/${WEFT_AARCH64_TRIPLE}" CACHE PATH
    "Target libraries for the cross build and for qemu -L")

# Libraries, headers and packages of the target only; programs (ninja, qemu) of the host.
set(CMAKE_FIND_ROOT_PATH "${WEFT_AARCH64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

set(CMAKE_CROSSCOMPILING_EMULATOR "qemu-aarch64;-L;${WEFT_AARCH64_SYSROOT}")
