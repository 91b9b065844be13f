#!/usr/bin/env bash
# weft's TLS servers (examples/https_hello, examples/tls_echo_server) against clients that
# are not weft, with a CA and certificates made for the run (test/examples/tls_test_lib.sh),
# once per I/O backend:
#  - openssl s_client, verifying the chain and the name: the handshake in TLS 1.3 and in
#    TLS 1.2 (forced by the client), ALPN (http/1.1 chosen from "h2,http/1.1"; a client
#    offering only h2 refused with no_application_protocol), a request and its answer
#    (an HTTP GET and "hello"; a line and its echo), then close_notify: the client sends
#    it when its input ends and exits 0;
#  - python's ssl: the servers answer a client's close_notify with their own (unwrap()
#    waits for it: a server that closed without it would fail there);
#  - curl --cacert: HTTPS GETs of 3 URLs on one keep-alive connection (curl's
#    %{num_connects}: 1, 0, 0), http/1.1 agreed over ALPN from curl's "h2,http/1.1", TLS
#    1.2 forced by curl, and the system's roots refusing the run's CA (exit 60).
# Then SIGTERM: each server must exit 0. Exits 77 (skipped) when openssl, curl or python3
# is missing.
#
#   test/examples/tls_interop_test.sh HTTPS_HELLO TLS_ECHO_SERVER
set -euo pipefail
https_hello="$(realpath "$1")"
tls_echo_server="$(realpath "$2")"
# Beside this script; under Bazel, which runs it as examples/<name>_test, in its runfiles.
lib="$(dirname "${BASH_SOURCE[0]}")/tls_test_lib.sh"
[[ -f "${lib}" ]] || lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-}/test/examples/tls_test_lib.sh"
# shellcheck source=test/examples/tls_test_lib.sh
source "${lib}"
tls_test_init openssl curl python3 timeout
pki="${work}/pki"
cd "${work}"

# s_client_session <name> <port> <request> <answer> <s_client options...>: openssl
# s_client (bounded) connects to 127.0.0.1:<port> as localhost, verifying against the
# run's CA, and sends <request> (printf format); once <answer> (a fixed string) has come
# back, its input ends, so it sends close_notify and exits, which must be with status 0.
# Its output is in ${work}/<name>.out (-msg: every TLS message, the alerts it sends
# included) and .err.
s_client_session() {
  local name="$1" port="$2" request="$3" answer="$4" client status=0
  local deadline=$((SECONDS + 60))  # a hang guard, not a timing claim
  shift 4
  local out="${work}/${name}.out" input="${work}/${name}.in"
  rm -f "${input}"
  mkfifo "${input}"
  : >"${out}"
  timeout --foreground 60 openssl s_client -connect "127.0.0.1:${port}" -servername localhost \
    -CAfile "${pki}/ca.pem" -verify_return_error -msg "$@" <"${input}" >"${out}" \
    2>"${work}/${name}.err" &
  client=$!
  exec 4>"${input}"  # the client's input, open until the answer came
  # shellcheck disable=SC2059  # the request is a printf format: "\r\n"
  printf "${request}" >&4
  while ((SECONDS < deadline)); do
    grep -qF -- "${answer}" "${out}" && break
    kill -0 "${client}" 2>/dev/null || break
    sleep 0.01
  done
  exec 4>&-
  wait "${client}" || status=$?
  grep -qF -- "${answer}" "${out}" ||
    fail "s_client ${name} (${backend}): no answer '${answer}': $(cat "${out}" "${work}/${name}.err")"
  [[ ${status} -eq 0 ]] ||
    fail "s_client ${name} (${backend}) exited with ${status}: $(cat "${work}/${name}.err")"
  expect_in "${out}" "Verify return code: 0 (ok)" "s_client ${name} verification"
  grep -qE '^>>> TLS 1\.[23], Alert \[length 0002\], warning close_notify$' "${out}" ||
    fail "s_client ${name} (${backend}) sent no close_notify: $(cat "${out}")"
}

# close_notify_both_ways <port> <alpn or "">: python's ssl sends a line (an HTTP GET when
# ALPN is given), reads the answer, then unwrap(): sends close_notify and waits for the
# server's.
close_notify_both_ways() {
  timeout --foreground 60 python3 - "$1" "${pki}/ca.pem" "$2" <<'PY' ||
import socket, ssl, sys
port, ca, alpn = int(sys.argv[1]), sys.argv[2], sys.argv[3]
context = ssl.create_default_context(cafile=ca)
if alpn:
    context.set_alpn_protocols([alpn])
with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
    tls = context.wrap_socket(raw, server_hostname="localhost")
    request, answer = b"one line\n", b"one line\n"
    if alpn:
        request = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello"
    tls.sendall(request)
    got = b""
    while len(got) < len(answer):
        chunk = tls.recv(65536)
        if not chunk:
            sys.exit("the connection ended before the answer")
        got += chunk
    if got != answer:
        sys.exit("unexpected answer %r" % got)
    tls.unwrap()  # our close_notify, then the server's (an error if it closes without)
PY
    fail "python's ssl on port $1 (${backend}): no close_notify in answer to ours"
}

