#!/usr/bin/env bash
# A/B of echo servers in loadgen ping-pong cells, interleaved, in requests per server
# CPU-second (the figure benchmark/io/run.sh reports), with the load average around each
# cell. For comparing two builds of weft against the raw floors without a full run.sh.
#
#   benchmark/io/ab_echo.sh REPS "SIZExCONNS ..." NAME=ENV@COMMAND ...
#   e.g. benchmark/io/ab_echo.sh 5 "512x10000 64x10000 512x100" \
#          before-uring=WEFT_IO_BACKEND=io_uring@/tmp/base/examples/echo_server \
#          floor-epoll=@build/io-peers/epoll_peer
#
# ENV is a comma-separated list of NAME=value (may be empty). Each run starts the server
# fresh on CPU 0 (WEFT_THREADS=1, BENCH_PROTOCOL=echo), loadgen on CPU 1 (warm-up
# AB_WARMUP s, default 1; window AB_DURATION s, default 5), as benchmark/io/run.sh does;
# the order of the servers rotates each repetition and reverses every other one.
# Prints one line per run and, per cell, the median, min and max per server.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
reps="$1" cells="$2"
shift 2
loadgen="${LOADGEN:-${repo}/build/io-peers/loadgen}"
warmup="${AB_WARMUP:-1}" duration="${AB_DURATION:-5}"
ulimit -Hn 65536 2>/dev/null || true
ulimit -n "$(ulimit -Hn)"
names=() envs=() cmds=()
for spec in "$@"; do
  names+=("${spec%%=*}")
  rest="${spec#*=}"
  envs+=("${rest%%@*}")
  cmds+=("${rest#*@}")
done
n=${#names[@]}
out="$(mktemp)"
port=$((22000 + RANDOM % 6000))
for cell in ${cells}; do
  size="${cell%x*}" conns="${cell#*x}"
  echo "== cell ${size} B x ${conns} connections; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  for ((rep = 1; rep <= reps; rep++)); do
    order=()
    for ((k = 0; k < n; k++)); do order+=($(((k + rep - 1) % n))); done
    if ((rep % 2 == 0)); then
      rev=()
      for ((k = n - 1; k >= 0; k--)); do rev+=("${order[k]}"); done
      order=("${rev[@]}")
    fi
    for k in "${order[@]}"; do
      port=$((port >= 27999 ? 22000 : port + 1))
      # shellcheck disable=SC2086
      env ${envs[k]//,/ } WEFT_THREADS=1 BENCH_PROTOCOL=echo taskset -c 0 ${cmds[k]} "${port}" \
        >/dev/null 2>&1 &
      server=$!
      for ((i = 0; i < 100; i++)); do
        (exec 3<>"/dev/tcp/127.0.0.1/${port}") 2>/dev/null && break
        sleep 0.1
      done
      json="$(taskset -c 1 "${loadgen}" -addr "127.0.0.1:${port}" -mode pingpong -size "${size}" \
        -conns "${conns}" -warmup "${warmup}s" -duration "${duration}s" -pids "${server}" || true)"
      kill -TERM "${server}" 2>/dev/null || true
      wait "${server}" 2>/dev/null || true
      per="$(python3 -c 'import json,sys
r = json.loads(sys.argv[1]); c = r.get("server_cpu_s", 0)
print("%.0f %.0f %.2f %d" % (r["requests"] / c if c else 0, r.get("rps", 0), c, r.get("errors", 0)))' "${json}")"
      echo "${cell} ${names[k]} r${rep} req/cpu-s rps cpu errors: ${per}"
      echo "${cell} ${names[k]} ${per%% *}" >>"${out}"
    done
  done
  echo "== load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "== medians (requests per server CPU-second), [min, max], spread = (max-min)/median"
python3 - "${out}" <<'EOF'
import sys, statistics, collections
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    cell, name, v = line.split()
    rows.setdefault(cell, collections.OrderedDict()).setdefault(name, []).append(float(v))
for cell, servers in rows.items():
    for name, vs in servers.items():
        m = statistics.median(vs)
        print(f"{cell:>10} {name:>16} median {m/1000:7.1f} k  [{min(vs)/1000:.1f}, {max(vs)/1000:.1f}]  spread {(max(vs)-min(vs))/m*100:4.1f} %  n={len(vs)}")
EOF
rm -f "${out}"
