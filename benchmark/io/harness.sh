# The machinery that benchmark/io/run.sh and benchmark/tls/run.sh share: sourced by them,
# not run. It locks the run, builds the Go and tokio peers and the load generator, starts
# each server fresh for each run (taskset, port, readiness, SIGTERM, exit status), runs the
# client (benchmark/io/loadgen or wrk), reads the server's CPU time from /proc, records the
# run with benchmark/io/report.py, and interleaves the repetitions.
#
# The sourcing script sets, before it calls these functions:
#   repo results peers        the checkout, the raw results folder (emptied by bench_start),
#                             the peers' build folder
#   duration warmup           measured and warm-up seconds of each run
#   server_cpus client_cpus   CPUs of the server (one thread) and of the client (taskset)
#   server_filter workload_filter   bash =~ regexes of the servers and workloads to run
#   repetitions idle_repetitions    repetitions of each workload (idle-*: the second)
#   servers                   rows "name|protocols|environment|command": the command is
#                             split on blanks, @PORT@ in it becomes the port (without one,
#                             the port is appended); environment: NAME=value words
#   workloads                 rows "name|protocol|threads|client|client arguments|server
#                             environment"; client: loadgen (its flags follow) or wrk (its -c)
# and may set, after sourcing this file:
#   server_env=(NAME=value...)  for every server      client_env=(NAME=value...) for every client
#   wrk_scheme=https            wrk's URL scheme (default http)
# The functions set: python, present (the rows of servers that run), port, server_pid.
server_env=()
client_env=()
wrk_scheme=http

banner() { printf '\n==== %s ====\n' "$*"; }
note() {  # note <server or "-"> <text>: a line for the report
  printf '%s\t%s\n' "$1" "$2" >>"${results}/notes.tsv"
  echo "note: $1: $2" >&2
}

# bench_start <lock file>: one run at a time (a second one would rebuild the peers and
# empty the results under the first, and share its CPUs: it waits for the first to
# finish); an empty results folder; the Python for the report; every process this script
# starts is killed on exit.
bench_start() {
  mkdir -p "${repo}/build"
  exec 9>"$1"
  if ! flock -n 9; then
    echo "another run holds $1: waiting for it to finish" >&2
    flock 9
  fi
  rm -rf "${results}"
  mkdir -p "${results}/runs" "${results}/logs" "${peers}"
  : >"${results}/notes.tsv"
  # Python for the report: one with matplotlib if there is one (Debian's python3-matplotlib
  # is for /usr/bin/python3, which a pyenv python3 earlier in PATH hides).
  python=python3
  if ! python3 -c 'import matplotlib' 2>/dev/null && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    python=/usr/bin/python3
  fi
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM
  # Every child runs in the background and is waited for, so that a signal's trap runs at
  # once rather than when the child is done.
}

