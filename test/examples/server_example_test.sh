#!/usr/bin/env bash
# Runs one of weft's server examples (examples/echo_server.cc, fiber_echo_server.cc,
# http_hello.cc, https_hello.cc, kv_server.cc, tls_echo_server.cc) as a test: once per I/O
# backend, it starts the server on port 0 (the kernel picks one; the server prints it),
# talks to it over 127.0.0.1 with python3 (echo: 200 messages of growing size, every byte
# checked, on 3 connections at once, and 8 MiB sent before any is read back on a fourth;
# tls-echo: the same over TLS, the 8 MiB sent and read back by one thread interleaving
# non-blocking sends and receives, then a client that speaks no TLS; http: 100
# keep-alive requests, some pipelined, and requests split across reads; https: the same
# over TLS, verifying a certificate made for the run with the openssl command, then a
# client that speaks no TLS, which must not stop the server; kv: every command and reply, "\n" and
# "\r\n" lines, 300 pipelined commands, commands cut across sends and byte by byte, a
# line too long, 4 clients at once sharing the store), leaves one connection open, sends
# SIGTERM and requires exit status 0 (within a minute: a hang guard). The server runs with
# SHUTDOWN_GRACE_MS=100: the open connection is cancelled when that grace ends, which
# checks the same stop as the default 5 s without waiting them out.
#
#   test/examples/server_example_test.sh BINARY echo|http|https|kv|tls-echo
set -euo pipefail
binary="$1"
protocol="$2"
out="$(mktemp)"
keys="$(mktemp -d)"
trap 'rm -f "${out}"; rm -rf "${keys}"; [[ -n "${pid:-}" ]] && kill -9 "${pid}" 2>/dev/null || true' EXIT
server_args=()
if [[ "${protocol}" == https || "${protocol}" == tls-echo ]]; then
  # A key and a self-signed certificate for this run only (no key is committed).
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
    -keyout "${keys}/key.pem" -out "${keys}/cert.pem" 2>/dev/null
  server_args=("${keys}/cert.pem" "${keys}/key.pem")
fi

for backend in io_uring epoll; do
  # Emptied here, not by the server's redirection: that one happens in the child after the
  # fork, and the loop below could meanwhile read the previous server's port.
  : >"${out}"
  WEFT_IO_BACKEND="${backend}" SHUTDOWN_GRACE_MS=100 "${binary}" 0 "${server_args[@]}" >>"${out}" 2>&1 &
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
  python3 - "${port}" "${protocol}" "${keys}/cert.pem" <<'PY'
import os, select, socket, ssl, sys, threading
port, protocol, certificate = int(sys.argv[1]), sys.argv[2], sys.argv[3]
errors = []
def connect():
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    if protocol not in ("https", "tls-echo"):
        return s
    context = ssl.create_default_context(cafile=certificate)  # verifies name and chain
    if protocol == "https":
        context.set_alpn_protocols(["http/1.1"])
    tls = context.wrap_socket(s, server_hostname="localhost")
    if protocol == "https" and tls.selected_alpn_protocol() != "http/1.1":
        raise RuntimeError("ALPN: %r" % tls.selected_alpn_protocol())
    return tls
def echo(index):
    try:
        with connect() as s:
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
def tls_flood():
    # 8 MiB through TLS, sent while the echo is read back by the same thread (an SSL
    # socket is not for two threads at once): the server's writes wait for room while
    # its reads go on, and every byte still comes back once, in order.
    try:
        with connect() as s:
            data = os.urandom(8 << 20)
            s.setblocking(False)
            sent, got = 0, bytearray()
            while len(got) < len(data):
                want_write = [s] if sent < len(data) else []
                readable, writable, _ = select.select([s], want_write, [], 60)
                if not readable and not writable:
                    raise RuntimeError("no progress for 60 s")
                if writable:
                    try:
                        sent += s.send(data[sent:sent + 65536])
                    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                        pass
                while readable or s.pending():
                    readable = []
                    try:
                        chunk = s.recv(1 << 20)
                    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                        break
                    if not chunk:
                        raise RuntimeError("connection closed early")
                    got += chunk
            if bytes(got) != data:
                raise RuntimeError("flood echo mismatch")
    except Exception as e:
        errors.append("flood: " + repr(e))
def refused_without_tls():
    # A client that speaks no TLS is refused; the server goes on serving.
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        while s.recv(65536):
            pass
