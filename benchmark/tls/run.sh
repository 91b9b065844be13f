#!/usr/bin/env bash
# Compares weft's TLS servers (examples/https_hello, examples/tls_echo_server) with nginx,
# Go, tokio (tokio-rustls and tokio-openssl) and Asio on 127.0.0.1 and writes
# docs/tls-benchmarks.md with its charts in docs/images/tls-*.svg.
#
#   benchmark/tls/run.sh
#
# Steps:
#   1. install missing Debian packages (WEFT_NO_INSTALL=1: none); build weft's two TLS
#      examples in ${WEFT_BUILD} (configured there first if it is not a build tree yet),
#      the Go and tokio peers and the load generator under build/io-peers/ (as
#      benchmark/io/run.sh does), the tokio peer a second time with tokio-openssl
#      (build/io-peers/tokio-openssl/) and the Asio peer with TLS (g++ -O2 -DBENCH_TLS=1,
#      -lssl -lcrypto); make a key and a self-signed certificate for this run with the
#      openssl command (ECDSA P-256, under build/tls-bench-results/: no key is committed)
#   2. check every server once per protocol before measuring: HTTPS with curl (the
#      certificate verified, the body "hello") and openssl s_client, echo with python's
#      ssl (512 bytes back, three times); what was negotiated must be TLS 1.3,
#      TLS_AES_128_GCM_SHA256, X25519, an ECDSA signature; then SIGTERM, exit status 0. A
#      server that fails is recorded as such (report: "Servers") and not measured
#   3. for each workload, repetitions interleaved across servers (the order rotates and
#      reverses from one repetition to the next), each run on a fresh server process:
#      start it, wait until it accepts, warm up, measure, SIGTERM it (benchmark/io/harness.sh)
#   4. benchmark/tls/report.py: medians, ratios and charts
#
# Servers: weft's examples/https_hello (HTTP) and examples/tls_echo_server (echo), each
# with WEFT_IO_BACKEND=io_uring and =epoll; nginx (HTTP only, benchmark/io/peers/nginx, one
# worker); Go crypto/tls, tokio-rustls, tokio-openssl and Asio ssl::stream
# (benchmark/io/peers/go, tokio and asio, both protocols). nginx, tokio-openssl, Asio and
# weft share the system's OpenSSL: between them the runtime is what differs. Every server
# gets the certificate and key (weft's as arguments, the peers' in BENCH_TLS_CERT and
# BENCH_TLS_KEY), one thread, CPU 0; each keeps its own defaults for the rest (TLS 1.2 and
# 1.3 accepted, session tickets).
#
# Workloads (the client on CPU 1): HTTPS hello keep-alive with wrk -t1 at 10, 100 and 400
# connections; TLS echo ping-pong of 512 bytes at 1, 100 and 1,000 connections
# (benchmark/io/loadgen -tls); new connections: 16 loadgen clients, each connecting, making
# a full handshake, sending one HTTP GET, reading the answer and closing, again and again
# (handshakes per server CPU-second); the same with resumed handshakes (loadgen -resume:
# each client offers the session ticket its previous connection received; the report
# gives the share that did resume); 2,000 idle HTTPS connections, each after one request
# (RSS per connection). Every client speaks TLS 1.3 with only TLS_AES_128_GCM_SHA256 and
# X25519 and, but in the resumed workload, resumes no session: wrk and s_client through an
# OPENSSL_CONF the script writes, loadgen by its own configuration.
#
# Environment:
#   WEFT_BUILD=dir                  where weft's examples are (default build/gcc-release)
#   WEFT_TLS_BENCH_REPETITIONS=n    repetitions of each run (default 5); medians reported
#   WEFT_TLS_BENCH_IDLE_REPETITIONS=n  of the idle workload (default 3)
#   WEFT_TLS_BENCH_DURATION=s       measured seconds of each run (default 5; idle: idle
#                                   time, keep it under 9: https_hello drops a connection
#                                   idle for 10 s)
#   WEFT_TLS_BENCH_WARMUP=s         warm-up seconds before each measured window (default 1)
#   WEFT_TLS_BENCH_IDLE_CONNS=n     connections of the idle workload (default 2000)
#   WEFT_TLS_BENCH_SERVERS=regex    only the servers whose name matches (bash =~)
#   WEFT_TLS_BENCH_WORKLOADS=regex  only the workloads whose name matches
#   WEFT_TLS_BENCH_OUT=file         the markdown report (default docs/tls-benchmarks.md);
#                                   its charts go to images/ beside it
#   WEFT_NO_INSTALL=1               install no package
# Raw results: build/tls-bench-results/ (one JSON file per run, server logs, build logs,
# checks.tsv). It takes build/io-bench.lock, as benchmark/io/run.sh does: the two share the
# peers' build and must not share the CPUs. With the defaults: about 40 minutes.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${repo}"

