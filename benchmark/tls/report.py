#!/usr/bin/env python3
"""The report of benchmark/tls/run.sh.

  report.py report --results DIR ...   every DIR/runs/*.json (recorded by
                                       benchmark/io/report.py record) and DIR/checks.tsv:
                                       medians per workload and server, ratios, charts ->
                                       docs/tls-benchmarks.md and docs/images/tls-*.svg

Built on benchmark/io/report.py (its medians, tables, charts and header). Ratios: each
server's median against the best median of the framework peers (Go crypto/tls,
tokio-rustls, tokio-openssl, Asio ssl::stream) and against nginx, for req/s and for
requests per server CPU-second. The resumed-handshake workload also gives, per server, the
share of its connections that did resume (loadgen's "resumed").
"""

import importlib.util
import os
import re

_spec = importlib.util.spec_from_file_location(
    "io_report", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "io", "report.py"))
io = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(io)

PEERS = ("go", "tokio", "tokio-openssl", "asio")
# The peers on the system's OpenSSL, as weft and nginx: between them the runtime differs,
# not the cryptography (tokio's rustls and Go's crypto/tls are other implementations).
OPENSSL_PEERS = ("tokio-openssl", "asio")
REFS = [("peers", PEERS), ("nginx", ("nginx",))]
# The summary's columns: weft's two backends, then the others.
COLUMNS = (("weft io_uring", "uring"), ("weft epoll", "epoll"), ("go", "go"),
           ("tokio", "tokio"), ("tokio-openssl", "tokio-openssl"), ("asio", "asio"),
           ("nginx", "nginx"))
# Below this share of resumed connections, a resumed-handshake figure is marked.
RESUMED_ENOUGH = 0.9


def kind(workload):
    return next((k for k in ("https", "tls-echo", "handshake", "idle") if workload.startswith(k)),
                workload)


def workload_order(names):
    rank = {"https": 0, "tls-echo": 1, "handshake": 2, "idle": 3}
    return sorted(names, key=lambda n: (rank.get(kind(n), 9), [
        int(x) if x.isdigit() else x for x in re.split(r"(\d+)", n)]))


def server_order(names):
    rank = {n: i for i, n in enumerate(("weft-https-uring", "weft-https-epoll", "weft-echo-uring",
                                        "weft-echo-epoll", "go", "tokio", "tokio-openssl",
                                        "asio", "nginx"))}
    return sorted(names, key=lambda n: (rank.get(n, 100), n))


def weft_server(workload, backend):
    """The weft row of a workload: https_hello for the HTTP ones, tls_echo_server for echo."""
    return "weft-%s-%s" % ("echo" if kind(workload) == "tls-echo" else "https", backend)


def describe(workload):
    m = re.match(r"https-c(\d+)$", workload)
    if m:
        return "HTTPS/1.1 keep-alive hello, `wrk -t1 -c%s`" % m.group(1)
    m = re.match(r"tls-echo-(\d+)B-c(\d+)$", workload)
    if m:
        return "TLS echo ping-pong, %s-byte messages, %s connection%s (`loadgen -tls`)" % (
            m.group(1), m.group(2), "" if m.group(2) == "1" else "s")
    m = re.match(r"handshake-resumed-c(\d+)$", workload)
    if m:
        return ("new connections with resumed handshakes: %s clients, each connecting, "
                "offering the session ticket its previous connection received (TLS 1.3 PSK "
                "with a new X25519 exchange: no certificate, no signature), sending one HTTP "
                "GET, reading the answer and closing, again and again (`loadgen -tls -http "
                "-resume -mode connect`); *resumed* is the share of the measured connections "
                "that did resume (a server that refuses a ticket makes a full handshake)"
                % m.group(1))
    m = re.match(r"handshake-c(\d+)$", workload)
    if m:
        return ("new connections: %s clients, each connecting, making a full TLS 1.3 handshake, "
                "sending one HTTP GET, reading the answer and closing, again and again "
                "(`loadgen -tls -http -mode connect`): a request here is a connection, its "
                "latency from the dial to the answer's end" % m.group(1))
    m = re.match(r"idle-c(\d+)$", workload)
    if m:
        return ("%s idle HTTPS keep-alive connections, each after one request "
                "(`loadgen -tls -http -mode idle`)" % m.group(1))
    return workload


def read_checks(results):
    """[(server, protocol, ok or failed, outcome)] from checks.tsv."""
    path = os.path.join(results, "checks.tsv")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [tuple(line.rstrip("\n").split("\t", 3)) for line in f if line.count("\t") >= 3]


