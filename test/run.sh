#!/usr/bin/env bash
# Installs what is missing, builds weft every way CI does and runs every test.
#
#   test/run.sh                 everything (what .ci/run does)
#   test/run.sh gcc asan        only some steps: deps gcc busy clang asan consumer docs
#                               bazel boost aarch64 tsan valgrind
#
# Steps (build trees under build/):
#   deps      apt-get install what is missing (sudo only when not root)
#   gcc       g++ Release (-O2), default options (task tracking on): header check, library,
#             tests, examples, benchmarks; ctest; each benchmark once, briefly (a crash
#             check, not a measurement)
#   busy      the gcc tree's ctest again, two tests at a time, while two other CPU-bound
#             processes keep both cores busy: no test may depend on how fast or idle the
#             machine is. With the clang step requested too, they are that step's compilers
#             (its build runs here, two jobs), else (and once that build is done) two burners
#   clang     clang++-16 Release with -DWEFT_TASK_TRACKING=OFF: the same without the
#             benchmarks (the gcc step builds them) and the header check (the gcc step's;
#             it checks includes, not the compiler)
#   asan      clang++-16 -O1 with ASan + UBSan (halt on the first error), line tables only:
#             tests (the header check is the gcc step's work)
#   consumer  test/consumer built against weft every way a user gets it, with strict
#             warnings: the installed CMake package, add_subdirectory, FetchContent,
#             pkg-config, a Bazel workspace of its own, conan create (Conan 2 from PyPI
#             into a venv; skipped when PyPI is unreachable), and the vcpkg port's checks
#             (test/consumer/run.sh)
#   docs      the shell blocks of README.md and docs/*.md marked <!-- ci: run -->, run as
#             written in a fresh copy of the checkout per document (test/docs/run.py, which
#             says what it stands in for: installs into a DESTDIR, apt-get lines checked
#             against the package list below, a developer tree's full build and ctest cut
#             to coro/lazy_test); unmarked shell blocks fail. About 2 CPU-minutes (3 minutes
#             on a busy 2-core machine); needs no other step's tree
#   bazel     bazel test of every library and example and a few tests per layer (offline,
#             Debian's bazel-bootstrap)
#   boost     g++ Release with -DWEFT_FIBER_BACKEND=boost (Boost.Context switch core):
#             the stackful tests
#   aarch64   cross build with aarch64-linux-gnu-g++ (cmake/toolchains/): the stackful
#             and io tests and those of coro's core types, run by ctest under qemu-aarch64
#             (no liburing for the target: the epoll loop, and io_uring tests skip)
#   tsan      clang++-16 -O1 with ThreadSanitizer (halt on the first report), line tables
#             only: tests
#   valgrind  the stackful tests of build/gcc-release under valgrind memcheck (any error
#             fails)
# Ends with a table of the steps and their times, and "summary: N passed, N failed".
# Environment: WEFT_NO_INSTALL=1 skips deps; JOBS=n limits build parallelism.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"

