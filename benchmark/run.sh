#!/usr/bin/env bash
# Installs what is missing, builds weft's benchmarks Release with g++ and with clang++-16,
# runs every one, and writes docs/performance.md.
#
#   benchmark/run.sh
#
# Steps (build trees under build/, raw results in build/bench-results/):
#   1. apt-get install whichever needed package is missing (sudo only when not root)
#   2. CMake Release builds (-DWEFT_BUILD_TESTS=OFF -DWEFT_BUILD_BENCHMARKS=ON):
#        build/bench-gcc      g++, the project's Release flags
#        build/bench-clang    clang++-16, the project's Release flags
#        build/bench-gcc-alt  g++ with the other of -O2/-O3, coro/lazy_benchmark only: the
#                             -O2 vs -O3 comparison the Release flags are chosen from
#   3. every benchmark/*/*_benchmark binary: repetitions randomly interleaved
#      (--benchmark_enable_random_interleaving), medians; the two g++ builds of
#      lazy_benchmark run in alternating rounds so that both see the same machine
#   4. every benchmark/*/*_memory program (as root, vm.max_map_count is raised to 262144
#      first, so that 100,000 guarded fiber stacks fit)
#   4b. every Go comparison program benchmark/go/<name>/ (`go run`, offline, GOMAXPROCS set
#      by the program), when `go` is installed, in three rounds spread over step 3 (before,
#      between and after the C++ builds' runs): JSON in go.go_<name>.r<k>.json
#   4c. paired rounds (when `go` is installed): each Go comparison that has a target, its
#      C++ benchmarks and its Go program run right after each other, 5 times (the fiber
#      echo ring 3 times): JSON in paired/ (report.py judges those targets on the median
#      of the per-round ratios)
#   5. callgrind instruction counts per iteration of the Lazy benchmarks and their
#      baselines (repeatable where timings on a shared machine are not); skipped
#      without valgrind
#   6. docs/performance.md (benchmark/support/report.py)
#   6b. benchmark/timeout/run.sh: what withTimeout costs beside tokio and Go, in the
#      build/bench-gcc tree -> the section "withTimeout cost" of docs/performance.md
#      (about 1.5 minutes; a side whose toolchain, cargo or go, is missing is skipped)
#   7. benchmark/io/run.sh: weft's servers against real peers -> docs/io-benchmarks.md
#      (about 35 minutes more; see that script for its own settings)
#   7b. benchmark/tls/run.sh: weft's TLS servers against nginx, Go, tokio (rustls and
#      OpenSSL) and Asio -> docs/tls-benchmarks.md, linked from docs/performance.md's "TLS"
#      section (about 40 minutes more; see that script for its own settings)
#
# Environment:
#   WEFT_NO_INSTALL=1          install nothing
#   WEFT_BENCH_REPETITIONS=n   repetitions of each benchmark (default 15)
#   WEFT_BENCH_MIN_TIME=s      --benchmark_min_time of each repetition (default 0.1)
#   WEFT_BENCH_FILTER=regex    --benchmark_filter (default: all)
#   WEFT_BENCH_SKIP_ALT=1      no -O2/-O3 comparison
#   WEFT_BENCH_SKIP_CALLGRIND=1  no instruction counts
#   WEFT_BENCH_SKIP_PAIRED=1   no paired rounds (step 4c)
#   WEFT_BENCH_SKIP_TIMEOUT=1  no withTimeout comparison (step 6b)
#   WEFT_BENCH_SKIP_IO=1       no I/O benchmarks (step 7)
#   WEFT_BENCH_SKIP_TLS=1      no TLS benchmarks (step 7b)
#   JOBS=n                     build parallelism
# About 12 minutes on 2 cores, half of it compiling the 1000-deep template chains. Run it
# on an idle machine: the report records the load average at the start.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"

CXX_GCC="${WEFT_GXX:-g++}"
CXX_CLANG="${WEFT_CLANGXX:-clang++-16}"
repetitions="${WEFT_BENCH_REPETITIONS:-15}"
min_time="${WEFT_BENCH_MIN_TIME:-0.1}"
filter="${WEFT_BENCH_FILTER:-}"
rounds=3  # alternating rounds of the -O2/-O3 comparison
results="${repo}/build/bench-results"
jobs=()
[[ -n "${JOBS:-}" ]] && jobs=(--parallel "${JOBS}")

