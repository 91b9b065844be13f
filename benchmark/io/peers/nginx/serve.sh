#!/usr/bin/env bash
# nginx peer of benchmark/io and benchmark/tls: `serve.sh <port>` writes a config from
# nginx.conf.in under ${WEFT_IO_BUILD:-build/io-peers}/nginx-<port>/ and runs nginx in the
# foreground (the master, and WEFT_THREADS workers, default 1) until SIGINT/SIGTERM. HTTP
# only.
# BENCH_TLS_CERT=chain.pem BENCH_TLS_KEY=key.pem (absolute paths): HTTPS with TLS 1.2 and
# 1.3 (nginx 1.22's default leaves 1.3 out), nginx's defaults for the rest (ciphers,
# session tickets).
set -euo pipefail
port="${1:?usage: serve.sh <port>}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../../../.." && pwd)"
prefix="$(realpath -m "${WEFT_IO_BUILD:-${repo}/build/io-peers}/nginx-${port}")"
mkdir -p "${prefix}"
ssl=""
: >"${prefix}/tls.conf"
if [[ -n "${BENCH_TLS_CERT:-}${BENCH_TLS_KEY:-}" ]]; then
  ssl=" ssl"
  printf 'ssl_certificate %s;\nssl_certificate_key %s;\nssl_protocols TLSv1.2 TLSv1.3;\n' \
    "${BENCH_TLS_CERT:?}" "${BENCH_TLS_KEY:?}" >"${prefix}/tls.conf"
fi
sed -e "s|@PORT@|${port}|g" -e "s|@PREFIX@|${prefix}|g" -e "s|@WORKERS@|${WEFT_THREADS:-1}|g" \
  -e "s|@SSL@|${ssl}|g" "${here}/nginx.conf.in" >"${prefix}/nginx.conf"
exec "${NGINX:-nginx}" -p "${prefix}" -c "${prefix}/nginx.conf"