# raise_fd_limit <connections>: as many descriptors as the hard limit allows (the server
# and the client each need one per connection); a note when that is too few.
raise_fd_limit() {
  ulimit -Hn 65536 2>/dev/null || true
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  if (($(ulimit -n) < $1 + 100)); then
    note - "ulimit -n is $(ulimit -n): a workload uses $1 connections"
  fi
}

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
bench_cleanup() {
  local pids=() pid
  for pid in ${build_pid} ${client_pid} ${server_pid}; do
    mapfile -t -O "${#pids[@]}" pids < <(process_tree "${pid}")
  done
  ((${#pids[@]} > 0)) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  sleep 0.2
  kill -KILL "${pids[@]}" 2>/dev/null || true
}

# --- packages and builds -----------------------------------------------------------------
# install_packages <Debian package...>: those not installed yet (WEFT_NO_INSTALL=1: none).
install_packages() {
  [[ "${WEFT_NO_INSTALL:-0}" != 1 ]] && command -v dpkg-query >/dev/null || return 0
  local missing=() p sudo=()
  for p in "$@"; do
    [[ "$(dpkg-query -W -f='${db:Status-Status}' "${p}" 2>/dev/null || true)" == installed ]] ||
      missing+=("${p}")
  done
  ((${#missing[@]} > 0)) || return 0
  echo "installing: ${missing[*]}"
  [[ "$(id -u)" == 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update || true
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}" || note - "could not install ${missing[*]}"
}

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

# build_go_and_tokio: ${peers}/go-peer, ${peers}/loadgen and
# ${peers}/tokio/release/tokio-peer, or notes saying why not. A peer that fails to build
# must not run last time's binary.
build_go_and_tokio() {
  rm -f "${peers}/go-peer" "${peers}/loadgen" "${peers}/tokio/release/tokio-peer"
  if command -v go >/dev/null; then
    # Offline, like benchmark/run.sh's Go programs: no module downloads, no toolchain switch.
    go_build() { (cd "$1" && GOTOOLCHAIN=local GOFLAGS= GOPROXY=off go build -o "$2" .); }
    build go go_build benchmark/io/peers/go "${peers}/go-peer" || true
    build loadgen go_build benchmark/io/loadgen "${peers}/loadgen" || true
  else
    note go "go is not installed: no Go peer and no load generator (loadgen workloads skipped)"
  fi
  if command -v cargo >/dev/null; then
    build tokio cargo build --release --locked --manifest-path benchmark/io/peers/tokio/Cargo.toml \
      --target-dir "${peers}/tokio" || true
  else
    note tokio "cargo is not installed"
  fi
}

# --- the servers --------------------------------------------------------------------------
server_field() {  # server_field <row> <1-based field>
  cut -d'|' -f"$2" <<<"$1"
}

# select_servers <name of the filter's variable>: present=( the rows of servers selected
# by server_filter whose program exists ), also in ${results}/servers.txt; a note for each
# of the others.
select_servers() {
  local row name cmd
  present=()
  for row in "${servers[@]}"; do
    name="$(server_field "${row}" 1)"
    cmd="$(server_field "${row}" 4)"
    cmd="${cmd%% *}"
    if ! [[ "${name}" =~ ${server_filter} ]]; then
      note "${name}" "not selected ($1=${server_filter})"
      continue
    fi
    if [[ -x "${cmd}" ]]; then
      present+=("${row}")
    elif [[ "${name}" == nginx ]] && ! command -v nginx >/dev/null; then
      :  # noted by the caller
    else
      note "${name}" "skipped: ${cmd} does not exist"
    fi
  done
  printf '%s\n' "${present[@]}" >"${results}/servers.txt"
}

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

# start_server <server row> <CPUs> <log> [NAME=value...]: starts the server on a new port
# (server_pid, port) and waits until it accepts a connection (10 s at most). Returns 1 if
# it exited or did not accept by then.
start_server() {
  local srv="$1" cpus="$2" log="$3" senv cmd argv i
  shift 3
  IFS='|' read -r _ _ senv cmd <<<"${srv}"
  next_port
  [[ "${cmd}" == *@PORT@* ]] || cmd+=" @PORT@"
  read -r -a argv <<<"${cmd//@PORT@/${port}}"
  # shellcheck disable=SC2086  # the environments are lists of NAME=value words
  env "${server_env[@]}" ${senv} "$@" taskset -c "${cpus}" "${argv[@]}" >"${log}" 2>&1 &
  server_pid=$!
  for ((i = 0; i < 100; i++)); do  # up to 10 s to accept a connection
    kill -0 "${server_pid}" 2>/dev/null || return 1
    (exec 3<>"/dev/tcp/127.0.0.1/${port}") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# stop_server: SIGTERM, then SIGKILL after 5 s; exit_code is its status, stop_detail what
# went wrong (empty if it exited by itself).
stop_server() {
  local i
  exit_code=""
  stop_detail=""
  if kill -TERM "${server_pid}" 2>/dev/null; then
    for ((i = 0; i < 50; i++)); do
      kill -0 "${server_pid}" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "${server_pid}" 2>/dev/null; then
      kill -KILL "${server_pid}" 2>/dev/null || true
      stop_detail="did not exit within 5 s of SIGTERM (killed)"
    fi
  fi
  wait "${server_pid}" && exit_code=0 || exit_code=$?
  server_pid=""
}

whole_seconds() {  # whole_seconds <seconds>: rounded up, at least 1 (wrk takes whole seconds)
  awk -v s="$1" 'BEGIN { n = int(s); if (n < s) n++; print (n < 1 ? 1 : n) }'
}

# run_one <workload row> <server row> <repetition>: one run, one JSON file in runs/.
run_one() {
  local wl="$1" srv="$2" rep="$3"
  local wname protocol threads client cargs wenv sname
  IFS='|' read -r wname protocol threads client cargs wenv <<<"${wl}"
  sname="$(server_field "${srv}" 1)"
  local tag="${wname}.${sname}.r${rep}"
  local log="${results}/logs/${tag}.log" out="${results}/runs/${tag}.client"
  local cpus="${server_cpus}"
  ((threads > 1)) && cpus="0-$((threads - 1))"
  local status=ok detail=""
  # shellcheck disable=SC2086
  start_server "${srv}" "${cpus}" "${log}" WEFT_THREADS="${threads}" BENCH_PROTOCOL="${protocol}" \
    ${wenv} || status=failed-to-start
  echo "-- ${wname} | ${sname} | repetition ${rep} | port ${port}"

  local cpu="" client_rc=0
  if [[ "${status}" == ok ]]; then
    local pids
    pids="$(process_tree "${server_pid}" | paste -sd, -)"
    if [[ "${client}" == loadgen ]]; then
      # shellcheck disable=SC2086
      env "${client_env[@]}" taskset -c "${client_cpus}" "${peers}/loadgen" -addr "127.0.0.1:${port}" \
        ${cargs} -duration "${duration}s" -warmup "${warmup}s" -pids "${pids}" >"${out}" 2>>"${log}.client" &
      client_pid=$!
      wait "${client_pid}" || client_rc=$?
    else
      local url="${wrk_scheme}://127.0.0.1:${port}/"
      env "${client_env[@]}" taskset -c "${client_cpus}" wrk -t1 -c"${cargs}" -d"$(whole_seconds "${warmup}")s" "${url}" \
        >/dev/null 2>>"${log}.client" &
      client_pid=$!
      wait "${client_pid}" || client_rc=$?
      local cpu0
      cpu0="$(cpu_seconds ${pids//,/ })"
      env "${client_env[@]}" taskset -c "${client_cpus}" wrk -t1 -c"${cargs}" -d"$(whole_seconds "${duration}")s" --latency \
        "${url}" >"${out}" 2>>"${log}.client" &
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

  stop_server
  [[ -n "${stop_detail}" ]] && detail="${detail:+${detail}; }${stop_detail}"
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

# run_workloads: every selected workload on every present server of its protocol, the
# repetitions interleaved: the order of the servers rotates by one each repetition and
# reverses every other one, so that no server always runs first or right after the same
# neighbour.
run_workloads() {
  local wl wname protocol client have_client srv eligible reps n rep k order reversed
  for wl in "${workloads[@]}"; do
    IFS='|' read -r wname protocol _ client _ _ <<<"${wl}"
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
}

# CPU time the hypervisor gave to others while we measured (the "steal" column of /proc/stat).
steal_ticks() { awk '/^cpu /{print $9}' /proc/stat; }

# measure_workloads: run_workloads, noting the load average and the stolen CPU time
# around it for write_report.
measure_workloads() {
  load_at_start="$(cut -d' ' -f1-3 /proc/loadavg)"
  steal_before="$(steal_ticks)"
  start_seconds=${SECONDS}
  run_workloads
  load_at_end="$(cut -d' ' -f1-3 /proc/loadavg)"
  stolen="$(awk -v a="${steal_before}" -v b="$(steal_ticks)" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "%.1f", (b - a) / hz }')"
  measure_seconds=$((SECONDS - start_seconds))
}

# write_report <report.py> <out.md> [more arguments]: its `report` command on the results,
# the charts in images/ beside out.md.
write_report() {
  local script="$1" out="$2"
  shift 2
  banner "${out}"
  "${python}" "${script}" report --results "${results}" --out "${out}" \
    --images "$(dirname "${out}")/images" --load "${load_at_start}" --load-end "${load_at_end}" \
    --steal "${stolen}" --repetitions "${repetitions}" --idle-repetitions "${idle_repetitions}" \
    --duration "${duration}" --warmup "${warmup}" --weft-build "${weft_build}" \
    --server-cpus "${server_cpus}" --client-cpus "${client_cpus}" \
    --measure-seconds "${measure_seconds}" "$@"
}