banner() { printf '\n==== %s ====\n' "$*"; }

# --- 1. packages ----------------------------------------------------------------------
packages=(build-essential cmake ninja-build python3 libbenchmark-dev libgtest-dev liburing-dev
          libgmock-dev libboost-context-dev clang-16 valgrind)
install_missing() {
  if [[ "${WEFT_NO_INSTALL:-0}" == 1 ]]; then
    echo "WEFT_NO_INSTALL=1: not installing anything"
    return 0
  fi
  if ! command -v dpkg-query >/dev/null; then
    echo "not a Debian/Ubuntu system: install ${packages[*]} yourself" >&2
    return 0
  fi
  local missing=() p
  for p in "${packages[@]}"; do
    # A python3 that is not Debian's (pyenv, a venv) will do.
    [[ "${p}" == python3 ]] && command -v python3 >/dev/null && continue
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

# --- 2. builds ------------------------------------------------------------------------
# configure <dir> <c++ compiler> [extra cmake args...]
configure() {
  local dir="$1" cxx="$2"
  shift 2
  # -Werror off: a newer compiler's new warning must not stop a measurement (CI builds
  # with -Werror). Tests and examples are not needed here.
  cmake -S "${repo}" -B "${dir}" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="${cxx}" \
    -DWEFT_BUILD_TESTS=OFF -DWEFT_BUILD_BENCHMARKS=ON -DWEFT_BUILD_EXAMPLES=OFF \
    -DWEFT_WERROR=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "$@"
}
cache_value() {  # cache_value <build dir> <variable>
  sed -n "s/^$2:[A-Z]*=//p" "$1/CMakeCache.txt" | head -n 1
}

# --- 3. runs --------------------------------------------------------------------------
# run_benchmark <binary> <label> <repetitions> <round>: JSON with every repetition in
# ${results}/<label>.<module>_<unit>.r<round>.json (report.py takes the medians).
run_benchmark() {
  local bin="$1" label="$2" reps="$3" round="$4" unit
  unit="$(basename "$(dirname "${bin}")")_$(basename "${bin}")"
  local args=(--benchmark_repetitions="${reps}" --benchmark_enable_random_interleaving=true
              --benchmark_min_time="${min_time}" --benchmark_display_aggregates_only=true
              --benchmark_out_format=json --benchmark_out="${results}/${label}.${unit}.r${round}.json")
  [[ -n "${filter}" ]] && args+=(--benchmark_filter="${filter}")
  banner "${label}: ${unit} (round ${round})"
  "${bin}" "${args[@]}"
}
benchmarks_in() {  # benchmarks_in <build dir>: the benchmark binaries, sorted
  find "$1/benchmark" -type f -perm -u+x -name '*_benchmark' | sort
}
memory_programs_in() {
  find "$1/benchmark" -type f -perm -u+x -name '*_memory' | sort
}

# --- 5. instruction counts ------------------------------------------------------------
# count_instructions <lazy_benchmark binary> <label>: for each Lazy benchmark and its
# baseline, callgrind's instruction total with n and with 2n iterations; the difference
# over n is the cost of one iteration. Lines "<benchmark> <instructions>" in
# ${results}/<label>.instructions.txt.
count_instructions() {
  local bin="$1" label="$2" name n a b
  local out="${results}/${label}.instructions.txt"
  : >"${out}"
  total_ir() {  # total_ir <iterations> <benchmark>
    WEFT_BENCH_ITERATIONS="$1" valgrind --tool=callgrind --callgrind-out-file=/dev/null \
      "${bin}" --benchmark_filter="^$2(/|\$)" --benchmark_repetitions=1 2>&1 >/dev/null |
      sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
  }
  for name in BM_Lazy_Chain1000 BM_Baseline_BareTask_Chain1000 \
              BM_Lazy_RecursiveChain1000 BM_Baseline_BareTask_RecursiveChain1000 \
              BM_Lazy_CollectAll5000x50 BM_Baseline_BareTask_CollectAll5000x50; do
    case "${name}" in *CollectAll*) n=2 ;; *) n=20 ;; esac
    a="$(total_ir "${n}" "${name}")"
    b="$(total_ir $((2 * n)) "${name}")"
    if [[ -n "${a}" && -n "${b}" ]]; then
      echo "${name} $(((b - a) / n))" | tee -a "${out}"
    fi
  done
}