weft_build="${WEFT_BUILD:-build/gcc-release}"
repetitions="${WEFT_TLS_BENCH_REPETITIONS:-5}"
idle_repetitions="${WEFT_TLS_BENCH_IDLE_REPETITIONS:-3}"
duration="${WEFT_TLS_BENCH_DURATION:-5}"
warmup="${WEFT_TLS_BENCH_WARMUP:-1}"
idle_conns="${WEFT_TLS_BENCH_IDLE_CONNS:-2000}"
server_filter="${WEFT_TLS_BENCH_SERVERS:-.}"
workload_filter="${WEFT_TLS_BENCH_WORKLOADS:-.}"
out_md="${WEFT_TLS_BENCH_OUT:-docs/tls-benchmarks.md}"
peers="${repo}/build/io-peers"
results="${repo}/build/tls-bench-results"
server_cpus=0
client_cpus=1

# shellcheck source=benchmark/io/harness.sh
source benchmark/io/harness.sh
bench_start "${repo}/build/io-bench.lock"
raise_fd_limit "${idle_conns}"

# --- 1. packages, builds, the certificate --------------------------------------------------
install_packages g++ cmake ninja-build libssl-dev openssl curl nginx-light wrk python3-matplotlib \
  libasio-dev pkgconf

banner "building weft's TLS examples, the peers and the load generator (logs in ${results}/logs/build-*.log)"
weft_targets=(weft_examples_https_hello weft_examples_tls_echo_server)
if [[ ! -f "${weft_build}/CMakeCache.txt" ]]; then
  build weft-configure cmake -S . -B "${weft_build}" -G Ninja -DWEFT_DEVELOPER=ON \
    -DCMAKE_BUILD_TYPE=Release || true
fi
[[ -f "${weft_build}/CMakeCache.txt" ]] &&
  { build weft cmake --build "${weft_build}" --target "${weft_targets[@]}" -j2 || true; }
build_go_and_tokio
# A peer that fails to build must not run last time's binary.
rm -f "${peers}/asio_tls_peer" "${peers}/tokio-openssl/release/tokio-peer"
build asio-tls "${CXX:-g++}" -std=c++20 -O2 -DNDEBUG -pthread -DBENCH_TLS=1 \
  -o "${peers}/asio_tls_peer" benchmark/io/peers/asio/main.cc -lssl -lcrypto || true
if command -v cargo >/dev/null; then
  # The tokio peer with tokio-openssl in place of tokio-rustls (openssl-sys finds the
  # system's OpenSSL with pkg-config).
  build tokio-openssl cargo build --release --locked --no-default-features --features openssl \
    --manifest-path benchmark/io/peers/tokio/Cargo.toml --target-dir "${peers}/tokio-openssl" ||
    true
fi
command -v nginx >/dev/null || note nginx "nginx is not installed (Debian nginx-light)"
command -v wrk >/dev/null || note - "wrk is not installed (Debian wrk): HTTPS workloads skipped"

