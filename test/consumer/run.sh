#!/usr/bin/env bash
# Builds and runs test/consumer/ against weft the three ways a user gets it:
#   package       cmake --install into a temporary prefix, then find_package(weft CONFIG)
#   subdirectory  add_subdirectory(<this checkout>)
#   fetchcontent  FetchContent_Declare(weft URL file://<archive of this checkout>)
# Usage: test/consumer/run.sh [BUILD_DIR] [MODE...]   (default build/consumer, all modes)
# Honours CXX (e.g. CXX=clang++-16). Needs no network.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-${repo}/build/consumer}"
shift || true
modes=("$@")
[[ ${#modes[@]} -gt 0 ]] || modes=(package subdirectory fetchcontent)
mkdir -p "${build}"
build="$(cd "${build}" && pwd)"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

log() { printf '[consumer] %s\n' "$*"; }

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
      log "package: install weft into a temporary prefix"
      prefix="${build}/prefix"
      rm -rf "${build}/weft-build" "${prefix}"
      cmake -S "${repo}" -B "${build}/weft-build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DWEFT_BUILD_TESTS=OFF -DWEFT_BUILD_BENCHMARKS=OFF -DWEFT_BUILD_EXAMPLES=OFF \
        -DCMAKE_INSTALL_PREFIX="${prefix}" >"${build}/weft-build.log" 2>&1 ||
        { cat "${build}/weft-build.log"; exit 1; }
      cmake --build "${build}/weft-build" >>"${build}/weft-build.log" 2>&1 ||
        { cat "${build}/weft-build.log"; exit 1; }
      cmake --install "${build}/weft-build" >>"${build}/weft-build.log" 2>&1 ||
        { cat "${build}/weft-build.log"; exit 1; }
      for f in include/weft/coro/lazy.h include/weft/coro/sync_await.h \
               include/weft/executors/thread_pool.h include/weft/executors/detail/job.h; do
        [[ -f "${prefix}/${f}" ]] || { log "missing ${prefix}/${f}"; exit 1; }
      done
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
    *)
      log "unknown mode ${mode}"
      exit 2
      ;;
  esac
  log "${mode}: ok"
done
