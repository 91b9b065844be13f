#!/usr/bin/env bash
# Per-request costs of one echo server in one loadgen cell, measured so that they hold on a
# busy machine (counts, not times): instructions and cache misses from callgrind's cache
# simulation, and system calls from the kernel's tracepoints.
#
#   benchmark/io/profile_cell.sh callgrind|syscalls NAME SIZE CONNS -- SERVER-COMMAND...
#
#   callgrind  the server runs under valgrind --tool=callgrind --cache-sim=yes; its counters
#              are zeroed when loadgen's warm-up ends and dumped when its window ends, and
#              divided by the requests loadgen counted in that window. Prints
#              NAME instr/req D1mr+D1mw/req LLmiss/req (LLmiss = DLmr + DLmw + ILmr).
#   syscalls   the server runs natively; `perf stat -e raw_syscalls:sys_enter` (and the
#              main calls one by one) counts its system calls in loadgen's window. Prints
#              NAME syscalls/req and the calls that make them up.
# Environment: PROFILE_WARMUP / PROFILE_DURATION (seconds; defaults 25/20 under callgrind,
# 2/5 otherwise), LOADGEN (default build/io-peers/loadgen), PROFILE_OUT (a folder for the
# raw files; default build/profile). The server gets WEFT_THREADS=1, BENCH_PROTOCOL=echo,
# CPU 0; loadgen CPU 1, as in benchmark/io/run.sh.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tool="$1" name="$2" size="$3" conns="$4"
shift 4
[[ "$1" == -- ]] && shift
loadgen="${LOADGEN:-${repo}/build/io-peers/loadgen}"
out="${PROFILE_OUT:-${repo}/build/profile}"
mkdir -p "${out}"
ulimit -Hn 65536 2>/dev/null || true
ulimit -n "$(ulimit -Hn)"
port=$((21000 + RANDOM % 8000))
if [[ "${tool}" == callgrind ]]; then
  warmup="${PROFILE_WARMUP:-25}" duration="${PROFILE_DURATION:-20}"
  rm -f "${out}/cg.${name}".*
  env WEFT_THREADS=1 BENCH_PROTOCOL=echo taskset -c 0 valgrind --tool=callgrind --cache-sim=yes --D1=49152,12,64 --LL=2097152,16,64 \
    --callgrind-out-file="${out}/cg.${name}.%p" "$@" "${port}" >"${out}/${name}.server.log" 2>&1 &
else
  warmup="${PROFILE_WARMUP:-2}" duration="${PROFILE_DURATION:-5}"
  env WEFT_THREADS=1 BENCH_PROTOCOL=echo taskset -c 0 "$@" "${port}" >"${out}/${name}.server.log" 2>&1 &
fi
server=$!
trap 'kill -TERM ${server} 2>/dev/null || true' EXIT
for ((i = 0; i < 300; i++)); do
  (exec 3<>"/dev/tcp/127.0.0.1/${port}") 2>/dev/null && break
  sleep 0.1
done
taskset -c 1 "${loadgen}" -addr "127.0.0.1:${port}" -mode pingpong -size "${size}" -conns "${conns}" \
  -warmup "${warmup}s" -duration "${duration}s" >"${out}/${name}.loadgen.json" &
client=$!
sleep "${warmup}"
if [[ "${tool}" == callgrind ]]; then
  callgrind_control -z "${server}" >/dev/null
  sleep "${duration}"
  callgrind_control -d "${server}" >/dev/null
else
  perf stat -x, -o "${out}/${name}.perf" -e raw_syscalls:sys_enter \
    -e syscalls:sys_enter_io_uring_enter,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait \
    -e syscalls:sys_enter_epoll_pwait2,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_recvfrom \
    -e syscalls:sys_enter_sendto,syscalls:sys_enter_read,syscalls:sys_enter_write \
    -p "${server}" -- sleep "${duration}" 2>/dev/null
fi
wait "${client}"
# The counters are dumped (callgrind) or read (perf): the server need not stop cleanly. A
# server under valgrind may not act on SIGTERM within any useful time, so it gets 10 s to
# stop, then SIGKILL.
kill -TERM "${server}" 2>/dev/null || true
for ((i = 0; i < 100; i++)); do
  kill -0 "${server}" 2>/dev/null || break
  sleep 0.1
done
kill -KILL "${server}" 2>/dev/null || true
wait "${server}" 2>/dev/null || true
trap - EXIT
requests="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["requests"])' "${out}/${name}.loadgen.json")"
if [[ "${tool}" == callgrind ]]; then
  file="$(ls "${out}/cg.${name}".*.1 2>/dev/null | head -n1)"
  # events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
  awk -v n="${requests}" -v name="${name}" '
    /^events:/ { for (i = 2; i <= NF; i++) col[$i] = i - 1 }
    /^summary:/ || /^totals:/ { for (i = 2; i <= NF; i++) v[i - 1] = $i }
    END { printf "%s requests=%d instr/req=%.0f D1miss/req=%.2f LLmiss/req=%.2f I1mr/req=%.2f\n", name, n,
          v[col["Ir"]] / n, (v[col["D1mr"]] + v[col["D1mw"]]) / n,
          (v[col["DLmr"]] + v[col["DLmw"]] + v[col["ILmr"]]) / n, v[col["I1mr"]] / n }' "${file}"
else
  awk -F, -v n="${requests}" -v name="${name}" '
    $3 ~ /sys_enter/ && $1 + 0 > 0 { s = $3; sub(/.*sys_enter_?/, "", s); if (s == "") s = "all";
                                     line = line sprintf(" %s=%.3f", s, $1 / n) }
    END { printf "%s requests=%d syscalls/req:%s\n", name, n, line }' "${out}/${name}.perf"
fi
