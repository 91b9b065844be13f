#!/usr/bin/env bash
# Builds and runs test/consumer/ against weft every way a user gets it:
#   package       cmake --install into a temporary prefix, then find_package(weft CONFIG)
#   subdirectory  add_subdirectory(<this checkout>)
#   fetchcontent  FetchContent_Declare(weft URL file://<archive of this checkout>)
#   pkgconfig     the same install: g++ main.cc $(pkg-config --cflags --libs weft), and
#                 every installed header in one file, both under the strict flags below
# Every build uses -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wundef -Werror, and
# main.cc checks <weft/version.h> against the version the package reports.
# Usage: test/consumer/run.sh [BUILD_DIR] [MODE...]   (default build/consumer, all modes)
# Honours CXX (e.g. CXX=clang++-16). Needs no network.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-${repo}/build/consumer}"
shift || true
modes=("$@")
[[ ${#modes[@]} -gt 0 ]] || modes=(package subdirectory fetchcontent pkgconfig)
mkdir -p "${build}"
build="$(cd "${build}" && pwd)"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

log() { printf '[consumer] %s\n' "$*"; }

# The consumer's flags in every mode (test/consumer/CMakeLists.txt has the same).
strict_flags=(-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wundef -Werror)
prefix="${build}/prefix"
installed=0

# install_weft: weft's library alone, built once per run and installed into ${prefix}
# with cmake --install --prefix (not the configured prefix: the package must not care).
install_weft() {
  [[ ${installed} -eq 0 ]] || return 0
  log "install weft into ${prefix}"
  rm -rf "${build}/weft-build" "${prefix}"
  cmake -S "${repo}" -B "${build}/weft-build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX=/nonexistent >"${build}/weft-build.log" 2>&1 ||
    { cat "${build}/weft-build.log"; exit 1; }
  cmake --build "${build}/weft-build" >>"${build}/weft-build.log" 2>&1 ||
    { cat "${build}/weft-build.log"; exit 1; }
  cmake --install "${build}/weft-build" --prefix "${prefix}" >>"${build}/weft-build.log" 2>&1 ||
    { cat "${build}/weft-build.log"; exit 1; }
  local f
  for f in include/weft/coro/lazy.h include/weft/coro/sync_await.h include/weft/version.h \
           include/weft/build_config.h include/weft/executors/thread_pool.h \
           include/weft/executors/detail/job.h lib/pkgconfig/weft.pc; do
    [[ -f "${prefix}/${f}" ]] || { log "missing ${prefix}/${f}"; exit 1; }
  done
  installed=1
}

run_consumer() {  # run_consumer MODE CMAKE_ARGS...
  local mode="$1" dir="${build}/${1}"
  shift
  rm -rf "${dir}"
  cmake -S "${repo}/test/consumer" -B "${dir}" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DWEFT_CONSUMER_MODE="${mode}" "$@" >"${dir}.log" 2>&1 || { cat "${dir}.log"; return 1; }
  cmake --build "${dir}" >>"${dir}.log" 2>&1 || { cat "${dir}.log"; return 1; }
  "${dir}/consumer"
}

for mode in "${modes[@]}"; do
  case "${mode}" in
    package)
      install_weft
      [[ -n "$(find "${prefix}" -name weftConfig.cmake)" ]] || { log "no weftConfig.cmake"; exit 1; }
      [[ -n "$(find "${prefix}" -name weftConfigVersion.cmake)" ]] || { log "no weftConfigVersion.cmake"; exit 1; }
      run_consumer package -DCMAKE_PREFIX_PATH="${prefix}"
      ;;
    subdirectory)
      log "subdirectory: add_subdirectory(${repo})"
      run_consumer subdirectory -DWEFT_SOURCE_DIR="${repo}"
      ;;
    fetchcontent)
      log "fetchcontent: FetchContent_Declare(weft URL file://...)"
      archive="${build}/weft-src.tar.gz"
      tar -C "${repo}" --exclude=./build --exclude='./bazel-*' --exclude=./.git \
        -czf "${archive}" .
      run_consumer fetchcontent -DWEFT_URL="file://${archive}" -DFETCHCONTENT_QUIET=ON
      ;;
    pkgconfig)
      install_weft
      command -v pkg-config >/dev/null || { log "pkg-config is not installed"; exit 1; }
      export PKG_CONFIG_PATH="${prefix}/lib/pkgconfig"
      version="$(pkg-config --modversion weft)"
      flags="$(pkg-config --cflags --libs weft)"
      log "pkgconfig: weft ${version}: ${flags}"
      dir="${build}/pkgconfig"
      rm -rf "${dir}" && mkdir -p "${dir}"
      # Every installed header, for the warnings only the headers main.cc skips would give.
      (cd "${prefix}/include" && find weft -name '*.h' | LC_ALL=C sort |
        sed 's|.*|#include <&>|') >"${dir}/all_headers.cc"
      # shellcheck disable=SC2086  # flags is a list of words
      "${CXX:-g++}" -std=c++20 "${strict_flags[@]}" -fsyntax-only "${dir}/all_headers.cc" ${flags}
      # shellcheck disable=SC2086
      "${CXX:-g++}" -std=c++20 "${strict_flags[@]}" -O2 \
        -DWEFT_CONSUMER_EXPECTED_VERSION="\"${version}\"" "${repo}/test/consumer/main.cc" \
        ${flags} -o "${dir}/consumer"
      "${dir}/consumer"
      unset PKG_CONFIG_PATH
      ;;
    *)
      log "unknown mode ${mode}"
      exit 2
      ;;
  esac
  log "${mode}: ok"
done