# curl_get <name> <expected exit status> <curl options and URLs...>: curl (bounded), the
# bodies and -w's lines in ${work}/<name>.out, its -v log in .err.
curl_get() {
  local name="$1" want="$2" status=0
  shift 2
  timeout --foreground 60 curl -sS -v "$@" >"${work}/${name}.out" 2>"${work}/${name}.err" ||
    status=$?
  [[ ${status} -eq ${want} ]] ||
    fail "curl $* (${name}, ${backend}): exit status ${status}, not ${want}: $(cat "${work}/${name}.err")"
}

ran=0
for backend in io_uring epoll; do
  if ! start_weft_server "${work}/https_hello.${backend}.log" "${backend}" "${https_hello}" \
       "${pki}/server.pem" "${pki}/server.key"; then
    echo "skipped: io_uring is not available here"
    continue
  fi
  https_pid="${pid}"
  https_port="${port}"
  start_weft_server "${work}/tls_echo.${backend}.log" "${backend}" "${tls_echo_server}" \
    "${pki}/server.pem" "${pki}/server.key"
  echo_pid="${pid}"
  echo_port="${port}"
  ran=$((ran + 1))
  get='GET / HTTP/1.1\r\nHost: localhost\r\n\r\n'

  # openssl s_client against https_hello: TLS 1.3 and TLS 1.2, ALPN, a GET and "hello".
  s_client_session https13 "${https_port}" "${get}" hello -alpn h2,http/1.1
  expect_in "${work}/https13.out" "New, TLSv1.3, Cipher is" "s_client: TLS 1.3"
  expect_in "${work}/https13.out" "ALPN protocol: http/1.1" "s_client: ALPN"
  expect_in "${work}/https13.out" "HTTP/1.1 200 OK" "s_client: the answer"
  s_client_session https12 "${https_port}" "${get}" hello -alpn h2,http/1.1 -tls1_2
  expect_in "${work}/https12.out" "New, TLSv1.2, Cipher is" "s_client -tls1_2"
  expect_in "${work}/https12.out" "ALPN protocol: http/1.1" "s_client -tls1_2: ALPN"
  # Offering only a protocol https_hello does not speak: refused in the handshake.
  status=0
  timeout --foreground 60 openssl s_client -connect "127.0.0.1:${https_port}" \
    -servername localhost -CAfile "${pki}/ca.pem" -verify_return_error -alpn h2 \
    </dev/null >"${work}/alpn-h2.out" 2>&1 || status=$?
  [[ ${status} -ne 0 ]] || fail "s_client -alpn h2 was not refused: $(cat "${work}/alpn-h2.out")"
  expect_in "${work}/alpn-h2.out" "no application protocol" "s_client -alpn h2"

  # openssl s_client against tls_echo_server: a line and its echo, both versions.
  s_client_session echo13 "${echo_port}" 'ping from s_client\n' "ping from s_client"
  expect_in "${work}/echo13.out" "New, TLSv1.3, Cipher is" "s_client (echo): TLS 1.3"
  expect_in "${work}/echo13.out" "No ALPN negotiated" "s_client (echo): no ALPN"
  s_client_session echo12 "${echo_port}" 'ping over TLS 1.2\n' "ping over TLS 1.2" -tls1_2
  expect_in "${work}/echo12.out" "New, TLSv1.2, Cipher is" "s_client -tls1_2 (echo)"

  # Each server answers a close_notify with its own.
  close_notify_both_ways "${https_port}" http/1.1
  close_notify_both_ways "${echo_port}" ""

  # curl: three GETs on one keep-alive connection, verified with the run's CA, ALPN.
  url="https://localhost:${https_port}"
  resolve=(--resolve "localhost:${https_port}:127.0.0.1")
  curl_get keep-alive 0 --cacert "${pki}/ca.pem" "${resolve[@]}" \
    -w ' %{http_code} %{http_version} %{num_connects}\n' "${url}/a" "${url}/b" "${url}/c"
  want=$'hello 200 1.1 1\nhello 200 1.1 0\nhello 200 1.1 0'
  [[ "$(cat "${work}/keep-alive.out")" == "${want}" ]] ||
    fail "curl keep-alive (${backend}): $(cat "${work}/keep-alive.out") $(cat "${work}/keep-alive.err")"
  expect_in "${work}/keep-alive.err" "ALPN: offers h2,http/1.1" "curl: ALPN offered"
  expect_in "${work}/keep-alive.err" "ALPN: server accepted http/1.1" "curl: ALPN"
  expect_in "${work}/keep-alive.err" "SSL connection using TLSv1.3" "curl: TLS 1.3"
  expect_in "${work}/keep-alive.err" "SSL certificate verify ok" "curl: verification"
  curl_get tls12 0 --cacert "${pki}/ca.pem" "${resolve[@]}" --tlsv1.2 --tls-max 1.2 "${url}/"
  [[ "$(cat "${work}/tls12.out")" == hello ]] || fail "curl --tls-max 1.2: $(cat "${work}/tls12.out")"
  expect_in "${work}/tls12.err" "SSL connection using TLSv1.2" "curl --tls-max 1.2"
  # The system's roots do not know the run's CA.
  curl_get unknown-ca 60 "${resolve[@]}" "${url}/"

  stop_weft_server "${https_pid}" "${work}/https_hello.${backend}.log"
  stop_weft_server "${echo_pid}" "${work}/tls_echo.${backend}.log"
  echo "ok: openssl s_client, python's ssl and curl against https_hello and tls_echo_server on ${backend}"
done
((ran > 0)) || fail "no backend ran"