# Go comparison programs (benchmark/go/<name>/main.go, one `package main` each, printing
# Google Benchmark-style JSON through benchmark/go/internal/gbench; see benchmark/go/go.mod).
# Every directory with a main.go is run, so a new comparison needs no edit here. Offline:
# no module downloads, no toolchain switch. The machine's speed drifts over the minutes a
# run takes (a Go program once measured 1.8 x slower after the C++ benchmarks than in the
# run before), so the Go side is spread over the same window as the C++ side: each
# program that takes -repetitions runs in `go_rounds` rounds (before, between and after
# the C++ benchmarks), each round a share of its repetitions, pooled by report.py like
# any other rounds (go.go_<name>.r<k>.json). A program without -repetitions (the memory
# program) runs once, in the last round.
go_rounds=3  # the run_go_round calls in step 3: before, between and after the C++ runs
go_programs() {
  find benchmark/go -mindepth 1 -maxdepth 1 -type d -exec test -f '{}/main.go' ';' -print | sort
}
# The default of a program's -repetitions flag, or nothing if it has none.
go_default_repetitions() {
  sed -n 's/.*flag\.Int("repetitions", \([0-9][0-9]*\),.*/\1/p' "$1/main.go" | head -n 1
}
run_go_round() {
  local round="$1"
  command -v go >/dev/null || return 0
  local dir name reps args
  while IFS= read -r dir; do
    name="$(basename "${dir}")"
    reps="$(go_default_repetitions "${dir}")"
    if [[ -n "${reps}" ]]; then
      args=(-repetitions "$(((reps + go_rounds - 1) / go_rounds))")
    elif ((round == go_rounds)); then
      args=()
    else
      continue
    fi
    banner "go: ${name} (round ${round} of ${go_rounds})"
    local out="${results}/go.go_${name}.r${round}.json"
    if (cd benchmark/go && GOTOOLCHAIN=local GOFLAGS= GOPROXY=off go run "./${name}" "${args[@]}") \
      >"${out}.part"; then
      mv "${out}.part" "${out}"
      echo "wrote ${out}"
    else
      rm -f "${out}.part"
      echo "benchmark/go/${name} failed in round ${round}: no Go figures from it" >&2
    fi
  done < <(go_programs)
}

# Paired rounds: the Go comparisons that have a target, measured a second way. Even
# spread over the run, a Go program and the C++ benchmark it is compared with may run
# minutes apart, on a machine whose speed drifts by 2 x over minutes. Here each round runs
# the C++ benchmarks of one pair (g++ and clang++ builds) and its Go program, right after
# each other, and report.py takes the ratio within each round: the median over the
# rounds is what the targets are judged on. Files in ${results}/paired/:
# <label>.<module>_<unit>.r<k>.json and go.go_<name>.r<k>.json.
paired_rounds=5
# "<benchmark binary under benchmark/> <--benchmark_filter> <benchmark/go program>
#  <rounds> <repetitions>" (space-separated: the filters contain `|`). The fiber echo
# ring is memory-bound, and the machine's memory speed drifts the most (one binary
# measured 58 and 83 ns per message half an hour apart): it is paired too, in fewer
# rounds, since one repetition takes half a minute (its C++ side keeps the repetitions
# its benchmark fixes).
paired_comparisons=(
  "stackful/fiber_benchmark ^BM_Fiber_YieldViaExecutor(/|\$) gosched_pingpong 5 3"
  "coro/channel_benchmark ^BM_(Fiber)?Channel_PingPong(/|\$) channel_pingpong 5 3"
  "coro/channel_benchmark ^BM_FiberChannel_EchoRing30000(/|\$) channel_echo_ring 3 1"
)
run_paired_rounds() {
  command -v go >/dev/null || return 0
  local dir="${results}/paired" round comparison bin regex program rounds reps label unit
  local out order
  mkdir -p "${dir}"
  for round in $(seq 1 "${paired_rounds}"); do
    for comparison in "${paired_comparisons[@]}"; do
      read -r bin regex program rounds reps <<<"${comparison}"
      ((round > rounds)) && continue
      unit="$(dirname "${bin}")_$(basename "${bin}")_${program}"  # one file per comparison
      banner "paired round ${round} of ${paired_rounds}: ${bin} ${regex} / go ${program}"
      # Odd rounds run g++, clang++, Go; even rounds the reverse: no side always goes first.
      order=(gcc clang go)
      ((round % 2 == 0)) && order=(go clang gcc)
      for label in "${order[@]}"; do
        if [[ "${label}" != go ]]; then
          "build/bench-${label}/benchmark/${bin}" --benchmark_filter="${regex}" \
            --benchmark_repetitions="${reps}" --benchmark_min_time="${min_time}" \
            --benchmark_display_aggregates_only=true --benchmark_out_format=json \
            --benchmark_out="${dir}/${label}.${unit}.r${round}.json"
          continue
        fi
        out="${dir}/go.go_${program}.r${round}.json"
        if (cd benchmark/go && GOTOOLCHAIN=local GOFLAGS= GOPROXY=off \
              go run "./${program}" -repetitions "${reps}") >"${out}.part"; then
          mv "${out}.part" "${out}"
        else
          rm -f "${out}.part"
          echo "benchmark/go/${program} failed in paired round ${round}" >&2
        fi
      done
    done
  done
}

