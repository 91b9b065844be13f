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
# Steps 1 and 2 use benchmark/io/harness.sh, which benchmark/tls/run.sh shares.
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
# 10,000 connections; streaming echo on 4 connections (64 KiB writes and reads, at most
# 256 KiB in flight per connection: see "Streaming" below); HTTP hello with wrk -t1 at 10, 100, 400
# connections; 10,000 idle connections (server READ_TIMEOUT_MS=120000): RSS per connection
# and CPU while idle; and with WEFT_THREADS=2: echo ping-pong 512 B at 1000 connections
# and HTTP at 400 connections.
#
# CPUs (2 cores): the server runs on CPU 0 and the client on CPU 1 (taskset). The
# 2-thread variant gives the server CPUs 0 and 1 while the client stays on CPU 1: the
# client then competes with one of the server's threads, so its req/s is a lower bound;
# requests per server CPU-second is the figure to compare there.
#
# Streaming: the client keeps at most 256 KiB per connection sent and not yet echoed
# (loadgen -window), as an application's flow control would. Unbounded, the bytes in
# flight grow to what the kernel's autotuned socket buffers hold (tens of MB on 4
# connections), every copy misses the caches, and TCP's loss probes and spurious
# retransmissions fire whenever either side is descheduled: two runs of the same server
# then differed by 10-25 % in MB per server CPU-second; with the window, by about 2 %.
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
peers="${repo}/build/io-peers"
results="${repo}/build/io-bench-results"
server_cpus=0
client_cpus=1

# shellcheck source=benchmark/io/harness.sh
source benchmark/io/harness.sh
bench_start "${repo}/build/io-bench.lock"
rm -rf "${peers}"/nginx-*
# 10,000 connections need 10,000 descriptors in the server and as many in the client.
raise_fd_limit "${idle_conns}"

# --- 1. packages and builds ----------------------------------------------------------
# Debian packages the peers and clients need (Go and cargo come from their own installers;
# without them their rows are skipped). WEFT_NO_INSTALL=1 installs nothing.
install_packages g++ liburing-dev libasio-dev nginx-light wrk python3-matplotlib

banner "building the peers and the load generator (logs in ${results}/logs/build-*.log)"
# A peer that fails to build must not run last time's binary.
rm -f "${peers}"/*_peer
cxx="${CXX:-g++}"
cxxflags=(-std=c++20 -O2 -DNDEBUG -pthread)
build epoll "${cxx}" "${cxxflags[@]}" -o "${peers}/epoll_peer" benchmark/io/peers/epoll/main.cc || true
build uring "${cxx}" "${cxxflags[@]}" -o "${peers}/uring_peer" benchmark/io/peers/uring/main.cc -luring ||
  true
build asio "${cxx}" "${cxxflags[@]}" -o "${peers}/asio_peer" benchmark/io/peers/asio/main.cc || true
build asio-uring "${cxx}" "${cxxflags[@]}" -DASIO_HAS_IO_URING -DASIO_DISABLE_EPOLL \
  -o "${peers}/asio_uring_peer" benchmark/io/peers/asio/main.cc -luring || true
build_go_and_tokio
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
select_servers WEFT_IO_BENCH_SERVERS

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
  "stream-c4|echo|1|loadgen|-mode stream -conns 4 -window 262144|"
  "http-c10|http|1|wrk|10|"
  "http-c100|http|1|wrk|100|"
  "http-c400|http|1|wrk|400|"
  "idle-c${idle_conns}|echo|1|loadgen|-mode idle -size 64 -conns ${idle_conns}|READ_TIMEOUT_MS=120000"
  "echo-512B-c1000-t2|echo|2|loadgen|-mode pingpong -size 512 -conns 1000|"
  "http-c400-t2|http|2|wrk|400|"
)

# --- 2. the runs ------------------------------------------------------------------------
measure_workloads

# --- 3. the report ----------------------------------------------------------------------
write_report benchmark/io/report.py "${out_md}"
echo "benchmark/io/run.sh: done in $((SECONDS / 60)) min $((SECONDS % 60)) s"