# The run's key and self-signed certificate (ECDSA P-256), for 127.0.0.1 and localhost.
tls_dir="${results}/tls"
mkdir -p "${tls_dir}"
(umask 077 && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout "${tls_dir}/key.pem" -out "${tls_dir}/cert.pem" 2>"${results}/logs/openssl-req.log")
cert="${tls_dir}/cert.pem"
key="${tls_dir}/key.pem"
# What the OpenSSL clients (wrk, s_client) may offer: one protocol, suite and group, so that
# every server negotiates the same (loadgen sets the same in its own configuration).
cat >"${tls_dir}/client-openssl.cnf" <<'EOF'
openssl_conf = openssl_init
[openssl_init]
ssl_conf = ssl_module
[ssl_module]
system_default = tls_client
[tls_client]
MinProtocol = TLSv1.3
Ciphersuites = TLS_AES_128_GCM_SHA256
Groups = X25519
EOF
expected="TLSv1.3 TLS_AES_128_GCM_SHA256 X25519 ECDSA"
server_env=(BENCH_TLS_CERT="${cert}" BENCH_TLS_KEY="${key}")
client_env=(OPENSSL_CONF="${tls_dir}/client-openssl.cnf")
wrk_scheme=https

# --- the servers ----------------------------------------------------------------------
# "name|protocols|environment|command" (harness.sh: @PORT@ is the port).
servers=(
  "weft-https-uring|http|WEFT_IO_BACKEND=io_uring|${weft_build}/examples/https_hello @PORT@ ${cert} ${key}"
  "weft-https-epoll|http|WEFT_IO_BACKEND=epoll|${weft_build}/examples/https_hello @PORT@ ${cert} ${key}"
  "weft-echo-uring|echo|WEFT_IO_BACKEND=io_uring|${weft_build}/examples/tls_echo_server @PORT@ ${cert} ${key}"
  "weft-echo-epoll|echo|WEFT_IO_BACKEND=epoll|${weft_build}/examples/tls_echo_server @PORT@ ${cert} ${key}"
  "go|echo,http||${peers}/go-peer"
  "tokio|echo,http||${peers}/tokio/release/tokio-peer"
  "tokio-openssl|echo,http||${peers}/tokio-openssl/release/tokio-peer"
  "asio|echo,http||${peers}/asio_tls_peer"
  "nginx|http||${repo}/benchmark/io/peers/nginx/serve.sh"
)
select_servers WEFT_TLS_BENCH_SERVERS

# --- 2. the checks ------------------------------------------------------------------------
# check_protocol <protocol> <log>: talks to the server on ${port}; prints what was
# negotiated, or why it failed (and returns 1).
check_protocol() {
  local protocol="$1" log="$2" brief negotiated body
  brief="$(env "${client_env[@]}" timeout 10 openssl s_client -connect "127.0.0.1:${port}" \
    -servername localhost -CAfile "${cert}" -verify_return_error -brief </dev/null 2>&1)" || {
    echo "openssl s_client failed: $(tail -n 1 <<<"${brief}")"
    return 1
  }
  echo "${brief}" >>"${log}.check"
  negotiated="$(awk -F': ' '
    /^Protocol version:/ { p = $2 } /^Ciphersuite:/ { c = $2 }
    /^Server Temp Key:/ { split($2, k, ","); g = k[1] } /^Signature type:/ { s = $2 }
    END { print p, c, g, s }' <<<"${brief}")"
  if [[ "${negotiated}" != "${expected}" ]]; then
    echo "negotiated ${negotiated}, not ${expected}"
    return 1
  fi
  if [[ "${protocol}" == http ]]; then
    body="$(timeout 10 curl -sS --cacert "${cert}" --resolve "localhost:${port}:127.0.0.1" \
      "https://localhost:${port}/" 2>&1)" || {
      echo "curl failed: ${body}"
      return 1
    }
    [[ "${body}" == hello ]] || {
      echo "curl got ${body:0:80}, not hello"
      return 1
    }
  else
    body="$(timeout 20 "${python}" - "${port}" "${cert}" 2>&1 <<'PY'