def resumed_share(runs, workload, server):
    """The share of the measured connections that resumed, over the server's ok runs of a
    resumed-handshake workload; None elsewhere."""
    done = [r for r in runs if r["workload"] == workload and r["server"] == server and
            r["status"] == "ok" and "resumed" in r and r.get("requests")]
    if not done:
        return None
    return sum(r["resumed"] for r in done) / sum(r["requests"] for r in done)


def resumed_note(runs, workload, server):
    """" (N % resumed)" after a resumed-handshake figure below RESUMED_ENOUGH, else ""."""
    share = resumed_share(runs, workload, server)
    if share is None or share >= RESUMED_ENOUGH:
        return ""
    return " (%.0f %% resumed)" % (100 * share)


def summary(w, table, runs):
    """One row per workload: each server's headline median (per server CPU-second; RSS per
    connection for idle) and weft's on its default backend (epoll) against the best peer,
    the best peer on the same OpenSSL, and nginx."""
    w("## Summary")
    w("")
    w("Requests (HTTPS, echo) or new connections (handshake) per server CPU-second, medians; "
      "for idle, KiB of RSS per connection (lower is better). *weft* is `https_hello` (HTTPS, "
      "handshake, idle) or `tls_echo_server` (echo); *vs best peer* divides the figure of weft "
      "on epoll (its default backend) by the best of Go, tokio (rustls or OpenSSL) and Asio, "
      "*vs OpenSSL peers* by the better of tokio-openssl and Asio (the same OpenSSL as weft: "
      "the runtime is what differs), *vs nginx* by nginx's (above 1: weft does more per "
      "CPU-second; for idle, above 1: weft holds more memory). "
      "In handshake-resumed, a figure marked *(N %% resumed)* comes from a server that "
      "resumed fewer than %.0f %% of its connections (the rest were full handshakes)." %
      (100 * RESUMED_ENOUGH))
    w("")
    w("| workload | " + " | ".join(label for label, _ in COLUMNS) +
      " | vs best peer | vs OpenSSL peers | vs nginx |")
    w("|---|" + "---|" * (len(COLUMNS) + 3))
    for wl in workload_order(table):
        servers = table[wl]
        idle = kind(wl) == "idle"
        m = "rss_per_conn_kib" if idle else "req_per_cpu_s"
        cell = lambda name: servers[name][m] if name in servers else None
        names = [weft_server(wl, b) if b in ("uring", "epoll") else b for _, b in COLUMNS]
        weft = cell(names[1])  # epoll, the default backend
        w("| %s | %s | %s | %s | %s |" % (
            wl, " | ".join(io.fmt(cell(n), 2 if idle else 0) +
                           (resumed_note(runs, wl, n) if cell(n) is not None else "")
                           for n in names),
            io.ratio(weft, io.best(servers, PEERS, m, lower=idle)),
            io.ratio(weft, io.best(servers, OPENSSL_PEERS, m, lower=idle)),
            io.ratio(weft, cell("nginx"))))
    w("")


def servers_checked(w, checks):
    w("## Servers")
    w("")
    w("Each server was checked once per protocol before the runs (curl or python's ssl with "
      "the run's certificate verified, and `openssl s_client` for what was negotiated); a "
      "server that failed was not measured.")
    w("")
    w("| server | protocol | check | negotiated (protocol, cipher suite, group, signature), or why it failed |")
    w("|---|---|---|---|")
    for name, protocol, result, outcome in checks:
        w("| %s | %s | %s | %s |" % (name, protocol, result, outcome.replace("|", "\\|")))
    w("")


def charts(table, images, out_dir):
    """docs/images/tls-*.svg."""
    plots = (
        ("tls-req-per-cpu.svg", "req_per_cpu_s",
         "requests (handshake: connections) per server CPU-second (higher is better)",
         lambda w: kind(w) != "idle"),
        ("tls-p99.svg", "p99_us", "p99 latency, µs (lower is better)", lambda w: kind(w) != "idle"),
        ("tls-idle.svg", None, "RSS per idle TLS connection, KiB (lower is better)",
         lambda w: kind(w) == "idle"),
    )
    color = lambda s: "#d95f02" if s.startswith("weft") else "#1b9e77" if s == "nginx" else "#7570b3"
    return io.bar_charts(table, images, out_dir, plots, (workload_order, server_order), color,
                         "purple: Go/tokio/Asio, green: nginx, orange: weft", "weft-tls")