start_seconds=${SECONDS}
banner "packages"
install_missing
command -v "${CXX_CLANG}" >/dev/null || { echo "${CXX_CLANG} not found" >&2; exit 1; }

# The load average before anything runs: the report says whether the machine was idle.
load_at_start="$(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf "${results}"
mkdir -p "${results}"

banner "build: g++ Release"
configure build/bench-gcc "${CXX_GCC}"
cmake --build build/bench-gcc "${jobs[@]}"
banner "build: clang++ Release"
configure build/bench-clang "${CXX_CLANG}"
cmake --build build/bench-clang "${jobs[@]}"

gcc_flags="$(cache_value build/bench-gcc CMAKE_CXX_FLAGS_RELEASE)"
alt_flags=""
lazy_gcc="build/bench-gcc/benchmark/coro/lazy_benchmark"
lazy_alt="build/bench-gcc-alt/benchmark/coro/lazy_benchmark"
if [[ "${WEFT_BENCH_SKIP_ALT:-0}" != 1 ]]; then
  # The other optimisation level than Release's; everything else the same.
  if [[ " ${gcc_flags} " == *" -O3 "* ]]; then alt_flags="-O2 -DNDEBUG"; else alt_flags="-O3 -DNDEBUG"; fi
  banner "build: g++ ${alt_flags} (coro/lazy_benchmark only)"
  configure build/bench-gcc-alt "${CXX_GCC}" \
    -DCMAKE_CXX_FLAGS_RELEASE="${alt_flags}"
  cmake --build build/bench-gcc-alt "${jobs[@]}" --target weft_coro_lazy_benchmark
fi

# CPU time the hypervisor gave to others while we measured (the "steal" column of
# /proc/stat, in clock ticks): on a virtual machine, the best explanation of noisy numbers.
steal_ticks() { awk '/^cpu /{print $9}' /proc/stat; }
steal_before="$(steal_ticks)"
measure_start=${SECONDS}
command -v go >/dev/null || banner "go: not installed, no Go comparison"
run_go_round 1
for label in gcc clang; do
  [[ "${label}" == clang ]] && run_go_round 2
  while IFS= read -r bin; do
    if [[ "${label}" == gcc && -n "${alt_flags}" && "${bin}" == "build/bench-gcc/benchmark/coro/lazy_benchmark" ]]; then
      continue  # run below, alternating with the -O2/-O3 build
    fi
    run_benchmark "${bin}" "${label}" "${repetitions}" 1
  done < <(benchmarks_in "build/bench-${label}")