import socket, ssl, sys
context = ssl.create_default_context(cafile=sys.argv[2])  # verifies the chain and name
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10) as raw:
    with context.wrap_socket(raw, server_hostname="localhost") as s:
        message = bytes(range(256)) * 2
        for _ in range(3):
            s.sendall(message)
            got = b""
            while len(got) < len(message):
                chunk = s.recv(65536)
                if not chunk:
                    sys.exit("the connection ended before the echo")
                got += chunk
            if got != message:
                sys.exit("the echo differs from the message")
PY
    )" || {
      echo "echo over TLS failed: $(tail -n 1 <<<"${body}")"
      return 1
    }
  fi
  echo "${negotiated}"
}

banner "checking every server (TLS 1.3, TLS_AES_128_GCM_SHA256, X25519, ECDSA; the answers)"
: >"${results}/checks.tsv"
checked=()
for srv in "${present[@]}"; do
  IFS='|' read -r name protocols senv cmd <<<"${srv}"
  passed=()
  for protocol in ${protocols//,/ }; do
    log="${results}/logs/check.${name}.${protocol}.log"
    outcome="" ok=1
    if start_server "${srv}" "${server_cpus}" "${log}" WEFT_THREADS=1 BENCH_PROTOCOL="${protocol}"; then
      outcome="$(check_protocol "${protocol}" "${log}")" || ok=0
    else
      outcome="did not start: $(tail -n 1 "${log}" 2>/dev/null)"
      ok=0
    fi
    stop_server
    if ((ok)) && [[ "${exit_code}" != 0 ]]; then
      outcome="exited ${exit_code} after SIGTERM${stop_detail:+ (${stop_detail})}"
      ok=0
    fi
    printf '%s\t%s\t%s\t%s\n' "${name}" "${protocol}" "$( ((ok)) && echo ok || echo failed)" \
      "${outcome}" >>"${results}/checks.tsv"
    echo "${name} ${protocol}: $( ((ok)) && echo "ok (${outcome})" || echo "FAILED: ${outcome}")"
    if ((ok)); then
      passed+=("${protocol}")
    else
      note "${name}" "failed the ${protocol} check, not measured: ${outcome}"
    fi
  done
  ((${#passed[@]} > 0)) && checked+=("${name}|$(IFS=,; echo "${passed[*]}")|${senv}|${cmd}")
done
present=("${checked[@]}")

# --- the workloads ----------------------------------------------------------------------
# "name|protocol|threads|client|client arguments|server environment"
# client: loadgen (its -mode and flags follow) or wrk (its -c).
workloads=(
  "https-c10|http|1|wrk|10|"
  "https-c100|http|1|wrk|100|"
  "https-c400|http|1|wrk|400|"
  "tls-echo-512B-c1|echo|1|loadgen|-tls -mode pingpong -size 512 -conns 1|"
  "tls-echo-512B-c100|echo|1|loadgen|-tls -mode pingpong -size 512 -conns 100|"
  "tls-echo-512B-c1000|echo|1|loadgen|-tls -mode pingpong -size 512 -conns 1000|"
  "handshake-c16|http|1|loadgen|-tls -http -mode connect -conns 16|"
  "handshake-resumed-c16|http|1|loadgen|-tls -http -resume -mode connect -conns 16|"
  "idle-c${idle_conns}|http|1|loadgen|-tls -http -mode idle -conns ${idle_conns}|"
)

# --- 3. the runs ------------------------------------------------------------------------
measure_workloads

# --- 4. the report ----------------------------------------------------------------------
write_report benchmark/tls/report.py "${out_md}"
echo "benchmark/tls/run.sh: done in $((SECONDS / 60)) min $((SECONDS % 60)) s"
