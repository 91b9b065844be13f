#!/usr/bin/env bash
# Compares weft's TCP echo and HTTP servers (examples/) with real peers on 127.0.0.1 and
# writes docs/io-benchmarks.md with its charts in docs/images/io-*.svg.
#
#   benchmark/io/run.sh
#
# Steps:
#   1. install missing Debian packages (WEFT_NO_INSTALL=1: none); build the peers and the
#      load generator under build/io-peers/ (g++ -O2 for the C++ peers, go build, cargo
#      build --release --locked); a peer that does not build is reported, not fatal
#   2. for each workload, repetitions interleaved across servers (the order rotates and
#      reverses from one repetition to the next), each run on a fresh server process:
#      start it, wait until it accepts, warm up, measure, SIGTERM it; a server that does
#      not start, dies, or does not exit 0 is recorded as such
#   3. benchmark/io/report.py: medians, ratios and charts
#
# Servers (the table `servers` below): raw epoll and raw io_uring floors (plain C++; each
# twice, as epoll-again and uring-again, so that the report can show the noise; the
# io_uring floor a third time with a multishot receive per connection, echo only), Go
# net, standalone Asio (epoll, and io_uring when it builds), tokio, nginx (HTTP only), and
# weft's examples/echo_server (Lazy), examples/fiber_echo_server and examples/http_hello
# from ${WEFT_BUILD}, each with WEFT_IO_BACKEND=io_uring and =epoll. A missing binary is a
# note in the report. Every server takes its port as only argument; WEFT_THREADS sets its
# threads, BENCH_PROTOCOL=echo|http its protocol (see benchmark/io/peers/*).
#
# Workloads: echo ping-pong (benchmark/io/loadgen) 64 B and 512 B at 1, 100, 1000 and
# 10,000 connections; streaming echo on 4 connections; HTTP hello with wrk -t1 at 10, 100, 400
# connections; 10,000 idle connections (server READ_TIMEOUT_MS=120000): RSS per connection
# and CPU while idle; and with WEFT_THREADS=2: echo ping-pong 512 B at 1000 connections
# and HTTP at 400 connections.
#
# CPUs (2 cores): the server runs on CPU 0 and the client on CPU 1 (taskset). The
# 2-thread variant gives the server CPUs 0 and 1 while the client stays on CPU 1: the
# client then competes with one of the server's threads, so its req/s is a lower bound;
# requests per server CPU-second is the figure to compare there.
#
# Environment:
#   WEFT_BUILD=dir                 where weft's examples are (default build/gcc-release)
#   WEFT_IO_BENCH_REPETITIONS=n    repetitions of each run (default 5); medians reported
#   WEFT_IO_BENCH_IDLE_REPETITIONS=n  of the idle workload (default 3: its RSS per
#                                  connection varies little and each run takes ~15 s)
#   WEFT_IO_BENCH_DURATION=s       measured seconds of each run (default 5; idle: idle time)
#   WEFT_IO_BENCH_WARMUP=s         warm-up seconds before each measured window (default 1)
#   WEFT_IO_BENCH_IDLE_CONNS=n     connections of the idle workload (default 10000)
#   WEFT_IO_BENCH_SERVERS=regex    only the servers whose name matches (bash =~)
#   WEFT_IO_BENCH_WORKLOADS=regex  only the workloads whose name matches
#   WEFT_IO_BENCH_OUT=file         the markdown report (default docs/io-benchmarks.md);
#                                  its charts go to images/ beside it
#   WEFT_NO_INSTALL=1              install no package
# Raw results: build/io-bench-results/ (one JSON file per run, server logs, build logs).
# With the defaults: about 70 minutes (14 servers, 15 workloads).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${repo}"

weft_build="${WEFT_BUILD:-build/gcc-release}"
repetitions="${WEFT_IO_BENCH_REPETITIONS:-5}"
idle_repetitions="${WEFT_IO_BENCH_IDLE_REPETITIONS:-3}"
duration="${WEFT_IO_BENCH_DURATION:-5}"
warmup="${WEFT_IO_BENCH_WARMUP:-1}"
idle_conns="${WEFT_IO_BENCH_IDLE_CONNS:-10000}"
server_filter="${WEFT_IO_BENCH_SERVERS:-.}"
workload_filter="${WEFT_IO_BENCH_WORKLOADS:-.}"
out_md="${WEFT_IO_BENCH_OUT:-docs/io-benchmarks.md}"
# wrk takes whole seconds.
wrk_duration="$(awk -v s="${duration}" 'BEGIN { n = int(s); if (n < s) n++; print (n < 1 ? 1 : n) }')"
wrk_warmup="$(awk -v s="${warmup}" 'BEGIN { n = int(s); if (n < s) n++; print (n < 1 ? 1 : n) }')"
peers="${repo}/build/io-peers"
results="${repo}/build/io-bench-results"
server_cpus=0
client_cpus=1