all_steps=(deps gcc busy clang asan consumer docs bazel boost aarch64 tsan valgrind)
steps=("$@")
[[ ${#steps[@]} -gt 0 ]] || steps=("${all_steps[@]}")
for s in "${steps[@]}"; do
  [[ " ${all_steps[*]} " == *" ${s} "* ]] || { echo "test/run.sh: unknown step '${s}' (steps: ${all_steps[*]})" >&2; exit 2; }
done

packages=(build-essential cmake ninja-build libgtest-dev libgmock-dev libbenchmark-dev
          libboost-context-dev clang-16 libclang-rt-16-dev libc++-16-dev libc++abi-16-dev
          bazel-bootstrap valgrind g++-aarch64-linux-gnu qemu-user liburing-dev libssl-dev openssl
          curl gdb binutils pkgconf python3-venv)
CLANGXX=clang++-16
jobs=()
[[ -n "${JOBS:-}" ]] && jobs=(--parallel "${JOBS}")
# Tests run as many at a time as there are cores (or JOBS): none depends on having the
# machine to itself (the busy step checks that on an oversubscribed machine).
ctest_jobs=(-j "${JOBS:-$(nproc)}")

banner() { printf '\n==== %s ====\n' "$*"; }

step_deps() {
  if [[ "${WEFT_NO_INSTALL:-0}" == 1 ]]; then
    echo "WEFT_NO_INSTALL=1: not installing anything"
    return 0
  fi
  local missing=() p
  for p in "${packages[@]}"; do
    [[ "$(dpkg-query -W -f='${db:Status-Status}' "${p}" 2>/dev/null || true)" == installed ]] ||
      missing+=("${p}")
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    echo "all packages installed: ${packages[*]}"
    return 0
  fi
  echo "installing: ${missing[*]}"
  local sudo=()
  [[ "$(id -u)" == 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
}

# cmake_build DIR CMAKE_ARGS...: configure, build the header check (fast, clear failures
# first), then everything (ninja -k 0: every error, not just the first), then run ctest
# (failing when it finds no test) -- also after a failed build, so that one broken file
# does not hide the results of the other tests.
cmake_build() {
  local dir="$1" rc=0
  shift
  cmake -S . -B "${dir}" -G Ninja -DWEFT_DEVELOPER=ON "$@" || return 1
  if [[ " $* " != *" -DWEFT_HEADER_CHECK=OFF "* ]]; then
    cmake --build "${dir}" --target weft_header_check "${jobs[@]}" -- -k 0 || rc=1
  fi
  cmake --build "${dir}" "${jobs[@]}" -- -k 0 || rc=1
  ctest --test-dir "${dir}" --output-on-failure --no-tests=error "${ctest_jobs[@]}" || rc=1
  [[ ${rc} -eq 0 ]] || echo "test/run.sh: ${dir}: build or tests FAILED (see above)" >&2
  return ${rc}
}

# cmake_tests DIR REGEX CMAKE_ARGS...: configure, build only the test programs whose ctest
# names match REGEX (ctest name coro/lazy_test <-> target weft_coro_lazy_test), run them.
cmake_tests() {
  local dir="$1" regex="$2" rc=0 targets=()
  shift 2
  cmake -S . -B "${dir}" -G Ninja -DWEFT_DEVELOPER=ON "$@" || return 1
  # The cmake/ tests are scripts (cmake -P): nothing to build for them.
  mapfile -t targets < <(ctest --test-dir "${dir}" -N -R "${regex}" |
    sed -n 's|^ *Test *#[0-9]*: *\([^ ]*\)$|weft_\1|p' | grep -v '^weft_cmake/' | tr / _)
  [[ ${#targets[@]} -gt 0 ]] || { echo "test/run.sh: no test matches '${regex}' in ${dir}" >&2; return 1; }
  cmake --build "${dir}" --target "${targets[@]}" "${jobs[@]}" -- -k 0 || rc=1
  ctest --test-dir "${dir}" --output-on-failure --no-tests=error -R "${regex}" "${ctest_jobs[@]}" || rc=1
  [[ ${rc} -eq 0 ]] || echo "test/run.sh: ${dir}: build or tests FAILED (see above)" >&2
  return ${rc}
}

# Release with the default options, as a service is shipped: task tracking on (its default
# in every build type), so the gdb extension test and the task dumps run optimized and
# check that such a build lists root tasks (test/CMakeLists.txt: WEFT_TEST_EXPECT_TRACKING).
gcc_release_args=(-DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=Release)

step_gcc() {
  cmake_build build/gcc-release "${gcc_release_args[@]}"
  # Each benchmark once, briefly: catches crashes in benchmark code. No timing is judged.
  local b args
  for b in $(find build/gcc-release/benchmark -type f -perm -u+x \( -name '*_benchmark' -o -name '*_memory' \) 2>/dev/null | sort); do
    args=()
    [[ "${b}" == *_benchmark ]] && args=(--benchmark_min_time=0.01)
    echo "-- smoke run: ${b} ${args[*]}"
    WEFT_BENCH_SMOKE=1 timeout 300 "${b}" "${args[@]}" >"${b}.smoke.log" 2>&1 ||
      { cat "${b}.smoke.log"; return 1; }
  done
}

# The machine oversubscribed: ctest -j2 beside two other CPU-bound processes on 2 cores, so
# every test runs with a quarter to a half of a core and is preempted at any instruction.
# Reuses the gcc step's tree (building only what is missing). When the clang step is
# requested too, the load is that step's build (ninja -j2: two compilers instead of two
# spinning loops; the clang step then only finds its tree built and runs its tests), and two
# spinning processes take over whenever the build is not running (before it starts work,
# after it ends). Otherwise the load is the two spinning processes throughout.
step_busy() {
  local dir=build/gcc-release rc=0 load="" keeper=""
  cmake -S . -B "${dir}" -G Ninja -DWEFT_DEVELOPER=ON "${gcc_release_args[@]}" || return 1
  cmake --build "${dir}" "${jobs[@]}" -- -k 0 || return 1
  if [[ " ${steps[*]} " == *" clang "* ]]; then
    echo "load: the clang step's build of build/clang-release (log: build/clang-release.busy.log)"
    # Its errors are the clang step's to report: it builds again what failed here.
    ( cmake -S . -B build/clang-release -G Ninja -DWEFT_DEVELOPER=ON "${clang_release_args[@]}"
      cmake --build build/clang-release --parallel 2 -- -k 0 ) >build/clang-release.busy.log 2>&1 &
    load=$!
  fi
  # Two CPU burners whenever the load build is not running.
  ( trap 'kill $(jobs -p) 2>/dev/null; exit 0' TERM
    if [[ -n "${load}" ]]; then
      while kill -0 "${load}" 2>/dev/null; do sleep 1; done
    fi
    for i in 1 2; do (trap 'exit 0' TERM; while :; do :; done) & done
    echo "CPU burners: $(jobs -p | tr '\n' ' ')"
    wait ) &
  keeper=$!
  trap 'kill "${keeper}" 2>/dev/null || true; wait "${keeper}" 2>/dev/null || true
        [[ -z "${load}" ]] || wait "${load}" 2>/dev/null || true' RETURN
  ctest --test-dir "${dir}" --output-on-failure --no-tests=error -j2 || rc=1
  [[ ${rc} -eq 0 ]] || echo "test/run.sh: ${dir}: tests FAILED on a busy machine (see above)" >&2
  [[ -z "${load}" ]] || echo "waiting for the clang step's build (build/clang-release.busy.log)"
  return ${rc}
}

# No header check: whether a header compiles alone and within its layers depends on its
# includes, not on the compiler (the gcc step checks it), and clang compiles every header's
# code anyway, in this tree and the sanitizer trees, through the files that include it.
# Task tracking off: the one tree whose tests check the untracked build (dumps that list
# fibers only, the gdb extension saying so, the task dump linked by its start-up hook
# alone); every other tree has it on.
clang_release_args=(-DCMAKE_CXX_COMPILER="${CLANGXX}" -DCMAKE_BUILD_TYPE=Release
                    -DWEFT_TASK_TRACKING=OFF -DWEFT_BUILD_BENCHMARKS=OFF -DWEFT_HEADER_CHECK=OFF)

step_clang() {
  cmake_build build/clang-release "${clang_release_args[@]}"
}

# The sanitizer builds are Debug (task tracking on) with line tables only: reports name
# functions, files and lines, and compiling costs less than with full -g. Their header
# check is left to the gcc step (the same headers, compiled alone).
sanitizer_debug_flags=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only)

# symbolizer_option: ":external_symbolizer_path=<llvm-symbolizer>" for a sanitizer's
# options, so that reports name functions, files and lines (clang-16 alone has no
# llvm-symbolizer here, and ASan does not find another version's by itself); empty when
# there is none.
symbolizer_option() {
  local symbolizer
  symbolizer="$(command -v llvm-symbolizer-16 llvm-symbolizer llvm-symbolizer-14 2>/dev/null | head -n 1 || true)"
  [[ -z "${symbolizer}" ]] || printf ':external_symbolizer_path=%s' "${symbolizer}"
}

step_asan() {
  local san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
  local symbolizer
  symbolizer="$(symbolizer_option)"
  ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:strict_init_order=1${symbolizer}" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${symbolizer}" \
    cmake_build build/clang-asan -DCMAKE_CXX_COMPILER="${CLANGXX}" "${sanitizer_debug_flags[@]}" \
      -DCMAKE_CXX_FLAGS="-O1 ${san} -D_GLIBCXX_ASSERTIONS" \
      -DCMAKE_EXE_LINKER_FLAGS="${san}" \
      -DWEFT_BUILD_BENCHMARKS=OFF -DWEFT_HEADER_CHECK=OFF
}

# The fiber tests on the other switch core. The coro/executors tests do not depend on it.
step_boost() {
  cmake_tests build/gcc-boost '^stackful/' "${gcc_release_args[@]}" \
    -DWEFT_FIBER_BACKEND=boost -DWEFT_BUILD_BENCHMARKS=OFF -DWEFT_BUILD_EXAMPLES=OFF
}

# aarch64 for real: the asm switch core, the I/O fallback and the coroutine machinery under
# qemu-user. Of coro/, the tests of the core types and the lock-free parts: qemu runs the
# target's atomics on the host's memory model, so the rest would add compile time only.
step_aarch64() {
  cmake_tests build/aarch64 \
    '^(coro/(lazy|task|sync_await|collect|channel|mutex|detail/.*)_test|stackful|io|executors/io_loop)' \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake \
    -DWEFT_BUILD_BENCHMARKS=OFF -DWEFT_BUILD_EXAMPLES=OFF
}

step_tsan() {
  local san="-fsanitize=thread -fno-omit-frame-pointer" options="halt_on_error=1:second_deadlock_stack=1"
  options+="$(symbolizer_option)"
  TSAN_OPTIONS="${options}" \
    cmake_tests build/clang-tsan '.' -DCMAKE_CXX_COMPILER="${CLANGXX}" \
      "${sanitizer_debug_flags[@]}" -DCMAKE_CXX_FLAGS="-O1 ${san}" \
      -DCMAKE_EXE_LINKER_FLAGS="${san}" -DWEFT_BUILD_BENCHMARKS=OFF -DWEFT_BUILD_EXAMPLES=OFF
}

# valgrind understands the fibers' stacks through VALGRIND_STACK_REGISTER. Reuses the gcc
# step's tree (building only what is missing).
step_valgrind() {
  local dir=build/gcc-release rc=0 names=() name
  cmake -S . -B "${dir}" -G Ninja -DWEFT_DEVELOPER=ON "${gcc_release_args[@]}" || return 1
  mapfile -t names < <(ctest --test-dir "${dir}" -N -R '^stackful/' |
    sed -n 's|^ *Test *#[0-9]*: *\([^ ]*\)$|\1|p')
  [[ ${#names[@]} -gt 0 ]] || { echo "test/run.sh: no stackful tests" >&2; return 1; }
  cmake --build "${dir}" --target $(printf 'weft_%s\n' "${names[@]}" | tr / _) "${jobs[@]}" -- -k 0 ||
    return 1
  for name in "${names[@]}"; do
    echo "-- valgrind: ${dir}/test/${name}"
    valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
      "${dir}/test/${name}" --gtest_brief=1 || { echo "test/run.sh: valgrind: ${name} FAILED" >&2; rc=1; }
  done
  return ${rc}
}

step_consumer() {
  # JOBS limits the builds of weft it makes (CMake, Bazel, Conan) too.
  if [[ -n "${JOBS:-}" ]]; then
    CMAKE_BUILD_PARALLEL_LEVEL="${JOBS}" test/consumer/run.sh build/consumer
  else
    test/consumer/run.sh build/consumer
  fi
}

# The commands the documentation shows, as a reader would type them (JOBS is honoured).
step_docs() {
  test/docs/run.py --build-dir build/docs
}

# Checks the Bazel build as a consumer sees it: every library and example target, a few
# tests per layer and the example servers' tests. The CMake steps run every test four
# ways already; all of them here would add ten minutes of compiling the same code with the
# same compiler (`bazel test //...` still runs them all).
step_bazel() {
  local config=() targets=(//:weft //:tls //:testing) f
  [[ -n "${CI:-}" ]] && config=(--config=ci)
  for f in examples/*.cc test/io/tcp_stream_test.cc test/io/io_backend_test.cc test/io/file_test.cc \
      test/io/tls_stream_test.cc \
      test/io/signal_test.cc test/coro/lazy_test.cc test/coro/sync_await_test.cc \
      test/coro/async_backtrace_test.cc test/coro/task_dump_test.cc \
      test/executors/thread_pool_test.cc test/executors/io_loop_test.cc \
      test/stackful/fiber_test.cc test/stackful/spawn_fiber_test.cc \
      test/testing/simulation_test.cc; do
    targets+=("//:${f%.cc}")
  done
  # The servers run and talked to by test/examples/*.sh (examples/*_test.cc, their tests in
  # virtual time, are in the loop above).
  targets+=(//:examples/echo_server_script_test //:examples/fiber_echo_server_script_test
            //:examples/http_hello_script_test //:examples/https_get_script_test
            //:examples/https_hello_script_test //:examples/kv_server_script_test
            //:examples/request_pipeline_script_test //:examples/tls_echo_server_script_test)
  # Stop the Bazel server afterwards: nothing of this run is left running.
  trap 'bazel shutdown >/dev/null 2>&1 || true' RETURN
  bazel test "${config[@]}" "${targets[@]}"
}

# Run every requested step (a failing step does not stop the others), then summarise.
names=()
results=()
times=()
failed=0
total_start=${SECONDS}
for s in "${steps[@]}"; do
  banner "${s}"
  start=${SECONDS}
  set +e
  (set -euo pipefail; "step_${s}")
  rc=$?
  set -e
  names+=("${s}")
  times+=($((SECONDS - start)))
  if [[ ${rc} -eq 0 ]]; then
    results+=(PASS)
  else
    results+=("FAIL(${rc})")
    failed=$((failed + 1))
    if [[ "${s}" == deps ]]; then
      echo "test/run.sh: installing dependencies failed; not running the other steps" >&2
      break
    fi
  fi
done

banner "summary"
for i in "${!names[@]}"; do
  printf '  %-9s %-8s %5ss\n' "${names[$i]}" "${results[$i]}" "${times[$i]}"
done
printf '  %-9s %-8s %5ss\n' total "" $((SECONDS - total_start))
echo "summary: $((${#names[@]} - failed)) passed, ${failed} failed"
[[ ${failed} -eq 0 ]]
