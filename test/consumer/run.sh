#!/usr/bin/env bash
# Builds and runs test/consumer/ against weft every way a user gets it:
#   package       cmake --install into a temporary prefix, then find_package(weft CONFIG)
#   subdirectory  add_subdirectory(<this checkout>)
#   fetchcontent  FetchContent_Declare(weft URL file://<archive of this checkout>)
#   pkgconfig     the same install: g++ main.cc $(pkg-config --cflags --libs weft), and
#                 every installed header in one file, both under the strict flags below;
#                 where weft::tls was installed (OpenSSL 3 found), tls_main.cc with
#                 $(pkg-config --cflags --libs weft-tls) too
#   bazel         a workspace of its own in BUILD_DIR depending on @weft//:weft through
#                 local_repository(path = <this checkout>), offline (weft's stand-ins for
#                 Bazel's rules_cc/rules_java/coverage repositories), -c opt, task
#                 tracking off (--define=weft_task_tracking=off); needs `bazel`
#   vcpkg         ports/weft/ checked without vcpkg: vcpkg.json is valid JSON with the
#                 version of version.h and weft's license, and portfile.cmake runs with
#                 stand-ins for vcpkg's functions (test/consumer/vcpkg_portfile_check.cmake),
#                 its options accepted by weft's CMake, down to share/weft/copyright
#   conan         conan create (conanfile.py, test_package/ builds main.cc) of a copy of
#                 this checkout, offline (--no-remote), in a CONAN_HOME under BUILD_DIR;
#                 then again with -o weft/*:tls=True (test_package builds tls_main.cc too),
#                 where the system has OpenSSL 3, against a stand-in for Conan Center's
#                 openssl/3.x that points at it (test/consumer/conan_system_openssl/);
#                 Conan 2 is installed from PyPI into a venv under BUILD_DIR when there is
#                 no `conan` 2 on the PATH (skipped, with a message, when that fails)
# Every build uses -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wundef -Werror, and
# main.cc checks <weft/version.h> against the version the package reports. Every built
# consumer also runs with WEFT_DUMP_SIGNAL (QUIT or USR1) and raises that signal: it must
# go on and write weft's task dump to stderr (docs/debugging.md), though it never calls
# weft's task dump itself (conan: test_package runs it plainly).
# Usage: test/consumer/run.sh [BUILD_DIR] [MODE...]   (default build/consumer, all modes)
# Honours CXX (e.g. CXX=clang++-16; Conan's profile detect reads CC and CXX). Needs no
# network, except to install Conan.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-${repo}/build/consumer}"
shift || true
modes=("$@")
[[ ${#modes[@]} -gt 0 ]] || modes=(package subdirectory fetchcontent pkgconfig bazel vcpkg conan)
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
  # The plain commands, as on a machine without GoogleTest and Google Benchmark (their
  # find_package calls are disabled: the library alone must need neither).
  cmake -S "${repo}" -B "${build}/weft-build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON \
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
  # Built with the default options (Release): task tracking on, recorded for users that
  # pass no -D (build_config.h) and in weft.pc's Cflags.
  grep -qx '#define WEFT_TASK_TRACKING 1' "${prefix}/include/weft/build_config.h" ||
    { log "build_config.h: task tracking is not on by default in Release"; exit 1; }
  grep -q -- '-DWEFT_TASK_TRACKING=1' "${prefix}/lib/pkgconfig/weft.pc" ||
    { log "weft.pc: Cflags without -DWEFT_TASK_TRACKING=1 (the default in Release)"; exit 1; }
  # weft::tls (built where OpenSSL 3 is found) comes with its pkg-config file.
  if [[ -f "${prefix}/lib/libweft_tls.a" && ! -f "${prefix}/lib/pkgconfig/weft-tls.pc" ]]; then
    log "libweft_tls.a is installed without lib/pkgconfig/weft-tls.pc"
    exit 1
  fi
  installed=1
}

# source_copy DIR: this checkout's files (as they are, committed or not) without build
# trees, Bazel's links and .git, in DIR.
source_copy() {
  rm -rf "$1" && mkdir -p "$1"
  tar -C "${repo}" --exclude=./build --exclude='./bazel-*' --exclude=./.git -cf - . |
    tar -C "$1" -xf -
}

# find_conan: sets `conan` to a Conan 2 from the PATH or from ${build}/conan-venv
# (created with pip when missing); returns 1 when neither works.
find_conan() {
  conan=""
  if command -v conan >/dev/null && [[ "$(conan --version 2>/dev/null)" == "Conan version 2."* ]]; then
    conan="$(command -v conan)"
    return 0
  fi
  local venv="${build}/conan-venv"
  if [[ ! -x "${venv}/bin/conan" ]]; then
    log "conan: installing Conan 2 from PyPI into ${venv}"
    rm -rf "${venv}"
    { python3 -m venv "${venv}" && "${venv}/bin/pip" install -q --disable-pip-version-check \
        'conan>=2,<3'; } >"${build}/conan-venv.log" 2>&1 ||
      { tail -n 5 "${build}/conan-venv.log"; rm -rf "${venv}"; return 1; }
  fi
  conan="${venv}/bin/conan"
}

# check_dump_signal PROGRAM SIGNAL: PROGRAM (main.cc), started with WEFT_DUMP_SIGNAL=SIGNAL
# (QUIT or USR1), raises SIGNAL, survives it and writes the task dump's header line
# ("weft: 0 tasks, 0 fibers...") to stderr.
check_dump_signal() {
  local program="$1" signal="$2" status=0 err
  err="$(WEFT_DUMP_SIGNAL="${signal}" "${program}" --raise-dump-signal "${signal}" 2>&1 >/dev/null)" ||
    status=$?
  if [[ ${status} -ne 0 ]] || ! grep -Eq '^weft: [0-9]+ tasks?, [0-9]+ fibers?' <<<"${err}"; then
    printf '%s\n' "${err}"
    log "WEFT_DUMP_SIGNAL=${signal}: no task dump on SIG${signal} (exit status ${status})"
    exit 1
  fi
  log "WEFT_DUMP_SIGNAL=${signal}: SIG${signal} dumped: $(grep -E '^weft: ' <<<"${err}" | head -n 1)"
}

run_consumer() {  # run_consumer MODE BUILD_TYPE CMAKE_ARGS...
  local mode="$1" type="$2" dir="${build}/${1}"
  shift 2
  rm -rf "${dir}"
  cmake -S "${repo}/test/consumer" -B "${dir}" "${generator[@]}" -DCMAKE_BUILD_TYPE="${type}" \
    -DWEFT_CONSUMER_MODE="${mode}" "$@" >"${dir}.log" 2>&1 || { cat "${dir}.log"; return 1; }
  cmake --build "${dir}" >>"${dir}.log" 2>&1 || { cat "${dir}.log"; return 1; }
  "${dir}/consumer"
  "${dir}/testing_consumer"
  # Built where weft has weft::tls (OpenSSL 3 found): it must then link and run.
  if [[ -x "${dir}/tls_consumer" ]]; then
    "${dir}/tls_consumer"
  fi
}

for mode in "${modes[@]}"; do
  mode_start=${SECONDS}
  case "${mode}" in
    package)
      install_weft
      [[ -n "$(find "${prefix}" -name weftConfig.cmake)" ]] || { log "no weftConfig.cmake"; exit 1; }
      [[ -n "$(find "${prefix}" -name weftConfigVersion.cmake)" ]] || { log "no weftConfigVersion.cmake"; exit 1; }
      run_consumer package Release -DCMAKE_PREFIX_PATH="${prefix}"
      check_dump_signal "${build}/package/consumer" QUIT
      ;;
    subdirectory)
      # Debug: weft built with the consumer, task tracking on in both (and -O0 is quicker).
      log "subdirectory: add_subdirectory(${repo}), Debug"
      run_consumer subdirectory Debug -DWEFT_SOURCE_DIR="${repo}"
      check_dump_signal "${build}/subdirectory/consumer" USR1
      ;;
    fetchcontent)
      log "fetchcontent: FetchContent_Declare(weft URL file://...)"
      archive="${build}/weft-src.tar.gz"
      source_copy "${build}/weft-src"
      tar -C "${build}/weft-src" -czf "${archive}" .
      run_consumer fetchcontent Release -DWEFT_URL="file://${archive}" -DFETCHCONTENT_QUIET=ON
      check_dump_signal "${build}/fetchcontent/consumer" QUIT
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
      # (--cflags only: clang++ -Werror rejects link flags that -fsyntax-only does not use.)
      # shellcheck disable=SC2086  # a list of words
      "${CXX:-g++}" -std=c++20 "${strict_flags[@]}" -fsyntax-only "${dir}/all_headers.cc" \
        $(pkg-config --cflags weft)
      # shellcheck disable=SC2086
      "${CXX:-g++}" -std=c++20 "${strict_flags[@]}" -O2 \
        -DWEFT_CONSUMER_EXPECTED_VERSION="\"${version}\"" "${repo}/test/consumer/main.cc" \
        ${flags} -o "${dir}/consumer"
      "${dir}/consumer"
      check_dump_signal "${dir}/consumer" USR1
      # TLS through weft-tls.pc (weft's libraries and OpenSSL come with it), where installed.
      if pkg-config --exists weft-tls; then
        [[ "$(pkg-config --modversion weft-tls)" == "${version}" ]] ||
          { log "pkgconfig: weft-tls $(pkg-config --modversion weft-tls), weft ${version}"; exit 1; }
        tls_flags="$(pkg-config --cflags --libs weft-tls)"
        log "pkgconfig: weft-tls: ${tls_flags}"
        # shellcheck disable=SC2086
        "${CXX:-g++}" -std=c++20 "${strict_flags[@]}" -O2 "${repo}/test/consumer/tls_main.cc" \
          ${tls_flags} -o "${dir}/tls_consumer"
        "${dir}/tls_consumer"
      else
        log "pkgconfig: no weft-tls (weft was built without OpenSSL 3)"
      fi
      unset PKG_CONFIG_PATH
      ;;
    bazel)
      command -v bazel >/dev/null || { log "bazel is not installed (Debian: bazel-bootstrap)"; exit 1; }
      ws="${build}/bazel"
      log "bazel: bazel build -c opt --define=weft_task_tracking=off //:consumer in ${ws} ($(bazel --version 2>/dev/null))"
      rm -rf "${ws}" && mkdir -p "${ws}"
      cp "${repo}/test/consumer/main.cc" "${ws}/main.cc"
      cat >"${ws}/WORKSPACE" <<EOF_WORKSPACE
