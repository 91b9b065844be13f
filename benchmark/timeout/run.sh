#!/usr/bin/env bash
# What weft::withTimeout costs, side by side with tokio::time::timeout and Go's
# context.WithTimeout doing the same work (issue #29, item 3): builds the three programs,
# runs them in interleaved rounds pinned to one CPU, prints medians, the cost of the
# timeout (with it minus without it) and the ratios weft/tokio and weft/Go.
#
#   benchmark/timeout/run.sh
#
# The programs (each states its cases; all single-threaded, the limit 10 s, never reached):
#   weft   benchmark/coro/with_timeout_benchmark.cc (ThreadPool(1)), run twice a round:
#          WEFT_IO_BACKEND=io_uring and =epoll
#   tokio  benchmark/timeout/tokio (current_thread runtime; cargo build --release --locked)
#   Go     benchmark/go/with_timeout (GOMAXPROCS(1); go build, offline)
# Cases: Ready (the work returns without suspending), Yield (it suspends once, so the
# timer is armed and disarmed), TcpPingPong (a 1-byte round trip over 127.0.0.1 with the
# read under the limit). Each round runs every side once, in an order that reverses from
# one round to the next (A B C D, D C B A, ...); in that run each side measures every
# case a few times (repetitions), with-timeout and baseline close together (weft: Google
# Benchmark's random interleaving; tokio and Go: side by side, in alternating order).
# Reported: the medians over every repetition of every round, the cost of the limit (the
# median with it minus the median without it) and the range of that cost over the rounds
# (each round's own medians): the noise of a shared machine.
#
# Environment:
#   WEFT_TIMEOUT_BENCH_ROUNDS=n     rounds (default 9)
#   WEFT_TIMEOUT_BENCH_REPETITIONS=n  repetitions of each case in each round (default 4)
#   WEFT_TIMEOUT_BENCH_MIN_TIME=s   seconds of each repetition (default 0.05)
#   WEFT_TIMEOUT_BENCH_CPU=n        the CPU every program is pinned to (taskset; default:
#                                   the last one); "none": not pinned
#   WEFT_TIMEOUT_BENCH_WEFT_BUILD=dir  a weft CMake build tree to build the benchmark in
#                                   (default build/timeout-bench/weft, configured Release
#                                   with g++ if missing)
#   WEFT_TIMEOUT_BENCH_DOC=1        also write the section "withTimeout cost" of
#                                   docs/performance.md (benchmark/timeout/report.py)
#   WEFT_BENCH_SMOKE=1              quick check that everything builds, runs and reports
#                                   every case: 1 round, 1 repetition of 0.01 s, no
#                                   document written, results in build/timeout-bench/smoke/
# A side whose toolchain is missing (cargo, go) is skipped with a note. Raw results: one
# directory per run, build/timeout-bench/runs/<UTC date and time>/<side>.r<k>.json (Google
# Benchmark-style JSON) and meta.json; the report shows the latest run in full and the
# ratios of the last 5 runs kept there (the spread from run to run). With the defaults,
# 75-85 s of measuring on a busy 2-CPU machine, plus the builds the first time (the weft
# library and the benchmark: under a minute on 2 idle cores; cargo fetches tokio and libc
# from crates.io when they are not cached), so under 3 minutes in all.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${repo}"

rounds="${WEFT_TIMEOUT_BENCH_ROUNDS:-9}"
repetitions="${WEFT_TIMEOUT_BENCH_REPETITIONS:-4}"
min_time="${WEFT_TIMEOUT_BENCH_MIN_TIME:-0.05}"
weft_build="${WEFT_TIMEOUT_BENCH_WEFT_BUILD:-build/timeout-bench/weft}"
write_doc="${WEFT_TIMEOUT_BENCH_DOC:-0}"
if [[ -n "${WEFT_BENCH_SMOKE:-}" ]]; then
  rounds=1
  repetitions=1
  min_time=0.01
  write_doc=0
fi
out="${repo}/build/timeout-bench"
if [[ -n "${WEFT_BENCH_SMOKE:-}" ]]; then
  results="${out}/smoke"
else
  results="${out}/runs/$(date -u +%Y%m%d-%H%M%S)"
fi
cpu="${WEFT_TIMEOUT_BENCH_CPU:-$(($(nproc) - 1))}"
pin=()
if [[ "${cpu}" != none ]] && command -v taskset >/dev/null; then
  pin=(taskset -c "${cpu}")
fi

banner() { printf '\n==== %s ====\n' "$*"; }

rm -rf "${results}"
mkdir -p "${results}"
# A run that stops early leaves no half-filled directory for later reports to read.
trap 'rm -rf "${results}"' EXIT

# --- builds ---------------------------------------------------------------------------
banner "build: weft (${weft_build})"
if [[ ! -f "${weft_build}/CMakeCache.txt" ]]; then
  # Tests and examples are not needed; -Werror off: a newer compiler's new warning must
  # not stop a measurement (CI builds with -Werror).
  cmake -S . -B "${weft_build}" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DWEFT_BUILD_TESTS=OFF -DWEFT_BUILD_BENCHMARKS=ON -DWEFT_BUILD_EXAMPLES=OFF -DWEFT_WERROR=OFF
fi
nice -n 5 cmake --build "${weft_build}" --target weft_coro_with_timeout_benchmark
weft_bin="${weft_build}/benchmark/coro/with_timeout_benchmark"

sides=()
# io_uring only where the kernel offers it (a ThreadPool on WEFT_IO_BACKEND=io_uring fails
# to start otherwise): a very short run of the cheapest case is the probe.
if WEFT_IO_BACKEND=io_uring "${weft_bin}" --benchmark_filter='^BM_Baseline_NoTimeout_Ready' \
  --benchmark_min_time=0.0001 >/dev/null 2>&1; then
  sides+=(weft-io_uring)