def http():
    with connect() as s:
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
def kv():
    def connect():
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        return s, s.makefile("rb")
    def replies(f, n):
        got = []
        for _ in range(n):
            line = f.readline()
            if not line.endswith(b"\n"):
                raise RuntimeError("connection closed early, after %r" % got[-3:])
            got.append(line[:-1].decode())
        return got
    def expect(s, f, commands, want):
        s.sendall(commands)
        got = replies(f, len(want))
        if got != want:
            raise RuntimeError("sent %r: got %r, want %r" % (commands[:200], got[:5], want[:5]))
    s, f = connect()
    expect(s, f, b"GET a\n", ["NOT_FOUND"])
    expect(s, f, b"SET a 1\n", ["OK"])
    expect(s, f, b"GET a\n", ["VALUE 1"])
    expect(s, f, b"SET a 2\r\nGET a\r\n", ["OK", "VALUE 2"])  # "\r\n" lines, two at once
    expect(s, f, b"DEL a\nDEL a\nGET a\n", ["DELETED", "NOT_FOUND", "NOT_FOUND"])
    expect(s, f, b"SET greeting hello  world \nGET greeting\n", ["OK", "VALUE hello  world "])
    expect(s, f, b"SET empty \nGET empty\n", ["OK", "VALUE "])
    for bad in (b"\n", b"FOO x\n", b"GET\n", b"GET a b\n", b"SET\n", b"get a\n"):
        s.sendall(bad)
        reply = replies(f, 1)[0]
        if not reply.startswith("ERROR"):
            raise RuntimeError("%r answered %r" % (bad, reply))
    # Another connection sees the same store.
    s2, f2 = connect()
    expect(s2, f2, b"GET greeting\n", ["VALUE hello  world "])
    # 300 commands in one send (pipelined), answered in order.
    commands, want = b"", []
    for i in range(100):
        commands += b"SET k%d v%d\nGET k%d\nDEL k%d\n" % (i, i * i, i, i)
        want += ["OK", "VALUE v%d" % (i * i), "DELETED"]
    expect(s, f, commands, want)
    # Commands cut across sends, the cuts inside words and between "\r" and "\n", then
    # one byte per send; the pauses let the server read each piece on its own.
    stream = b"SET cut across\r\nGET cut\r\nSET long " + b"x" * 3000 + b"\nGET long\n"
    for i in range(0, len(stream), 7):
        s.sendall(stream[i:i + 7])
        if i % 70 == 0:
            threading.Event().wait(0.005)
    if replies(f, 4) != ["OK", "VALUE across", "OK", "VALUE " + "x" * 3000]:
        raise RuntimeError("commands cut across sends were answered wrong")
    for byte in b"GET cut\n":
        s.sendall(bytes([byte]))
        threading.Event().wait(0.002)
    if replies(f, 1) != ["VALUE across"]:
        raise RuntimeError("a command sent byte by byte was answered wrong")
    # Clients at once, each on its own keys.
    errors = []
    def client(c):
        try:
            cs, cf = connect()
            for i in range(100):
                expect(cs, cf, b"SET c%d-%d %d\nGET c%d-%d\n" % (c, i, i, c, i), ["OK", "VALUE %d" % i])
            cs.close()
        except Exception as e:
            errors.append(repr(e))
    threads = [threading.Thread(target=client, args=(c,)) for c in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    # A line longer than the server's limit (4 KiB): an error, then the server closes (with
    # a reset if it closed before reading the whole line: both are an end).
    s.sendall(b"SET big " + b"y" * 5000 + b"\n")
    if replies(f, 1) != ["ERROR line too long"]:
        raise RuntimeError("a line too long was not refused")
    try:
        rest = f.read()
    except ConnectionResetError:
        rest = b""
    if rest != b"":
        raise RuntimeError("the server went on after a line too long: %r" % rest[:100])
    s.close()
    s2.close()
if protocol in ("echo", "tls-echo"):
    threads = [threading.Thread(target=echo, args=(i,)) for i in range(3)]
    threads.append(threading.Thread(target=tls_flood if protocol == "tls-echo" else flood))
    for t in threads: t.start()
    for t in threads: t.join()
    if protocol == "tls-echo" and not errors:
        refused_without_tls()
        echo(3)
    if errors:
        sys.exit("FAIL: " + "; ".join(errors))
elif protocol == "kv":
    kv()
else:
    http()
    if protocol == "https":
        refused_without_tls()
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
