#!/usr/bin/env bash
# Runs examples/https_get (a TLS client) as a test, with a CA and certificates made for the
# run (test/examples/tls_test_lib.sh), once per I/O backend of the client:
#  - against examples/https_hello (weft to weft, on the same backend): the body "hello"
#    with the run's CA (--ca), by URL and by HOST PORT PATH; ALPN http/1.1 agreed;
#  - against openssl s_server -WWW serving a file the test wrote: every byte of it (a body
#    that ends with the server's close_notify), TLS 1.3, then TLS 1.2 forced by the server;
#    mutual TLS with s_server -Verify: served with --cert/--key, refused without;
#  - failures, each with its documented text on standard error and exit status 1: the
#    system's roots (the run's CA unknown: "unable to get local issuer certificate"), a
#    wrong host name (a certificate for other.test: "hostname mismatch"), an IP address
#    the certificate does not name ("IP address mismatch"), a port nothing listens on.
# Exits 77 (skipped) when openssl is missing.
#
#   test/examples/https_get_test.sh HTTPS_GET HTTPS_HELLO
set -euo pipefail
https_get="$(realpath "$1")"
https_hello="$(realpath "$2")"
# Beside this script; under Bazel, which runs it as examples/<name>_test, in its runfiles.
lib="$(dirname "${BASH_SOURCE[0]}")/tls_test_lib.sh"
[[ -f "${lib}" ]] || lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-}/test/examples/tls_test_lib.sh"
# shellcheck source=test/examples/tls_test_lib.sh
source "${lib}"
tls_test_init openssl timeout
pki="${work}/pki"

# A file for s_server -WWW to serve: 200 KiB of random bytes (several records).
mkdir -p "${work}/www"
openssl rand -out "${work}/www/page.bin" 204800

# get <name> <expected status> <https_get arguments...>: runs it (bounded), the body in
# ${work}/<name>.out, standard error in ${work}/<name>.err; fails on another exit status.
get() {
  local name="$1" want="$2" status=0
  shift 2
  timeout --foreground 60 "${https_get}" "$@" >"${work}/${name}.out" 2>"${work}/${name}.err" || status=$?
  [[ ${status} -eq ${want} ]] ||
    fail "https_get $* (${name}, ${backend}): exit status ${status}, not ${want}: $(cat "${work}/${name}.err")"
}

# The s_servers (the client's backend does not matter to them): one serving files with
# the localhost certificate, one forced to TLS 1.2, one with the other.test certificate,
# one requiring a client certificate. s_server serves its connections one after another.
cd "${work}/www"
start_s_server "${work}/s_server.log" -cert "${pki}/server.pem" -key "${pki}/server.key" -WWW
www_port="${port}"
start_s_server "${work}/s_server12.log" -cert "${pki}/server.pem" -key "${pki}/server.key" -WWW \
  -tls1_2
www12_port="${port}"
start_s_server "${work}/s_server_other.log" -cert "${pki}/other.pem" -key "${pki}/other.key" -WWW
other_port="${port}"
start_s_server "${work}/s_server_mtls.log" -cert "${pki}/server.pem" -key "${pki}/server.key" -WWW \
  -Verify 1 -CAfile "${pki}/ca.pem" -verify_return_error
mtls_port="${port}"
cd "${work}"

ran=0
for backend in io_uring epoll; do
  export WEFT_IO_BACKEND="${backend}"
  if ! start_weft_server "${work}/https_hello.${backend}.log" "${backend}" "${https_hello}" \
       "${pki}/server.pem" "${pki}/server.key"; then
    echo "skipped: io_uring is not available here"
    continue
  fi
  hello_pid="${pid}"
  hello_port="${port}"
  ran=$((ran + 1))

  # weft to weft, verified with the run's CA; ALPN http/1.1.
  get hello 0 "https://localhost:${hello_port}/" --ca "${pki}/ca.pem" --verbose
  [[ "$(cat "${work}/hello.out")" == hello ]] || fail "https_hello answered: $(cat "${work}/hello.out")"
  expect_in "${work}/hello.err" "ALPN http/1.1" "https_get --verbose against https_hello"
  expect_in "${work}/hello.err" "server certificate CN=localhost" "https_get --verbose"
  get hello-hpp 0 localhost "${hello_port}" /index.html --ca "${pki}/ca.pem"
  [[ "$(cat "${work}/hello-hpp.out")" == hello ]] || fail "HOST PORT PATH: $(cat "${work}/hello-hpp.out")"

  # Verification failures: the system's roots do not know the run's CA; 127.0.0.1 is not
  # a name of the localhost certificate.
  get unknown-ca 1 "https://localhost:${hello_port}/"
  expect_in "${work}/unknown-ca.err" \
    "https_get: weft: TLS connect: the peer's certificate did not verify: unable to get local issuer certificate" \
    "an unknown CA"
  get ip-mismatch 1 "https://127.0.0.1:${hello_port}/" --ca "${pki}/ca.pem"
  expect_in "${work}/ip-mismatch.err" \
    "https_get: weft: TLS connect: the peer's certificate did not verify: IP address mismatch" \
    "an address the certificate does not name"
  stop_weft_server "${hello_pid}" "${work}/https_hello.${backend}.log"
  # Nothing listens there now.
  get refused 1 "https://localhost:${hello_port}/" --ca "${pki}/ca.pem"
  expect_in "${work}/refused.err" "Connection refused" "a port nothing listens on"

  # openssl s_server -WWW: the file, every byte, ended by the server's close_notify.
  get www 0 "https://localhost:${www_port}/page.bin" --ca "${pki}/ca.pem" --verbose
  cmp -s "${work}/www.out" "${work}/www/page.bin" || fail "s_server's file differs ($(wc -c <"${work}/www.out") bytes)"
  expect_in "${work}/www.err" "TLSv1.3, ALPN none" "https_get --verbose against s_server"
  get www12 0 "https://localhost:${www12_port}/page.bin" --ca "${pki}/ca.pem" --verbose
  cmp -s "${work}/www12.out" "${work}/www/page.bin" || fail "s_server's file differs over TLS 1.2"
  expect_in "${work}/www12.err" "TLSv1.2, ALPN none" "https_get --verbose against s_server -tls1_2"

  # A certificate for another name.
  get wrong-name 1 "https://localhost:${other_port}/page.bin" --ca "${pki}/ca.pem"
  expect_in "${work}/wrong-name.err" \
    "https_get: weft: TLS connect: the peer's certificate did not verify: hostname mismatch" \
    "a certificate for other.test"

  # Mutual TLS: with the client certificate the file comes; without, the server refuses
  # (in TLS 1.3 the client learns it from the server's alert, at its first read).
  get mtls 0 "https://localhost:${mtls_port}/page.bin" --ca "${pki}/ca.pem" \
    --cert "${pki}/client.pem" --key "${pki}/client.key"
  cmp -s "${work}/mtls.out" "${work}/www/page.bin" || fail "s_server -Verify: the file differs"
  get no-client-cert 1 "https://localhost:${mtls_port}/page.bin" --ca "${pki}/ca.pem"
  expect_in "${work}/no-client-cert.err" "certificate required" "no client certificate"

  # Usage errors.
  get usage 2 "http://localhost:${www_port}/"
  echo "ok: https_get on ${backend}"
done
((ran > 0)) || fail "no backend ran"
