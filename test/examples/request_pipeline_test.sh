#!/usr/bin/env bash
# Runs examples/request_pipeline.cc as a test: a bounded run must handle every request
# (exit 0, "0 not handled"); a long run stopped with SIGTERM must cancel what is in flight
# and exit 0 within 10 s, saying so.
#
#   test/examples/request_pipeline_test.sh BINARY
set -euo pipefail
binary="$1"
out="$(mktemp)"
trap 'rm -f "${out}"; [[ -n "${pid:-}" ]] && kill -9 "${pid}" 2>/dev/null || true' EXIT

"${binary}" 200 >"${out}" 2>&1
grep -q "200 requests: .* 0 not handled$" "${out}" || { cat "${out}"; echo "FAIL: bounded run"; exit 1; }
echo "ok: bounded run: $(cat "${out}")"

"${binary}" 100000000 >"${out}" 2>&1 &
pid=$!
sleep 0.3
kill -TERM "${pid}"
for _ in $(seq 100); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.1; done
if kill -0 "${pid}" 2>/dev/null; then echo "FAIL: still running 10 s after SIGTERM"; exit 1; fi
status=0
wait "${pid}" || status=$?
pid=""
[[ ${status} -eq 0 ]] || { cat "${out}"; echo "FAIL: exit status ${status} after SIGTERM"; exit 1; }
grep -q "stopped by a signal" "${out}" || { cat "${out}"; echo "FAIL: no graceful stop"; exit 1; }
echo "ok: stopped by SIGTERM: $(cat "${out}")"