else
  echo "note: io_uring is not available here: weft runs on epoll only" >&2
fi
sides+=(weft-epoll)

banner "build: tokio (benchmark/timeout/tokio)"
tokio_bin="${out}/tokio/release/tokio-timeout"
rm -f "${tokio_bin}"
if ! command -v cargo >/dev/null; then
  echo "note: cargo is not installed: no tokio side" >&2
elif nice -n 5 cargo build --release --locked --manifest-path benchmark/timeout/tokio/Cargo.toml \
  --target-dir "${out}/tokio"; then
  sides+=(tokio)
else
  echo "note: the tokio program did not build: no tokio side" >&2
fi

banner "build: Go (benchmark/go/with_timeout)"
go_bin="${out}/go-with-timeout"
rm -f "${go_bin}"
if ! command -v go >/dev/null; then
  echo "note: go is not installed: no Go side" >&2
# Offline, like benchmark/run.sh's Go programs: no module downloads, no toolchain switch.
elif (cd benchmark/go && GOTOOLCHAIN=local GOFLAGS= GOPROXY=off go build -o "${go_bin}" ./with_timeout); then
  sides+=(go)
else
  echo "note: the Go program did not build: no Go side" >&2
fi

# --- rounds ---------------------------------------------------------------------------
# run_side <side> <round>: one run of that side's program, JSON in results/<side>.r<k>.json
# (what it prints besides in <side>.r<k>.log, shown if it fails).
run_side() {
  local side="$1" round="$2" file="${results}/$1.r$2.json" rc=0
  case "${side}" in
    weft-*)
      WEFT_IO_BACKEND="${side#weft-}" "${pin[@]}" "${weft_bin}" \
        --benchmark_repetitions="${repetitions}" --benchmark_enable_random_interleaving=true \
        --benchmark_min_time="${min_time}" --benchmark_out_format=json \
        --benchmark_out="${file}" >"${file%.json}.log" 2>&1 || rc=$?
      ;;
    tokio) "${pin[@]}" "${tokio_bin}" "${repetitions}" "${min_time}" >"${file}" \
      2>"${file%.json}.log" || rc=$? ;;
    go) "${pin[@]}" "${go_bin}" -repetitions "${repetitions}" -min-time "${min_time}" >"${file}" \
      2>"${file%.json}.log" || rc=$? ;;
  esac
  if ((rc != 0)); then
    cat "${file%.json}.log" >&2
    echo "benchmark/timeout/run.sh: ${side} failed (exit ${rc}) in round ${round}" >&2
    exit 1
  fi
}

banner "measuring: ${rounds} rounds of ${sides[*]}, ${repetitions} x ${min_time} s per case, ${pin[*]:-not pinned}"
load_at_start="$(cut -d' ' -f1-3 /proc/loadavg)"
run_date="$(date -u '+%Y-%m-%d %H:%M UTC')"
start=${SECONDS}
for round in $(seq 1 "${rounds}"); do
  order=("${sides[@]}")
  if ((round % 2 == 0)); then
    order=()
    for ((i = ${#sides[@]} - 1; i >= 0; i--)); do order+=("${sides[i]}"); done
  fi
  echo "round ${round}: ${order[*]}"
  for side in "${order[@]}"; do
    run_side "${side}" "${round}"
  done
done
echo "measured in $((SECONDS - start)) s; load average at the start: ${load_at_start}"

# --- report ---------------------------------------------------------------------------
tool_version() {  # tool_version tokio|go: what built that side, for the report
  case "$1" in
    tokio) echo "tokio $(sed -n '/^name = "tokio"$/{n;s/^version = "\(.*\)"$/\1/p}' \
      benchmark/timeout/tokio/Cargo.lock), $(rustc --version 2>/dev/null || echo rustc)" ;;
    go) go version 2>/dev/null | sed 's/^go version //;s/^/Go /' ;;
  esac
}
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
# Changes to tracked files other than docs/ (which this script and others write).
[[ -z "$(git status --porcelain --untracked-files=no -- . ':!docs' 2>/dev/null)" ]] ||
  commit+=" (with uncommitted changes)"
META_DATE="${run_date}" META_COMMIT="${commit}" \
META_CPU="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) CPUs" \
META_PIN="${pin[*]:-not pinned}" META_ROUNDS="${rounds}" META_REPETITIONS="${repetitions}" \
META_MIN_TIME="${min_time}" \
META_LOAD="${load_at_start}" \
META_TOKIO="$([[ " ${sides[*]} " == *" tokio "* ]] && tool_version tokio)" \
META_GO="$([[ " ${sides[*]} " == *" go "* ]] && tool_version go)" \
python3 - "${results}/meta.json" <<'PY'
import json, os, sys
keys = ["date", "commit", "cpu", "pin", "rounds", "repetitions", "min_time", "load", "tokio", "go"]
json.dump({k: os.environ["META_" + k.upper()] for k in keys}, open(sys.argv[1], "w"), indent=2)
PY
trap - EXIT

report_args=()
if [[ -n "${WEFT_BENCH_SMOKE:-}" ]]; then
  report_args+=(--run "${results}" --smoke)
else
  # The last 5 runs kept, oldest first (their names sort by date).
  while IFS= read -r dir; do
    report_args+=(--run "${dir}")
  done < <(find "${out}/runs" -mindepth 1 -maxdepth 1 -type d -exec test -f '{}/meta.json' ';' -print |
    sort | tail -n 5)
fi
[[ "${write_doc}" == 1 ]] && report_args+=(--doc docs/performance.md)
banner "report"
python3 benchmark/timeout/report.py "${report_args[@]}"
