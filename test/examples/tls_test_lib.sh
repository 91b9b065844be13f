# Shared by the TLS example tests (https_get_test.sh, tls_interop_test.sh): sourced, not
# run. A certificate authority and certificates made for the run with the openssl command
# (no key is committed), and background processes started with a time bound, whose
# readiness is read from their output (never a sleep as synchronisation), killed by
# stop_all on exit.
#
# The sourcing script calls `tls_test_init` first: it exits 77 (ctest's SKIP_RETURN_CODE)
# when a command in its arguments is missing, makes ${work} (a temporary folder) and
# ${work}/pki, and sets the EXIT trap. KEEP=1 in the environment keeps ${work} (to look
# at the outputs after a failure).

# tls_test_init <command...>
tls_test_init() {
  local c
  for c in "$@"; do
    if ! command -v "${c}" >/dev/null 2>&1; then
      echo "skipped: ${c} is not installed"
      exit 77
    fi
  done
  work="$(mktemp -d)"
  started=()
  trap stop_all EXIT
  make_test_pki "${work}/pki"
}

# Every process started by start_bounded, ended (TERM, then KILL: each is bounded by
# timeout(1) anyway), and the work folder removed.
stop_all() {
  local pid
  for pid in "${started[@]}"; do
    kill "${pid}" 2>/dev/null || true
  done
  for pid in "${started[@]}"; do
    wait "${pid}" 2>/dev/null || true
  done
  [[ -n "${KEEP:-}" ]] || rm -rf "${work}"
}

# make_test_pki <dir>: ca.pem (a root, CN=weft test CA); server.pem/server.key (localhost
# only: DNS:localhost, so that 127.0.0.1 is a wrong name for it); other.pem/other.key
# (other.test); client.pem/client.key (CN=weft test client, a client certificate); all
# issued by the root, EC P-256, valid for a day.
make_test_pki() {
  local dir="$1" name subject san usage
  mkdir -p "${dir}"
  (
    umask 077
    cd "${dir}"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
      -subj "/CN=weft test CA" -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign" -keyout ca.key -out ca.pem 2>/dev/null
    for name in server other client; do
      case "${name}" in
        server) subject=/CN=localhost san="subjectAltName=DNS:localhost" usage=serverAuth ;;
        other) subject=/CN=other.test san="subjectAltName=DNS:other.test" usage=serverAuth ;;
        client) subject="/CN=weft test client" san="" usage=clientAuth ;;
      esac
      openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "${subject}" \
        -keyout "${name}.key" -out "${name}.csr" 2>/dev/null
      printf 'basicConstraints=critical,CA:FALSE\nextendedKeyUsage=%s\n%s\n' "${usage}" "${san}" \
        >"${name}.ext"
      openssl x509 -req -in "${name}.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
        -extfile "${name}.ext" -out "${name}.pem" 2>/dev/null
    done
  )
  [[ -s "${dir}/client.pem" ]] || { echo "FAIL: could not make the test certificates"; exit 1; }
}

# start_bounded <output file> <command...>: runs the command in the background for at
# most a minute, its standard output and error in the file; sets `pid`. (timeout
# --foreground: without it, timeout also sends a signal it forwards to its own process
# group, and a server stopped by SIGTERM is seen to exit 143 now and then.)
start_bounded() {
  local out="$1"
  shift
  : >"${out}"
  timeout --foreground 60 "$@" >"${out}" 2>&1 &
  pid=$!
  started+=("${pid}")
}

# wait_for_port <output file> <pid> <sed expression printing the port>: sets `port` once
# the process printed a whole line giving it; fails (returns 1) when the process ends
# first, or after a minute (a hang guard, not a timing claim).
wait_for_port() {
  local out="$1" waited="$2" expression="$3" deadline=$((SECONDS + 60))
  port=""
  while ((SECONDS < deadline)); do
    port="$(sed -n "${expression}" "${out}" | head -n 1)"
    [[ -n "${port}" ]] && return 0
    kill -0 "${waited}" 2>/dev/null || break
    sleep 0.01
  done
  port="$(sed -n "${expression}" "${out}" | head -n 1)"
  [[ -n "${port}" ]]
}

# start_s_server <output file> <s_server options...>: openssl s_server on 127.0.0.1, a
# port the kernel picks (it prints "ACCEPT 127.0.0.1:PORT"); sets `pid` and `port`.
start_s_server() {
  local out="$1"
  shift
  start_bounded "${out}" openssl s_server -accept 127.0.0.1:0 "$@"
  wait_for_port "${out}" "${pid}" 's/^ACCEPT 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' ||
    fail "openssl s_server $* did not start: $(cat "${out}")"
}

# start_weft_server <output file> <backend> <binary> <arguments after the port...>: one
# of weft's server examples on port 0 (it prints "NAME: 127.0.0.1:PORT, BACKEND, N
# thread(s)"); sets `pid` and `port`, or returns 1 when it says that the backend cannot
# be used here (io_uring in a sandbox).
start_weft_server() {
  local out="$1" backend="$2" binary="$3"
  shift 3
  start_bounded "${out}" env WEFT_IO_BACKEND="${backend}" "${binary}" 0 "$@"
  if ! wait_for_port "${out}" "${pid}" 's/.*127\.0\.0\.1:\([0-9][0-9]*\), .* thread(s)$/\1/p'; then
    grep -q "cannot use it" "${out}" && return 1
    fail "${binary} (${backend}) did not start: $(cat "${out}")"
  fi
  grep -q "${backend}" "${out}" || fail "${binary} does not run ${backend}: $(cat "${out}")"
}

# stop_weft_server <pid> <output file>: SIGTERM; it must exit 0 after "stopped by signal 15".
stop_weft_server() {
  local waited="$1" out="$2" status=0
  kill -TERM "${waited}"
  wait "${waited}" || status=$?
  [[ ${status} -eq 0 ]] || fail "the server exited with ${status} after SIGTERM: $(cat "${out}")"
  grep -q "stopped by signal 15" "${out}" || fail "no clean stop: $(cat "${out}")"
}

fail() {
  echo "FAIL: $*"
  exit 1
}

# expect_in <file> <fixed string> <what>: fails unless the file contains the string.
expect_in() {
  grep -qF -- "$2" "$1" || fail "$3: no '$2' in: $(cat "$1")"
}