def report(a):
    runs, notes = io.load_results(a.results)
    table = io.summarize(runs)
    out_dir = os.path.dirname(os.path.abspath(a.out))
    images = charts(table, a.images, out_dir)

    md = []
    w = md.append
    io.header(w, a, runs, "TLS benchmarks: weft's TLS servers against nginx, Go, tokio and Asio",
              "tls")
    if a.repetitions < 3 or float(a.duration) < 2:
        w("**A smoke run** (%d repetition%s of %s s): it shows that every server builds, "
          "serves and is measured, not how they compare." % (
              a.repetitions, "" if a.repetitions == 1 else "s", a.duration))
        w("")
    w("## Method")
    w("")
    w("The servers, each a separate process listening on 127.0.0.1 with one thread: "
      "**weft-https-uring** and **weft-https-epoll** are `examples/https_hello` (HTTPS "
      "workloads, handshakes, idle), **weft-echo-uring** and **weft-echo-epoll** "
      "`examples/tls_echo_server` (echo), with `WEFT_IO_BACKEND=io_uring` and `=epoll`, both "
      "on weft::TlsStream and the system's OpenSSL; **nginx** (HTTPS only) is Debian's "
      "nginx-light, one worker, `return 200 \"hello\"`, the same OpenSSL; **go** is "
      "`crypto/tls` with a goroutine per connection; **tokio** is tokio-rustls (rustls on "
      "its ring provider) on the current_thread runtime, **tokio-openssl** the same program "
      "with tokio-openssl on the system's OpenSSL; **asio** is standalone Asio's "
      "`ssl::stream` with C++20 coroutines on one `io_context` (epoll), the same OpenSSL. "
      "nginx, tokio-openssl, Asio and weft share one OpenSSL, so that between them the "
      "runtime is what differs. Sources: `benchmark/io/peers/` "
      "(BENCH_TLS_CERT and BENCH_TLS_KEY turn TLS on). Each keeps its library's defaults "
      "(versions, session tickets sent after a handshake); the HTTP servers other than nginx "
      "answer each request with the same fixed 5-byte body.")
    w("")
    w("TLS: one ECDSA P-256 key and self-signed certificate, made for the run with the "
      "`openssl` command, for every server. Every client speaks TLS 1.3 with "
      "TLS_AES_128_GCM_SHA256 and X25519 only (wrk and `openssl s_client` through an "
      "OPENSSL_CONF the script writes; `benchmark/io/loadgen -tls` by its configuration) "
      "and, but in handshake-resumed, resumes no session, so each connection makes a full "
      "handshake, signed with ECDSA P-256. The check below confirms what each server "
      "negotiated.")
    w("")
    w("Each run starts a fresh server pinned with `taskset` to CPU %s and the client "
      "pinned to CPU %s. HTTPS uses `wrk -t1 --latency` after a warm-up run of the same "
      "shape; wrk opens its connections anew for the measured run, so their handshakes "
      "(at 400 connections, 400 of them) fall inside the measured window. Echo, handshakes "
      "and idle use `benchmark/io/loadgen` (Go crypto/tls; the server's certificate is not "
      "verified by it). A handshake costs the client about as much as the server, so the "
      "one client CPU can limit conn/s there: compare handshakes per server CPU-second. The server's CPU time is utime+stime of its processes (from "
      "`/proc/<pid>/stat`, 10 ms resolution) over the measured window, so *req/CPU-s* = "
      "requests / server CPU seconds: the figure least disturbed by the client sharing the "
      "machine. Idle: RSS per connection = (VmRSS with all connections idle - VmRSS before "
      "they were opened) / connections (`https_hello` drops a connection idle for 10 s; "
      "*still open* says whether any was dropped). Repetitions are interleaved (the server "
      "order rotates and reverses each repetition); tables show medians of the runs that "
      "succeeded. The machine has 2 cores: expect noise of tens of percent between runs." %
      (a.server_cpus, a.client_cpus))
    w("")
    summary(w, table, runs)
    servers_checked(w, read_checks(a.results))
    io.chart_links(w, images)
    for wl in workload_order(table):
        servers = table[wl]
        w("## %s" % wl)
        w("")
        w(describe(wl) + ".")
        w("")
        if kind(wl) == "idle":
            io.idle_table(w, servers, server_order(servers))
        else:
            io.throughput_table(w, servers, server_order(servers), REFS,
                                "conn" if kind(wl) == "handshake" else "req")
        shares = [(n, resumed_share(runs, wl, n)) for n in server_order(servers)]
        shares = [(n, v) for n, v in shares if v is not None]
        if shares:
            w("")
            w("Resumed: %s." % ", ".join("%s %.0f %%" % (n, 100 * v) for n, v in shares))
        negotiated = sorted({r["tls"] for r in runs if r["workload"] == wl and r.get("tls")})
        if negotiated:
            w("")
            w("Negotiated by loadgen's connections: %s." % ", ".join(negotiated))
        w("")
    io.notes_section(w, notes, runs, {wl: i for i, wl in enumerate(workload_order(table))})
    io.write(a, md, images, runs)


if __name__ == "__main__":
    io.main(report, __doc__)