banner() { printf '\n==== %s ====\n' "$*"; }
note() {  # note <server or "-"> <text>: a line for the report
  printf '%s\t%s\n' "$1" "$2" >>"${results}/notes.tsv"
  echo "note: $1: $2" >&2
}

# One run at a time: a second one would rebuild the peers and empty the results under the
# first, and share its CPUs. It waits for the first to finish.
mkdir -p "${repo}/build"
exec 9>"${repo}/build/io-bench.lock"
if ! flock -n 9; then
  echo "another benchmark/io/run.sh holds build/io-bench.lock: waiting for it to finish" >&2
  flock 9
fi

rm -rf "${results}" "${peers}"/nginx-*
mkdir -p "${results}/runs" "${results}/logs" "${peers}"
: >"${results}/notes.tsv"

# Python for the report: one with matplotlib if there is one (Debian's python3-matplotlib
# is for /usr/bin/python3, which a pyenv python3 earlier in PATH hides).
python=python3
if ! python3 -c 'import matplotlib' 2>/dev/null && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  python=/usr/bin/python3
fi

# 10,000 connections need 10,000 descriptors in the server and as many in the client.
ulimit -Hn 65536 2>/dev/null || true
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if (($(ulimit -n) < idle_conns + 100)); then
  note - "ulimit -n is $(ulimit -n): the idle workload uses ${idle_conns} connections"
fi

