#!/usr/bin/env bash
# Runs one of weft's server examples (examples/echo_server.cc, fiber_echo_server.cc,
# http_hello.cc) as a test: once per I/O backend, it starts the server on port 0 (the
# kernel picks one; the server prints it), talks to it over 127.0.0.1 with python3 (echo:
# 200 messages of growing size, every byte checked, on 3 connections at once, and 8 MiB
# sent before any is read back on a fourth; http: 100 keep-alive requests, some
# pipelined, and requests split across reads), leaves one connection open, sends SIGTERM
# and requires exit status 0 (within a minute: a hang guard).
#
#   test/examples/server_example_test.sh BINARY echo|http
set -euo pipefail
binary="$1"
protocol="$2"
out="$(mktemp)"
trap 'rm -f "${out}"; [[ -n "${pid:-}" ]] && kill -9 "${pid}" 2>/dev/null || true' EXIT

for backend in io_uring epoll; do
  WEFT_IO_BACKEND="${backend}" "${binary}" 0 >"${out}" 2>&1 &
  pid=$!
  port=""
  for _ in $(seq 1200); do  # up to a minute: a loaded machine may start it slowly
    # Only a whole line counts: the file may be read while the server's write is landing.
    port="$(sed -n 's/.*127\.0\.0\.1:\([0-9][0-9]*\), .* thread(s)$/\1/p' "${out}" | head -1)"
    [[ -n "${port}" ]] && break
    kill -0 "${pid}" 2>/dev/null || break
    sleep 0.05
  done
  if [[ -z "${port}" && "${backend}" == io_uring ]] && ! kill -0 "${pid}" 2>/dev/null &&
     grep -q "cannot use it" "${out}"; then
    echo "skipped: io_uring is not available here: $(cat "${out}")"
    pid=""
    continue
  fi
  [[ -n "${port}" ]] || { echo "FAIL: ${binary} (${backend}) printed no port: $(cat "${out}")"; exit 1; }
  grep -q "${backend}" "${out}" || { echo "FAIL: ${binary} does not run ${backend}: $(cat "${out}")"; exit 1; }
  python3 - "${port}" "${protocol}" <<'PY'
import os, socket, sys, threading
port, protocol = int(sys.argv[1]), sys.argv[2]
errors = []
def echo(index):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            for i in range(200):
                message = bytes((index * 7 + i + k) % 256 for k in range(1 + i * 97))
                s.sendall(message)
                got = b""
                while len(got) < len(message):
                    chunk = s.recv(65536)
                    if not chunk:
                        raise RuntimeError("connection closed early")
                    got += chunk
                if got != message:
                    raise RuntimeError("echo mismatch at message %d" % i)
    except Exception as e:
        errors.append(repr(e))
def flood():
    # 8 MiB sent before anything is read back: the server's writes must wait for room
    # (partial writes), and every byte still comes back once, in order.
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            data = os.urandom(8 << 20)
            sender = threading.Thread(target=s.sendall, args=(data,))
            sender.start()
            threading.Event().wait(0.3)
            got = bytearray()
            while len(got) < len(data):
                chunk = s.recv(1 << 20)
                if not chunk:
                    raise RuntimeError("connection closed early")
                got += chunk
            sender.join()
            if bytes(got) != data:
                raise RuntimeError("flood echo mismatch")
    except Exception as e:
        errors.append("flood: " + repr(e))
def http():
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
        response = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello"
        for batch in (1, 1, 3, 10, 1, 84):
            s.sendall(request * batch)
            want, got = response * batch, b""
            while len(got) < len(want):
                chunk = s.recv(65536)
                if not chunk:
                    raise RuntimeError("connection closed early")
                got += chunk
            if got != want:
                raise RuntimeError("unexpected response: %r" % got[:200])
        # Two requests sent in three pieces with pauses, each cut inside its "\r\n\r\n":
        # only a server that keeps the part it has read answers both.
        cut = len(request) - 1
        for piece in (request[:cut - 2], request[cut - 2:] + request[:cut], request[cut:]):
            s.sendall(piece)
            threading.Event().wait(0.05)
        got = b""
        while len(got) < 2 * len(response):
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed early")
            got += chunk
        if got != response * 2:
            raise RuntimeError("unexpected response to split requests: %r" % got[:200])
if protocol == "echo":
    threads = [threading.Thread(target=echo, args=(i,)) for i in range(3)]
    threads.append(threading.Thread(target=flood))
    for t in threads: t.start()
    for t in threads: t.join()
    if errors:
        sys.exit("FAIL: " + "; ".join(errors))
else:
    http()
PY
  # One connection stays open through the shutdown: the server must cancel it and exit.
  exec 3<>"/dev/tcp/127.0.0.1/${port}"
  kill -TERM "${pid}"
  status=0
  for _ in $(seq 1200); do  # a hang guard (a minute), not a timing claim
    kill -0 "${pid}" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "${pid}" 2>/dev/null; then
    echo "FAIL: ${binary} (${backend}) did not exit within 60 s of SIGTERM"
    exit 1
  fi
  wait "${pid}" || status=$?
  pid=""
  exec 3>&-
  [[ ${status} -eq 0 ]] || { echo "FAIL: ${binary} (${backend}) exited with ${status}"; exit 1; }
  grep -q "stopped by signal 15" "${out}" || { echo "FAIL: no clean stop: $(cat "${out}")"; exit 1; }
  echo "ok: ${binary} ${protocol} on ${backend}"
done
