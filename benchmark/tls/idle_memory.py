#!/usr/bin/env python3
"""What an idle HTTPS connection costs a server: RSS per connection, and where it goes.

    benchmark/tls/idle_memory.py [options] -- COMMAND...

COMMAND starts an HTTPS server answering "hello" (one request per connection is made);
in it, {port}, {cert} and {key} are replaced by a free port on 127.0.0.1 and a
certificate and key made for the run (ECDSA P-256, in a temporary directory, removed
afterwards). The client (Python's ssl, in a child process, through an OPENSSL_CONF that
allows only TLS 1.3, TLS_AES_128_GCM_SHA256 and X25519, as benchmark/tls/run.sh's
clients) makes a few warm-up connections, reads the server's VmRSS, opens --connections
connections that each send one request and read the answer, waits a second, reads VmRSS
again: the difference per connection is printed, as the idle workload of
benchmark/tls/run.sh computes it.

--massif runs COMMAND under valgrind's massif instead and prints, per connection, the
heap that the idle connections hold (a detailed snapshot before and one after, taken
with vgdb), as a call tree to --depth frames: which allocation sites the bytes come from
(OpenSSL's libraries have no symbols on Debian: their own functions show as ???).
--child measures the process's only child (nginx's worker under its master).

--instructions runs COMMAND under valgrind's callgrind twice instead, serving 10
keep-alive connections that make 100 requests each, then 600 each, and prints the
instructions the server executed per request: (Ir of the second - Ir of the first) /
5,000, which leaves out start-up, handshakes and shut-down; --repetitions times (default
5), the median printed with the range. The counts vary by a few per cent from run to run
(how many requests one turn of the server's event loop finds depends on timing), far
less than wall-clock time on a shared machine: enough to compare variants of a server
(with and without SSL_MODE_RELEASE_BUFFERS, say) by more than that.

Examples (from the root of a checkout, with weft's examples built):
    benchmark/tls/idle_memory.py -- build/gcc-release/examples/https_hello {port} {cert} {key}
    WEFT_IO_BACKEND=epoll benchmark/tls/idle_memory.py --massif --connections 300 -- \\
        build/gcc-release/examples/https_hello {port} {cert} {key}
    benchmark/tls/idle_memory.py --nginx   # benchmark/io/peers/nginx/serve.sh, one worker

Benchmark support, not part of weft. Needs python3, openssl; valgrind for --massif.
"""

import argparse
import collections
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

CLIENT_CONFIG = """openssl_conf = openssl_init
[openssl_init]
ssl_conf = ssl_module
[ssl_module]
system_default = tls_client
[tls_client]
MinProtocol = TLSv1.3
Ciphersuites = TLS_AES_128_GCM_SHA256
Groups = X25519
"""

# The client, run as `python3 -c CLIENT port cert warmup n`: warm-up connections (closed),
# then "ready" on stdout and a line read from stdin (the measurement before), then n idle
# connections, "ready" again and a line read (the measurement after).
CLIENT = r"""
import socket, ssl, sys
port, cert, warmup, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
context = ssl.create_default_context(cafile=cert)
request = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"
def connect():
    s = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30),
                            server_hostname="localhost")
    s.sendall(request)
    got = b""
    while not got.endswith(b"hello"):
        chunk = s.recv(4096)
        if not chunk:
            sys.exit("the server closed a connection")
        got += chunk
    return s
for _ in range(warmup):
    connect().close()
print("ready", flush=True)
sys.stdin.readline()
idle = [connect() for _ in range(n)]
print("ready", idle[0].version(), idle[0].cipher()[0], flush=True)
sys.stdin.readline()
"""