# --- processes: every one this script starts is killed on exit -------------------------
# The server's processes: the pid and its descendants (nginx's workers).
process_tree() {
  local pid="$1" child
  echo "${pid}"
  for child in $(cat /proc/"${pid}"/task/*/children 2>/dev/null); do
    process_tree "${child}"
  done
}
server_pid=""
client_pid=""
build_pid=""
cleanup() {
  local pids=() pid
  for pid in ${build_pid} ${client_pid} ${server_pid}; do
    mapfile -t -O "${#pids[@]}" pids < <(process_tree "${pid}")
  done
  ((${#pids[@]} > 0)) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  sleep 0.2
  kill -KILL "${pids[@]}" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Every child runs in the background and is waited for, so that a signal's trap runs at
# once rather than when the child is done.

# --- 1. packages and builds ----------------------------------------------------------
# Debian packages the peers and clients need (Go and cargo come from their own installers;
# without them their rows are skipped). WEFT_NO_INSTALL=1 installs nothing.
packages=(g++ liburing-dev libasio-dev nginx-light wrk python3-matplotlib)
if [[ "${WEFT_NO_INSTALL:-0}" != 1 ]] && command -v dpkg-query >/dev/null; then
  missing=()
  for p in "${packages[@]}"; do
    [[ "$(dpkg-query -W -f='${db:Status-Status}' "${p}" 2>/dev/null || true)" == installed ]] ||
      missing+=("${p}")
  done
  if ((${#missing[@]} > 0)); then
    echo "installing: ${missing[*]}"
    sudo=()
    [[ "$(id -u)" == 0 ]] || sudo=(sudo)
    "${sudo[@]}" apt-get update || true
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends "${missing[@]}" || note - "could not install ${missing[*]}"
  fi
fi

banner "building the peers and the load generator (logs in ${results}/logs/build-*.log)"
build() {  # build <name> <command...>: false (and a note) when the command fails
  local name="$1"
  shift
  echo "${name}: $*"
  "$@" >"${results}/logs/build-${name}.log" 2>&1 &
  build_pid=$!
  if wait "${build_pid}"; then
    build_pid=""
    return 0
  fi
  build_pid=""
  note "${name}" "did not build: $(grep -m1 -iE 'error|fatal' "${results}/logs/build-${name}.log" ||
    tail -n 1 "${results}/logs/build-${name}.log")"
  return 1
}
# A peer that fails to build must not run last time's binary.
rm -f "${peers}"/*_peer "${peers}/go-peer" "${peers}/loadgen" "${peers}/tokio/release/tokio-peer"
cxx="${CXX:-g++}"
cxxflags=(-std=c++20 -O2 -DNDEBUG -pthread)
build epoll "${cxx}" "${cxxflags[@]}" -o "${peers}/epoll_peer" benchmark/io/peers/epoll/main.cc || true
build uring "${cxx}" "${cxxflags[@]}" -o "${peers}/uring_peer" benchmark/io/peers/uring/main.cc -luring ||
  true
build asio "${cxx}" "${cxxflags[@]}" -o "${peers}/asio_peer" benchmark/io/peers/asio/main.cc || true
build asio-uring "${cxx}" "${cxxflags[@]}" -DASIO_HAS_IO_URING -DASIO_DISABLE_EPOLL \
  -o "${peers}/asio_uring_peer" benchmark/io/peers/asio/main.cc -luring || true
if command -v go >/dev/null; then
  # Offline, like benchmark/run.sh's Go programs: no module downloads, no toolchain switch.
  go_build() { (cd "$1" && GOTOOLCHAIN=local GOFLAGS= GOPROXY=off go build -o "$2" .); }
  build go go_build benchmark/io/peers/go "${peers}/go-peer" || true
  build loadgen go_build benchmark/io/loadgen "${peers}/loadgen" || true
else
  note go "go is not installed: no Go peer and no load generator (echo workloads skipped)"
fi
if command -v cargo >/dev/null; then
  build tokio cargo build --release --locked --manifest-path benchmark/io/peers/tokio/Cargo.toml \
    --target-dir "${peers}/tokio" || true
else
  note tokio "cargo is not installed"
fi
command -v nginx >/dev/null || note nginx "nginx is not installed (Debian nginx-light)"
command -v wrk >/dev/null || note - "wrk is not installed (Debian wrk): HTTP workloads skipped"

# --- the servers ----------------------------------------------------------------------
# "name|protocols|environment|command": the command gets the port as its only argument.
servers=(
  "epoll|echo,http||${peers}/epoll_peer"
  "uring|echo,http||${peers}/uring_peer"
  "epoll-again|echo,http||${peers}/epoll_peer"
  "uring-again|echo,http||${peers}/uring_peer"
  "uring-multishot|echo|BENCH_RECV=multishot|${peers}/uring_peer"
  "go|echo,http||${peers}/go-peer"
  "asio|echo,http||${peers}/asio_peer"
  "asio-uring|echo,http||${peers}/asio_uring_peer"
  "tokio|echo,http||${peers}/tokio/release/tokio-peer"
  "nginx|http||${repo}/benchmark/io/peers/nginx/serve.sh"
  "weft-lazy-uring|echo|WEFT_IO_BACKEND=io_uring|${weft_build}/examples/echo_server"
  "weft-lazy-epoll|echo|WEFT_IO_BACKEND=epoll|${weft_build}/examples/echo_server"
  "weft-fiber-uring|echo|WEFT_IO_BACKEND=io_uring|${weft_build}/examples/fiber_echo_server"
  "weft-fiber-epoll|echo|WEFT_IO_BACKEND=epoll|${weft_build}/examples/fiber_echo_server"
  "weft-http-uring|http|WEFT_IO_BACKEND=io_uring|${weft_build}/examples/http_hello"
  "weft-http-epoll|http|WEFT_IO_BACKEND=epoll|${weft_build}/examples/http_hello"
)
server_field() {  # server_field <row> <1-based field>
  cut -d'|' -f"$2" <<<"$1"
}
present=()  # rows whose command exists
for row in "${servers[@]}"; do
  name="$(server_field "${row}" 1)"
  cmd="$(server_field "${row}" 4)"
  if ! [[ "${name}" =~ ${server_filter} ]]; then
    note "${name}" "not selected (WEFT_IO_BENCH_SERVERS=${server_filter})"
    continue
  fi
  if [[ -x "${cmd}" ]]; then
    present+=("${row}")
  elif [[ "${name}" == nginx ]] && ! command -v nginx >/dev/null; then
    :  # noted above
  else
    note "${name}" "skipped: ${cmd} does not exist"
  fi
done
printf '%s\n' "${present[@]}" >"${results}/servers.txt"

# --- the workloads ----------------------------------------------------------------------
# "name|protocol|threads|client|client arguments|server environment"
# client: loadgen (its -mode and flags follow) or wrk (its -c).
workloads=(
  "echo-64B-c1|echo|1|loadgen|-mode pingpong -size 64 -conns 1|"
  "echo-64B-c100|echo|1|loadgen|-mode pingpong -size 64 -conns 100|"
  "echo-64B-c1000|echo|1|loadgen|-mode pingpong -size 64 -conns 1000|"
  "echo-512B-c1|echo|1|loadgen|-mode pingpong -size 512 -conns 1|"
  "echo-512B-c100|echo|1|loadgen|-mode pingpong -size 512 -conns 100|"
  "echo-512B-c1000|echo|1|loadgen|-mode pingpong -size 512 -conns 1000|"
  "echo-64B-c10000|echo|1|loadgen|-mode pingpong -size 64 -conns 10000|"
  "echo-512B-c10000|echo|1|loadgen|-mode pingpong -size 512 -conns 10000|"
  "stream-c4|echo|1|loadgen|-mode stream -conns 4|"
  "http-c10|http|1|wrk|10|"
  "http-c100|http|1|wrk|100|"
  "http-c400|http|1|wrk|400|"
  "idle-c${idle_conns}|echo|1|loadgen|-mode idle -size 64 -conns ${idle_conns}|READ_TIMEOUT_MS=120000"
  "echo-512B-c1000-t2|echo|2|loadgen|-mode pingpong -size 512 -conns 1000|"
  "http-c400-t2|http|2|wrk|400|"
)

cpu_seconds() {  # cpu_seconds <pid>...: utime+stime of these processes, in seconds
  local pid total=0 fields
  for pid in "$@"; do
    fields="$(sed 's/.*) //' /proc/"${pid}"/stat 2>/dev/null)" || continue
    # After ") ": state is field 1, utime field 12, stime field 13.
    total=$((total + $(awk '{print $12 + $13}' <<<"${fields}")))
  done
  awk -v t="${total}" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }'
}

port=20000
next_port() {  # a port nothing listens on, a different one for each run
  while :; do
    port=$((port >= 29999 ? 20000 : port + 1))
    ss -Htln "sport = :${port}" 2>/dev/null | grep -q . || return 0
  done
}

# run_one <workload row> <server row> <repetition>: one run, one JSON file in runs/.
run_one() {
  local wl="$1" srv="$2" rep="$3"
  local wname protocol threads client cargs wenv sname senv cmd
  IFS='|' read -r wname protocol threads client cargs wenv <<<"${wl}"
  IFS='|' read -r sname _ senv cmd <<<"${srv}"
  local tag="${wname}.${sname}.r${rep}"
  local log="${results}/logs/${tag}.log" out="${results}/runs/${tag}.client"
  local cpus="${server_cpus}"
  ((threads > 1)) && cpus="0-$((threads - 1))"
  next_port
  echo "-- ${wname} | ${sname} | repetition ${rep} | port ${port}"

  # shellcheck disable=SC2086  # the environments are lists of NAME=value words
  env WEFT_THREADS="${threads}" BENCH_PROTOCOL="${protocol}" ${senv} ${wenv} \
    taskset -c "${cpus}" "${cmd}" "${port}" >"${log}" 2>&1 &
  server_pid=$!
  local status=ok detail="" i
  for ((i = 0; i < 100; i++)); do  # up to 10 s to accept a connection
    if ! kill -0 "${server_pid}" 2>/dev/null; then
      status=failed-to-start
      break
    fi
    (exec 3<>"/dev/tcp/127.0.0.1/${port}") 2>/dev/null && break
    sleep 0.1
  done
  ((i == 100)) && status=failed-to-start

  local cpu="" client_rc=0
  if [[ "${status}" == ok ]]; then
    local pids
    pids="$(process_tree "${server_pid}" | paste -sd, -)"
    if [[ "${client}" == loadgen ]]; then
      # shellcheck disable=SC2086
      taskset -c "${client_cpus}" "${peers}/loadgen" -addr "127.0.0.1:${port}" ${cargs} \
        -duration "${duration}s" -warmup "${warmup}s" -pids "${pids}" >"${out}" 2>>"${log}.client" &
      client_pid=$!
      wait "${client_pid}" || client_rc=$?
    else
      taskset -c "${client_cpus}" wrk -t1 -c"${cargs}" -d"${wrk_warmup}s" "http://127.0.0.1:${port}/" \
        >/dev/null 2>>"${log}.client" &
      client_pid=$!
      wait "${client_pid}" || client_rc=$?
      local cpu0
      cpu0="$(cpu_seconds ${pids//,/ })"
      taskset -c "${client_cpus}" wrk -t1 -c"${cargs}" -d"${wrk_duration}s" --latency \
        "http://127.0.0.1:${port}/" >"${out}" 2>>"${log}.client" &
      client_pid=$!
      wait "${client_pid}" || client_rc=$?
      cpu="$(awk -v a="${cpu0}" -v b="$(cpu_seconds ${pids//,/ })" 'BEGIN { printf "%.2f", b - a }')"
    fi
    client_pid=""
    if ! kill -0 "${server_pid}" 2>/dev/null; then
      status=crashed
    elif ((client_rc != 0)); then
      status=client-failed
      detail="client exit ${client_rc}"
    fi
  fi

  # Stop it: SIGTERM, then SIGKILL after 5 s.
  local exit_code=""
  if kill -TERM "${server_pid}" 2>/dev/null; then
    for ((i = 0; i < 50; i++)); do
      kill -0 "${server_pid}" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "${server_pid}" 2>/dev/null; then
      kill -KILL "${server_pid}" 2>/dev/null || true
      detail="${detail:+${detail}; }did not exit within 5 s of SIGTERM (killed)"
    fi
  fi
  wait "${server_pid}" && exit_code=0 || exit_code=$?
  server_pid=""
  if [[ "${status}" == ok && "${exit_code}" != 0 && -z "${detail}" ]]; then
    detail="exited ${exit_code} after SIGTERM"
  elif [[ "${status}" != ok && -z "${detail}" ]]; then
    detail="exit status ${exit_code}"
  fi
  [[ "${status}" != ok ]] && echo "   ${status} ${detail} (log: ${log})"

  "${python}" benchmark/io/report.py record --out "${results}/runs/${tag}.json" \
    --workload "${wname}" --server "${sname}" --repetition "${rep}" --client "${client}" \
    --client-output "${out}" --server-cpu "${cpu}" --status "${status}" --detail "${detail}" \
    --exit-code "${exit_code}" --log "${log}" --client-log "${log}.client"
}

# --- 2. the runs ------------------------------------------------------------------------
load_at_start="$(cut -d' ' -f1-3 /proc/loadavg)"
# CPU time the hypervisor gave to others while we measured (the "steal" column of /proc/stat).
steal_ticks() { awk '/^cpu /{print $9}' /proc/stat; }
steal_before="$(steal_ticks)"
start_seconds=${SECONDS}
for wl in "${workloads[@]}"; do
  IFS='|' read -r wname protocol threads client _ _ <<<"${wl}"
  [[ "${wname}" =~ ${workload_filter} ]] || continue
  if [[ "${client}" == loadgen ]]; then
    have_client="$([[ -x "${peers}/loadgen" ]] && echo yes || true)"
  else
    have_client="$(command -v wrk >/dev/null && echo yes || true)"
  fi
  if [[ -z "${have_client}" ]]; then
    note - "${wname}: skipped, no ${client}"
    continue
  fi
  eligible=()
  for srv in "${present[@]}"; do
    [[ ",$(server_field "${srv}" 2)," == *",${protocol},"* ]] && eligible+=("${srv}")
  done
  reps="${repetitions}"
  [[ "${wname}" == idle-* ]] && reps="${idle_repetitions}"
  banner "${wname} (${#eligible[@]} servers x ${reps})"
  n=${#eligible[@]}
  for ((rep = 1; rep <= reps; rep++)); do
    # Rotate the order by one each repetition and reverse every other one, so that no
    # server always runs first or right after the same neighbour.
    order=()
    for ((k = 0; k < n; k++)); do
      order+=($(((k + rep - 1) % n)))
    done
    if ((rep % 2 == 0)); then
      reversed=()
      for ((k = n - 1; k >= 0; k--)); do reversed+=("${order[k]}"); done
      order=("${reversed[@]}")
    fi
    for k in "${order[@]}"; do
      run_one "${wl}" "${eligible[k]}" "${rep}"
    done
  done
done

# --- 3. the report ----------------------------------------------------------------------
banner "${out_md}"
"${python}" benchmark/io/report.py report --results "${results}" --out "${out_md}" \
  --images "$(dirname "${out_md}")/images" --load "${load_at_start}" --repetitions "${repetitions}" \
  --idle-repetitions "${idle_repetitions}" \
  --load-end "$(cut -d' ' -f1-3 /proc/loadavg)" \
  --steal "$(awk -v a="${steal_before}" -v b="$(steal_ticks)" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "%.1f", (b - a) / hz }')" \
  --duration "${duration}" --warmup "${warmup}" --weft-build "${weft_build}" \
  --server-cpus "${server_cpus}" --client-cpus "${client_cpus}" \
  --measure-seconds "$((SECONDS - start_seconds))"
echo "benchmark/io/run.sh: done in $((SECONDS / 60)) min $((SECONDS % 60)) s"