done
run_go_round 3
[[ "${WEFT_BENCH_SKIP_PAIRED:-0}" == 1 ]] || run_paired_rounds
if [[ -n "${alt_flags}" ]]; then
  per_round=$(((repetitions + rounds - 1) / rounds))
  for round in $(seq 1 "${rounds}"); do
    run_benchmark "${lazy_gcc}" gcc "${per_round}" "${round}"
    run_benchmark "${lazy_alt}" gcc-alt "${per_round}" "${round}"
  done
fi

# 100,000 fibers on guarded stacks (stackful/fiber_memory) need two memory mappings each;
# the kernel's default vm.max_map_count (65530) caps them near 32,000. Raise it when we
# may (root); otherwise the program reports the cap.
map_count="$(cat /proc/sys/vm/max_map_count 2>/dev/null || echo 0)"
if ((map_count < 262144)); then
  if [[ -w /proc/sys/vm/max_map_count ]]; then
    echo 262144 >/proc/sys/vm/max_map_count
    echo "raised vm.max_map_count from ${map_count} to 262144 (pooled-stack fiber memory)"
  else
    echo "vm.max_map_count is ${map_count}: the pooled-stack fiber memory program will be" \
      "capped (as root: sysctl vm.max_map_count=262144)"
  fi
fi
for label in gcc clang; do
  while IFS= read -r bin; do
    unit="$(basename "$(dirname "${bin}")")_$(basename "${bin}")"
    banner "${label}: ${unit}"
    "${bin}" | tee "${results}/${label}.${unit}.txt"
  done < <(memory_programs_in "build/bench-${label}")
done

steal_seconds="$(awk -v a="${steal_before}" -v b="$(steal_ticks)" -v hz="$(getconf CLK_TCK)" \
  'BEGIN { printf "%.1f", (b - a) / hz }')"
measure_seconds=$((SECONDS - measure_start))

if [[ "${WEFT_BENCH_SKIP_CALLGRIND:-0}" != 1 ]] && command -v valgrind >/dev/null; then
  for label in gcc clang; do
    banner "${label}: instructions per iteration (callgrind)"
    count_instructions "build/bench-${label}/benchmark/coro/lazy_benchmark" "${label}"
  done
  if [[ -n "${alt_flags}" ]]; then
    banner "gcc-alt: instructions per iteration (callgrind)"
    count_instructions "${lazy_alt}" gcc-alt
  fi
fi

# --- 6. the report --------------------------------------------------------------------
banner "docs/performance.md"
python3 benchmark/support/report.py \
  --results "${results}" --out docs/performance.md \
  --gcc "$(cache_value build/bench-gcc CMAKE_CXX_COMPILER)" --gcc-flags "${gcc_flags}" \
  --clang "$(cache_value build/bench-clang CMAKE_CXX_COMPILER)" \
  --clang-flags "$(cache_value build/bench-clang CMAKE_CXX_FLAGS_RELEASE)" \
  --alt-flags "${alt_flags}" \
  --min-time "${min_time}" --repetitions "${repetitions}" --load "${load_at_start}" \
  --steal "${steal_seconds}" --measure-seconds "${measure_seconds}"

# --- 6b. withTimeout beside tokio and Go ---------------------------------------------
if [[ "${WEFT_BENCH_SKIP_TIMEOUT:-0}" != 1 ]]; then
  banner "benchmark/timeout/run.sh"
  WEFT_TIMEOUT_BENCH_WEFT_BUILD=build/bench-gcc WEFT_TIMEOUT_BENCH_DOC=1 benchmark/timeout/run.sh ||
    echo "benchmark/timeout/run.sh failed: the withTimeout section of docs/performance.md is unchanged" >&2
fi

# --- 7. I/O benchmarks ----------------------------------------------------------------
if [[ "${WEFT_BENCH_SKIP_IO:-0}" != 1 ]]; then
  banner "benchmark/io/run.sh"
  benchmark/io/run.sh
fi

# --- 7b. TLS benchmarks ---------------------------------------------------------------
if [[ "${WEFT_BENCH_SKIP_TLS:-0}" != 1 ]]; then
  banner "benchmark/tls/run.sh"
  benchmark/tls/run.sh
fi
echo "benchmark/run.sh: done in $(((SECONDS - start_seconds) / 60)) min $(((SECONDS - start_seconds) % 60)) s"