# Generated by test/consumer/run.sh: a project depending on weft, vendored at
# ${repo} (as a user would have it in third_party/weft/), offline.
workspace(name = "weft_consumer")

local_repository(
    name = "weft",
    path = "${repo}",
)

load("@weft//bazel:system_deps.bzl", "weft_offline_toolchain_repositories")

weft_offline_toolchain_repositories(weft_root = "${repo}/")
EOF_WORKSPACE
      # Bazel has no package version to compare <weft/version.h> with.
      cat >"${ws}/BUILD.bazel" <<EOF_BUILD
cc_binary(
    name = "consumer",
    srcs = ["main.cc"],
    copts = [$(printf '"%s", ' "${strict_flags[@]}")"-DWEFT_CONSUMER_NO_PACKAGE_VERSION"],
    deps = ["@weft//:weft"],
)
EOF_BUILD
      cat >"${ws}/.bazelrc" <<'EOF_BAZELRC'
build --cxxopt=-std=c++20
build --host_cxxopt=-std=c++20
build --nosandbox_debug
build --curses=no --color=no --show_progress_rate_limit=30
EOF_BAZELRC
      bazel_jobs=()
      [[ -n "${CMAKE_BUILD_PARALLEL_LEVEL:-}" ]] && bazel_jobs=(--jobs="${CMAKE_BUILD_PARALLEL_LEVEL}")
      # Its own Bazel server (one per workspace), stopped afterwards.
      # -c opt, as a service is shipped, and without task tracking (on by default): the one
      # consumer built with it off, through weft's Bazel option. Nothing but the start-up
      # hook then links weft's task dump; check_dump_signal below needs that.
      (cd "${ws}" && bazel build -c opt --define=weft_task_tracking=off "${bazel_jobs[@]}" \
        //:consumer) >"${ws}.log" 2>&1 ||
        { cat "${ws}.log"; (cd "${ws}" && bazel shutdown) >/dev/null 2>&1; exit 1; }
      (cd "${ws}" && bazel shutdown) >/dev/null 2>&1 || true
      "${ws}/bazel-bin/consumer"
      check_dump_signal "${ws}/bazel-bin/consumer" QUIT
      ;;
    vcpkg)
      python3 - "${repo}" <<'EOF_PY'