# The client of --instructions, `python3 -c REQUESTS port cert connections requests`.
REQUESTS = r"""
import socket, ssl, sys
port, cert, connections, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
context = ssl.create_default_context(cafile=cert)
request = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"
streams = [context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=60),
                               server_hostname="localhost") for _ in range(connections)]
for _ in range(n):
    for s in streams:
        s.sendall(request)
        got = b""
        while not got.endswith(b"hello"):
            chunk = s.recv(4096)
            if not chunk:
                sys.exit("the server closed a connection")
            got += chunk
for s in streams:
    s.close()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, process, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"idle_memory: the server exited ({process.returncode}) before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit("idle_memory: the server does not accept connections")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    sys.exit(f"idle_memory: no VmRSS for {pid}")


def only_child(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        children = f.read().split()
    if len(children) != 1:
        sys.exit(f"idle_memory: --child: {pid} has {len(children)} children")
    return int(children[0])


def massif_tree(path):
    """The last detailed snapshot of a massif file: (heap, extra, {call path: bytes})."""
    lines = open(path).read().splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("heap_tree=detailed"))
    heap = extra = 0
    for line in lines[:start]:
        if line.startswith("mem_heap_B="):
            heap = int(line.split("=")[1])
        elif line.startswith("mem_heap_extra_B="):
            extra = int(line.split("=")[1])
    totals = collections.Counter()
    path_now = []
    for line in lines[start + 1:]:
        m = re.match(r"^( *)n\d+: (\d+) (.*)$", line)
        if not m:
            break
        depth, size, what = len(m.group(1)), int(m.group(2)), m.group(3)
        what = re.sub(r"^0x[0-9A-F]+: ", "", what)
        what = re.sub(r" \(in [^)]*\)$", "", what)
        what = re.sub(r"\([^()]*Frame\*\) \[clone \.actor\]", "(coroutine)", what)
        path_now = path_now[:depth] + [what[:100]]
        totals[tuple(path_now)] += size
    return heap, extra, totals


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--massif", action="store_true")
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--nginx", action="store_true",
                        help="run benchmark/io/peers/nginx/serve.sh (one worker) as COMMAND")
    parser.add_argument("command", nargs="*")
    args = parser.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # Room for the connections on both sides (the server and the client inherit it).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = args.connections + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (wanted if hard == resource.RLIM_INFINITY else min(wanted, hard), hard))

    work = tempfile.mkdtemp(prefix="weft-idle-memory-")
    try:
        cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                        "-keyout", key, "-out", cert], check=True, capture_output=True)
        client_config = os.path.join(work, "client-openssl.cnf")
        with open(client_config, "w") as f:
            f.write(CLIENT_CONFIG)
        port = free_port()
        env = dict(os.environ)
        if args.nginx:
            command = [os.path.join(repo, "benchmark/io/peers/nginx/serve.sh"), str(port)]
            env.update(BENCH_TLS_CERT=cert, BENCH_TLS_KEY=key, WEFT_IO_BUILD=work)
            args.child = True
        else:
            if not args.command:
                parser.error("give a COMMAND (or --nginx)")
            command = [a.format(port=port, cert=cert, key=key) for a in args.command]
        if args.instructions:
            if args.child or args.massif:
                parser.error("--instructions measures COMMAND's own process, alone")
            per_request = []
            for _ in range(args.repetitions):
                counts = []
                for requests in (100, 600):
                    out = os.path.join(work, f"callgrind.{requests}")
                    server = subprocess.Popen(["valgrind", "--tool=callgrind",
                                               f"--callgrind-out-file={out}"] + command, env=env,
                                              stdout=subprocess.DEVNULL,
                                              stderr=open(out + ".log", "w"))
                    try:
                        wait_for_port(port, server, 120)
                        subprocess.run([sys.executable, "-c", REQUESTS, str(port), cert, "10",
                                        str(requests)], check=True,
                                       env=dict(os.environ, OPENSSL_CONF=client_config))
                    finally:
                        server.terminate()
                        server.wait(timeout=120)
                    with open(out) as f:
                        totals = [line for line in f if line.startswith(("summary:", "totals:"))]
                    counts.append(int(totals[0].split()[1]))
                per_request.append((counts[1] - counts[0]) / 5000)
            per_request.sort()
            print(f"{per_request[len(per_request) // 2]:.0f} instructions per request (median of "
                  f"{len(per_request)}; {per_request[0]:.0f} to {per_request[-1]:.0f})")
            return
        snapshots = os.path.join(work, "snapshot")
        if args.massif:
            if args.child:
                parser.error("--massif measures COMMAND's own process (not with --child)")
            command = ["valgrind", "--tool=massif", "--vgdb=yes", "--depth=40",
                       "--threshold=0.1", f"--massif-out-file={work}/massif.out"] + command
        server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                                  stderr=open(os.path.join(work, "server.log"), "w"))
        try:
            wait_for_port(port, server, 120 if args.massif else 20)
            measured = only_child(server.pid) if args.child else server.pid
            client = subprocess.Popen(
                [sys.executable, "-c", CLIENT, str(port), cert, str(args.warmup),
                 str(args.connections)],
                env=dict(os.environ, OPENSSL_CONF=client_config),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

            def measure(name):
                time.sleep(1.0)  # a measurement: the server settles (not a synchronisation)
                if args.massif:
                    subprocess.run(["vgdb", f"--pid={server.pid}", "detailed_snapshot",
                                    f"{snapshots}.{name}"], check=True, capture_output=True)
                    return None
                return rss_kib(measured)

            if client.stdout.readline().strip() != "ready":
                sys.exit("idle_memory: the warm-up failed")
            before = measure("before")
            client.stdin.write("\n")
            client.stdin.flush()
            ready = client.stdout.readline().split()
            if not ready or ready[0] != "ready":
                sys.exit("idle_memory: the idle connections failed")
            after = measure("after")
            client.stdin.write("\n")
            client.stdin.flush()
            client.wait()
            n = args.connections
            if args.massif:
                heap0, extra0, tree0 = massif_tree(f"{snapshots}.before")
                heap1, extra1, tree1 = massif_tree(f"{snapshots}.after")
                print(f"{n} idle connections ({' '.join(ready[1:])}): heap "
                      f"{(heap1 - heap0) / n:.0f} B per connection, malloc's overhead "
                      f"{(extra1 - extra0) / n:.0f} B")
                rows = [(p, (tree1[p] - tree0[p]) / n) for p in set(tree0) | set(tree1)
                        if len(p) <= args.depth]
                for p, v in sorted(rows):
                    if abs(v) >= 16:
                        print(f"{v:8.0f}  {'  ' * (len(p) - 1)}{p[-1]}")
            else:
                print(f"{n} idle connections ({' '.join(ready[1:])}): VmRSS {before} KiB before, "
                      f"{after} KiB with them: {(after - before) / n:.2f} KiB per connection")
        finally:
            server.terminate()
            server.wait(timeout=60)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
