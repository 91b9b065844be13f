#!/usr/bin/env bash
# nginx peer of benchmark/io: `serve.sh <port>` writes a config from nginx.conf.in under
# ${WEFT_IO_BUILD:-build/io-peers}/nginx-<port>/ and runs nginx in the foreground (the
# master, and WEFT_THREADS workers, default 1) until SIGINT/SIGTERM. HTTP only.
set -euo pipefail
port="${1:?usage: serve.sh <port>}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../../../.." && pwd)"
prefix="$(realpath -m "${WEFT_IO_BUILD:-${repo}/build/io-peers}/nginx-${port}")"
mkdir -p "${prefix}"
sed -e "s|@PORT@|${port}|g" -e "s|@PREFIX@|${prefix}|g" -e "s|@WORKERS@|${WEFT_THREADS:-1}|g" \
  "${here}/nginx.conf.in" >"${prefix}/nginx.conf"
exec "${NGINX:-nginx}" -p "${prefix}" -c "${prefix}/nginx.conf"