import json, re, sys
repo = sys.argv[1]
port = json.load(open(f"{repo}/ports/weft/vcpkg.json"))
text = open(f"{repo}/version.h").read()
version = ".".join(re.search(rf"^#define WEFT_VERSION_{p} (\d+)$", text, re.M).group(1)
                   for p in ("MAJOR", "MINOR", "PATCH"))
assert port["name"] == "weft", port["name"]
assert port.get("version") == version, f"vcpkg.json version {port.get('version')} != version.h {version}"
assert port.get("license") == "Apache-2.0", f"vcpkg.json license {port.get('license')} != Apache-2.0 (LICENSE)"
print(f"[consumer] vcpkg: vcpkg.json: weft {version}, features {sorted(port['features'])}")
EOF_PY
      for features in "io-uring" "boost-context;task-tracking" "io-uring;tls"; do
        rm -rf "${build}/vcpkg" && mkdir -p "${build}/vcpkg"
        cmake -DPORT_DIR="${repo}/ports/weft" -DOUT="${build}/vcpkg" -DFEATURES="${features}" \
          -P "${repo}/test/consumer/vcpkg_portfile_check.cmake" >"${build}/vcpkg.log" 2>&1 ||
          { cat "${build}/vcpkg.log"; exit 1; }
        grep -E 'vcpkg_cmake_configure|portfile.cmake: ok' "${build}/vcpkg.log"
      done
      ;;
    conan)
      if ! find_conan; then
        log "conan: SKIPPED: no Conan 2 on the PATH and it could not be installed from PyPI"
        continue
      fi
      log "conan: $("${conan}" --version) (${conan})"
      # Conan's cache and settings stay in the build tree; a copy of the checkout keeps
      # test_package/'s build folder out of it.
      export CONAN_HOME="${build}/conan-home"
      "${conan}" profile detect --force >"${build}/conan.log" 2>&1 ||
        { cat "${build}/conan.log"; exit 1; }
      source_copy "${build}/conan-src"
      # No package from an earlier run: build this checkout's.
      "${conan}" remove 'weft/*' --confirm >>"${build}/conan.log" 2>&1 ||
        { cat "${build}/conan.log"; exit 1; }
      conan_jobs=()
      [[ -n "${CMAKE_BUILD_PARALLEL_LEVEL:-}" ]] &&
        conan_jobs=(-c "tools.build:jobs=${CMAKE_BUILD_PARALLEL_LEVEL}")
      (cd "${build}/conan-src" &&
        "${conan}" create . -s compiler.cppstd=20 -s build_type=Release --build=missing \
          --no-remote "${conan_jobs[@]}") >>"${build}/conan.log" 2>&1 ||
        { tail -n 60 "${build}/conan.log"; exit 1; }
      grep -q '^consumer: ok' "${build}/conan.log" || { log "conan: test_package did not run"; exit 1; }
      grep '^consumer: ok' "${build}/conan.log" | tail -n 1
      # The option tls: openssl/[>=3 <4] from the stand-in (Conan Center is not reachable
      # offline), then weft with weft::tls, and test_package's tls_main.cc.
      if [[ -f /usr/include/openssl/opensslv.h ]]; then
        (cd "${repo}/test/consumer/conan_system_openssl" &&
          "${conan}" create . --no-remote) >"${build}/conan-tls.log" 2>&1 ||
          { tail -n 30 "${build}/conan-tls.log"; exit 1; }
        (cd "${build}/conan-src" &&
          "${conan}" create . -o 'weft/*:tls=True' -s compiler.cppstd=20 -s build_type=Release \
            --build=missing --no-remote "${conan_jobs[@]}") >>"${build}/conan-tls.log" 2>&1 ||
          { tail -n 60 "${build}/conan-tls.log"; exit 1; }
        grep -q '^tls consumer: ok' "${build}/conan-tls.log" ||
          { log "conan: test_package did not run tls_main.cc with tls=True"; exit 1; }
        log "conan: -o weft/*:tls=True: $(grep '^tls consumer: ok' "${build}/conan-tls.log" | tail -n 1)"
      else
        log "conan: -o weft/*:tls=True not checked: no OpenSSL 3 headers (Debian libssl-dev)"
      fi
      unset CONAN_HOME
      ;;
    *)
      log "unknown mode ${mode}"
      exit 2
      ;;
  esac
  log "${mode}: ok ($((SECONDS - mode_start))s)"
done
