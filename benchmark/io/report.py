#!/usr/bin/env python3
"""The two Python halves of benchmark/io/run.sh.

  report.py record --out RUN.json ...   one run: the client's output (loadgen's JSON line
                                        or wrk's text) and what run.sh saw of the server,
                                        as one JSON object
  report.py report --results DIR ...    every DIR/runs/*.json: medians per workload and
                                        server, ratios, charts -> docs/io-benchmarks.md and
                                        docs/images/io-*.svg

Ratios: each server's median against the best median of the framework peers (Go, Asio,
tokio; nginx is shown but is not a peer of the ratio) and against the better of the two
raw floors (epoll, io_uring), for req/s and for requests per server CPU-second.

benchmark/tls/report.py builds on this file: `record` is the same for its runs, and its
report uses the tables, charts and header below.
"""

import argparse
import datetime
import glob
import json
import os
import platform
import re
import statistics

PEERS = ("go", "asio", "asio-uring", "tokio")
FLOORS = ("epoll", "uring", "uring-multishot")
# Each floor runs twice under two names; the second run is not a floor of the ratios, it
# shows how far two runs of one program differ (the noise of the gaps the ratios report).
FLOOR_AGAIN = {"epoll-again": "epoll", "uring-again": "uring"}


# ---- record ------------------------------------------------------------------------------

def parse_wrk(text):
    """requests/s, p50/p99 (µs), requests, errors from `wrk --latency` output."""
    unit = {"us": 1.0, "ms": 1e3, "s": 1e6}
    r = {}
    m = re.search(r"Requests/sec:\s*([\d.]+)", text)
    if m:
        r["rps"] = float(m.group(1))
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", text)
    if m:
        r["requests"] = int(m.group(1))
        r["seconds"] = float(m.group(2)) * {"us": 1e-6, "ms": 1e-3, "s": 1, "m": 60}[m.group(3)]
    for pct, key in (("50", "p50_us"), ("99", "p99_us")):
        m = re.search(r"^\s*%s(?:\.000)?%%\s+([\d.]+)(us|ms|s)\s*$" % pct, text, re.M)
        if m:
            r[key] = float(m.group(1)) * unit[m.group(2)]
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        r["errors"] = sum(int(x) for x in m.groups())
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    if m:
        r["errors"] = r.get("errors", 0) + int(m.group(1))
    return r


def tail(path, lines=5):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).strip()
    except OSError:
        return ""


def record(a):
    run = {"workload": a.workload, "server": a.server, "repetition": a.repetition,
           "status": a.status, "exit_code": a.exit_code}
    details = [a.detail] if a.detail else []
    text = ""
    if os.path.exists(a.client_output):
        with open(a.client_output, errors="replace") as f:
            text = f.read()
    if a.status == "ok" or text:
        if a.client == "wrk":
            run.update(parse_wrk(text))
            if a.server_cpu:
                run["server_cpu_s"] = float(a.server_cpu)
            if "rps" not in run and a.status == "ok":
                run["status"] = "client-failed"
                details.append("no Requests/sec in wrk's output")
        else:
            lines = [l for l in text.splitlines() if l.startswith("{")]
            if lines:
                run.update(json.loads(lines[-1]))
            elif a.status == "ok":
                run["status"] = "client-failed"
                details.append("no JSON from loadgen")
    if run.get("errors"):
        details.append("%d client errors%s" % (
            run["errors"], (": " + run["first_error"]) if run.get("first_error") else ""))
    if run.get("mode") == "idle" and run.get("still_open", 0) < run.get("conns", 0):
        details.append("the server closed %d of %d idle connections" % (
            run["conns"] - run["still_open"], run["conns"]))
    if run.get("requests") and run.get("server_cpu_s"):
        run["req_per_cpu_s"] = run["requests"] / run["server_cpu_s"]
    if run.get("bytes") and run.get("server_cpu_s"):
        run["mb_per_cpu_s"] = run["bytes"] / 1e6 / run["server_cpu_s"]
    if run.get("mode") == "idle" and run.get("conns") and "rss_idle_kib" in run:
        run["rss_per_conn_kib"] = (run["rss_idle_kib"] - run["rss_before_kib"]) / run["conns"]
    if run["status"] != "ok":
        details.append("server log: " + (tail(a.log) or "(empty)"))
        details.append("client: " + (tail(a.client_log) or tail(a.client_output) or "(nothing)"))
    run["detail"] = "; ".join(details)
    with open(a.out, "w") as f:
        json.dump(run, f)
        f.write("\n")


# ---- report ------------------------------------------------------------------------------

def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=0):
    if v is None:
        return "–"
    if digits == 0:
        return f"{v:,.0f}"
    return f"{v:,.{digits}f}"


def ratio(v, ref):
    if v is None or not ref:
        return "–"
    return f"{v / ref:.2f}"


def machine():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return cpu, platform.release(), os.cpu_count()


def summarize(runs):
    """{workload: {server: {metric: median, 'ok': n, 'total': n}}} over the ok runs."""
    table = {}
    for r in runs:
        cell = table.setdefault(r["workload"], {}).setdefault(
            r["server"], {"ok": 0, "total": 0, "_runs": []})
        cell["total"] += 1
        if r["status"] == "ok":
            cell["ok"] += 1
            cell["_runs"].append(r)
    metrics = ("rps", "req_per_cpu_s", "p50_us", "p99_us", "mb_per_s", "mb_per_cpu_s",
               "server_cpu_s", "rss_per_conn_kib", "still_open", "conns", "rss_idle_kib")
    for servers in table.values():
        for cell in servers.values():
            for m in metrics:
                cell[m] = median([r.get(m) for r in cell["_runs"]])
    return table


def run_range(cell, metric):
    """The lowest and highest of a cell's runs, relative to their median: "-3 %/+2 %"."""
    values = [r.get(metric) for r in cell["_runs"] if r.get(metric)]
    m = median(values)
    if not values or not m:
        return "-"
    return "%+.0f %%/%+.0f %%" % (100 * (min(values) / m - 1), 100 * (max(values) / m - 1))


def best(servers, names, metric, lower=False):
    values = [servers[n][metric] for n in names if n in servers and servers[n][metric]]
    if not values:
        return None
    return min(values) if lower else max(values)


def server_order(names):
    rank = {n: i for i, n in enumerate(FLOORS + tuple(FLOOR_AGAIN) + PEERS + ("nginx",))}
    return sorted(names, key=lambda n: (rank.get(n, 100), n))


def workload_order(names):
    def key(n):
        kind = 0 if n.startswith("echo") else 1 if n.startswith("stream") else \
            2 if n.startswith("http") else 3
        return (n.endswith("-t2"), kind, [int(x) if x.isdigit() else x
                                         for x in re.split(r"(\d+)", n)])
    return sorted(names, key=key)


def describe(workload):
    m = re.match(r"echo-(\d+)B-c(\d+)(-t2)?$", workload)
    if m:
        return "echo ping-pong, %s-byte messages, %s connection%s%s" % (
            m.group(1), m.group(2), "" if m.group(2) == "1" else "s",
            ", WEFT_THREADS=2" if m.group(3) else "")
    m = re.match(r"stream-c(\d+)$", workload)
    if m:
        return ("streaming echo, %s connections, 64 KiB writes and reads, at most 256 KiB in "
                "flight per connection" % m.group(1))
    m = re.match(r"http-c(\d+)(-t2)?$", workload)
    if m:
        return "HTTP/1.1 keep-alive hello, wrk -t1 -c%s%s" % (
            m.group(1), ", WEFT_THREADS=2" if m.group(2) else "")
    m = re.match(r"idle-c(\d+)$", workload)
    if m:
        return "%s idle connections (one 64-byte echo each), READ_TIMEOUT_MS=120000" % m.group(1)
    return workload


def bar_charts(table, images, out_dir, plots, order, color, legend, salt):
    """SVG small multiples: one panel per workload, one bar per server. Returns the files.

    plots: (file name, metric or None (per workload: MB/CPU-s for stream-*, RSS per
    connection otherwise), title, which workloads); order(workloads) and order(servers)
    sort; color(server) colours a bar; legend follows the title; salt keeps the SVG ids
    stable from one run to the next."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        matplotlib.rcParams["svg.hashsalt"] = salt  # stable ids: small diffs between runs
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    os.makedirs(images, exist_ok=True)
    written = []
    for filename, metric, title, keep in plots:
        workloads = [w for w in order[0](table) if keep(w)]
        if not workloads:
            continue
        cols = 3 if len(workloads) > 2 else len(workloads)
        rows = (len(workloads) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 0.3 * 14 * rows + 0.6),
                                 squeeze=False)
        for ax in axes.flat[len(workloads):]:
            ax.axis("off")
        for ax, w in zip(axes.flat, workloads):
            m = metric or ("mb_per_cpu_s" if w.startswith("stream") else "rss_per_conn_kib")
            names = [s for s in order[1](table[w]) if table[w][s][m] is not None]
            values = [table[w][s][m] for s in names]
            ax.barh(range(len(names)), values, color=[color(s) for s in names])
            ax.set_yticks(range(len(names)))
            ax.set_yticklabels(names, fontsize=8)
            ax.invert_yaxis()
            ax.tick_params(axis="x", labelsize=7)
            unit = {"mb_per_cpu_s": " (MB per CPU-s)", "rss_per_conn_kib": " (KiB RSS per conn)"}
            ax.set_title(w + unit.get(m, ""), fontsize=9)
            for i, v in enumerate(values):
                ax.text(v, i, " " + fmt(v, 1 if v < 100 else 0), va="center", fontsize=7)
            ax.margins(x=0.25)
        fig.suptitle(title + " — " + legend, fontsize=10)
        fig.tight_layout(rect=(0, 0, 1, 0.97))  # room for the suptitle
        path = os.path.join(images, filename)
        fig.savefig(path, format="svg", metadata={"Date": None})
        plt.close(fig)
        written.append(os.path.relpath(path, out_dir))
    return written


def charts(table, images, out_dir):
    """benchmark/io's charts: docs/images/io-*.svg."""
    plots = (
        ("io-req-per-cpu.svg", "req_per_cpu_s", "requests per server CPU-second (higher is better)",
         lambda w: not w.startswith(("idle", "stream"))),
        ("io-p99.svg", "p99_us", "p99 latency, µs (lower is better)",
         lambda w: not w.startswith(("idle", "stream"))),
        ("io-stream-idle.svg", None, "streaming MB per server CPU-second; RSS per idle connection",
         lambda w: w.startswith(("idle", "stream"))),
    )
    color = lambda s: "#888888" if s in FLOORS or s in FLOOR_AGAIN else \
        "#d95f02" if s.startswith("weft") else "#1b9e77" if s == "nginx" else "#7570b3"
    return bar_charts(table, images, out_dir, plots, (workload_order, server_order), color,
                      "grey: raw floors, purple: Go/Asio/tokio, green: nginx, orange: weft",
                      "weft-io")


def floor_spread(servers, metric):
    """[(floor, second run's median, first run's median)] for the floors run twice."""
    out = []
    for again, floor in FLOOR_AGAIN.items():
        if again in servers and floor in servers and servers[again][metric] \
                and servers[floor][metric]:
            out.append((floor, servers[again][metric], servers[floor][metric]))
    return out


def targets(table, w):
    """The issue's yardsticks, one row per throughput workload: weft's servers on each
    backend against the best peer, the better floor and nginx, their p99 latency against
    the best peer's, and the fibers against the Lazys, per server CPU-second, beside the
    floors' own run-to-run spread."""
    rows = [wl for wl in workload_order(table) if wl.startswith(("echo", "http"))]
    if not rows:
        return
    w("## Targets")
    w("")
    w("Per server CPU-second (medians). *weft* is `examples/echo_server` (echo) or "
      "`examples/http_hello` (HTTP) on epoll (the default backend) and on io_uring; "
      "*best peer* is the best of Go, Asio (either build) and tokio; *floor* the better of "
      "the raw epoll and io_uring loops; *p99* divides weft's p99 latency by the lowest "
      "p99 among the peers (below 1 is better); *fiber/Lazy* compares `fiber_echo_server` "
      "with `echo_server` on the same backend; *floor spread* is the larger gap between "
      "the two runs of one floor (how much a ratio can move by noise alone).")
    w("")
    w("| workload | epoll: vs best peer | vs floor | vs nginx | p99 | "
      "io_uring: vs best peer | vs floor | vs nginx | p99 | "
      "fiber/Lazy epoll | fiber/Lazy io_uring | floor spread |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|")
    m = "req_per_cpu_s"
    for wl in rows:
        servers = table[wl]
        http = wl.startswith("http")
        value = lambda c, key=m: c[key] if c else None
        pc = best(servers, PEERS, m)
        fc = best(servers, FLOORS, m)
        p99 = best(servers, PEERS, "p99_us", lower=True)
        nginx = value(servers.get("nginx"))
        lazy = {b: servers.get("weft-%s-%s" % ("http" if http else "lazy", b))
                for b in ("epoll", "uring")}
        cells = []
        for b in ("epoll", "uring"):
            cells += [ratio(value(lazy[b]), pc), ratio(value(lazy[b]), fc),
                      ratio(value(lazy[b]), nginx) if http else "",
                      ratio(value(lazy[b], "p99_us"), p99)]
        for b in ("epoll", "uring"):
            fiber = servers.get("weft-fiber-%s" % b)
            cells.append("" if http else ratio(value(fiber), value(lazy[b])))
        spread = [abs(a / b - 1) for _, a, b in floor_spread(servers, m)]
        cells.append(("%.0f %%" % (100 * max(spread))) if spread else "")
        w("| %s | %s |" % (wl, " | ".join(cells)))
    w("")


def load_results(results):
    """(runs, notes) of a results folder: every runs/*.json, and notes.tsv's lines as
    [who, text]."""
    runs = []
    for path in sorted(glob.glob(os.path.join(results, "runs", "*.json"))):
        with open(path) as f:
            runs.append(json.load(f))
    notes = []
    notes_path = os.path.join(results, "notes.tsv")
    if os.path.exists(notes_path):
        with open(notes_path) as f:
            notes = [line.rstrip("\n").split("\t", 1) for line in f if "\t" in line]
    return runs, notes


def header(w, a, runs, title, script):
    """The report's title, what generated it and when, and the machine and run table."""
    cpu, kernel, ncpu = machine()
    w("# " + title)
    w("")
    times = [os.path.getmtime(p) for p in glob.glob(os.path.join(a.results, "runs", "*.json"))]
    utc = lambda t: datetime.datetime.fromtimestamp(t, datetime.timezone.utc)
    when = ("runs from %s to %s UTC" % (utc(min(times)).strftime("%Y-%m-%d %H:%M"),
                                         utc(max(times)).strftime("%H:%M"))) if times else "no runs"
    w("Generated by `benchmark/%s/run.sh` (`benchmark/%s/report.py`), %s. Raw results: "
      "`build/%s-bench-results/`." % (script, script, when, script))
    w("")
    w("| | |")
    w("|---|---|")
    w("| CPU | %s, %d logical CPUs |" % (cpu, ncpu or 0))
    w("| kernel | %s |" % kernel)
    w("| load average at start | %s |" % a.load)
    if a.load_end:
        w("| load average at the end | %s |" % a.load_end)
    if a.steal:
        w("| CPU time stolen by the hypervisor during the runs | %s s |" % a.steal)
    w("| runs | %d repetitions (idle: %d), %s s warm-up + %s s measured each (idle: %s s idle), "
      "%d runs in %d min |" % (a.repetitions, a.idle_repetitions or a.repetitions, a.warmup,
                              a.duration, a.duration, len(runs),
                              int(a.measure_seconds) // 60))
    w("| weft build | `%s` |" % a.weft_build)
    w("")


def chart_links(w, images):
    """A "Charts" section showing each image, if there are any."""
    if images:
        w("## Charts")
        w("")
        for img in images:
            w("![%s](%s)" % (os.path.splitext(os.path.basename(img))[0], img))
            w("")


def idle_table(w, servers, names):
    """The idle workload's table: connections still open, RSS, RSS per connection."""
    w("| server | runs ok | still open | RSS idle, MiB | RSS per connection, KiB "
      "| server CPU while idle, s |")
    w("|---|---|---|---|---|---|")
    for s in names:
        c = servers[s]
        rss = c["rss_idle_kib"] / 1024 if c["rss_idle_kib"] is not None else None
        w("| %s | %d/%d | %s | %s | %s | %s |" % (
            s, c["ok"], c["total"], fmt(c["still_open"]), fmt(rss, 1),
            fmt(c["rss_per_conn_kib"], 2), fmt(c["server_cpu_s"], 2)))


def throughput_table(w, servers, names, refs, unit="req"):
    """A request workload's table: req/s, req per server CPU-second, latency, and each
    against refs, [(label, server names)]: the best median among those servers."""
    w("| server | runs ok | %s/s | %s/CPU-s | p50, µs | p99, µs | " % (unit, unit) +
      " | ".join("%s/s vs %s" % (unit, label) for label, _ in refs) + " | " +
      " | ".join("%s/CPU-s vs %s" % (unit, label) for label, _ in refs) + " |")
    w("|---|---|---|---|---|---|" + "---|" * (2 * len(refs)))
    rps = [best(servers, ref, "rps") for _, ref in refs]
    cpu = [best(servers, ref, "req_per_cpu_s") for _, ref in refs]
    for s in names:
        c = servers[s]
        w("| %s | %d/%d | %s | %s | %s | %s | %s | %s |" % (
            s, c["ok"], c["total"], fmt(c["rps"]), fmt(c["req_per_cpu_s"]),
            fmt(c["p50_us"], 1), fmt(c["p99_us"], 1),
            " | ".join(ratio(c["rps"], r) for r in rps),
            " | ".join(ratio(c["req_per_cpu_s"], r) for r in cpu)))


def notes_section(w, notes, runs, order):
    """Notes, failed runs and runs with details, by workload order."""
    failures = sorted((r for r in runs if r["status"] != "ok" or r.get("detail")),
                      key=lambda r: (order.get(r["workload"], 0), r["server"], r["repetition"]))
    w("## Failures, skipped servers and notes")
    w("")
    if not notes and not failures:
        w("None: every server listed ran every workload of its protocol, and every run "
          "succeeded.")
    for who, text in notes:
        w("- **%s**: %s" % (who if who != "-" else "harness", text))
    for r in failures:
        w("- **%s**, %s, repetition %s: %s%s" % (
            r["server"], r["workload"], r["repetition"], r["status"],
            (" — " + r["detail"].replace("\n", " ").replace("|", "\\|")) if r.get("detail")
            else ""))
    w("")


def write(a, md, images, runs):
    with open(a.out, "w") as f:
        f.write("\n".join(md))
    print("wrote %s (%d runs)%s" % (a.out, len(runs),
                                    "".join(", " + i for i in images)))


def report(a):
    runs, notes = load_results(a.results)
    table = summarize(runs)
    out_dir = os.path.dirname(os.path.abspath(a.out))
    images = charts(table, a.images, out_dir)

    md = []
    w = md.append
    header(w, a, runs, "I/O benchmarks: weft's servers against real peers", "io")
    w("## Method")
    w("")
    w("Every server is a separate program taking its port as only argument, listening on "
      "127.0.0.1, with its threads from `WEFT_THREADS` and its protocol from `BENCH_PROTOCOL` "
      "(sources in `benchmark/io/peers/`): **epoll** and **uring** are the raw floors (plain "
      "C++, one state machine per connection, no coroutines; uring uses multishot accept and "
      "a provided-buffer ring); **go** is Go `net` with a goroutine per connection; **asio** "
      "is standalone Asio with C++20 awaitables (**asio-uring**: the same source built with "
      "`-DASIO_HAS_IO_URING -DASIO_DISABLE_EPOLL`); **tokio** uses the current_thread runtime "
      "at one thread, the multi-thread runtime otherwise; **nginx** (HTTP only) runs "
      "`return 200 \"hello\"` with `WEFT_THREADS` workers. The HTTP servers other than nginx "
      "parse requests up to `\\r\\n\\r\\n` and answer each with a fixed 5-byte body. "
      "The weft rows are `examples/echo_server` (Lazy), `examples/fiber_echo_server` and "
      "`examples/http_hello`, each with `WEFT_IO_BACKEND=io_uring` and `=epoll`.")
    w("")
    w("Each run starts a fresh server pinned with `taskset` to CPU %s (the 2-thread "
      "variants, `-t2`: CPUs 0-1) and the client pinned to CPU %s. Echo workloads use "
      "`benchmark/io/loadgen` (Go): ping-pong connections each send a message and wait for "
      "its whole echo before the next; latency is per round trip. HTTP uses `wrk -t1 "
      "--latency` after a warm-up run of the same shape. The server's CPU time is "
      "utime+stime of its processes (from `/proc/<pid>/stat`, 10 ms resolution) over the "
      "measured window, so *req/CPU-s* = requests / server CPU seconds: the figure least "
      "disturbed by the client sharing the machine. Idle: RSS per connection = (VmRSS with "
      "all connections idle - VmRSS before they were opened) / connections. Repetitions are "
      "interleaved (the server order rotates and reverses each repetition); tables show "
      "medians of the runs that succeeded. In the `-t2` variants the client shares CPU %s "
      "with the server, so req/s there is a lower bound. The machine has 2 cores and is "
      "shared: expect noise of tens of percent between runs." %
      (a.server_cpus, a.client_cpus, a.client_cpus))
    w("")
    w("Notes on the peers. The floors read into one 64 KiB buffer per thread (epoll) or a "
      "provided-buffer ring (uring: the pages of the ring's buffers that were ever used count "
      "in its RSS), so an idle connection owns almost nothing; the epoll floor keeps no "
      "timer (READ_TIMEOUT_MS is ignored there), the uring floor links an "
      "IORING_OP_LINK_TIMEOUT to each read. Asio 1.22 builds with `-DASIO_HAS_IO_URING "
      "-DASIO_DISABLE_EPOLL`; while the harness was written (Asio 1.22.1, kernel 6.18), "
      "its read timeouts (a steady_timer raced with the read by `||`) fired late with "
      "thousands of connections: with READ_TIMEOUT_MS=1000 and 5,000 connections, 2,479 "
      "and 1,434 (two runs) were still open 2.5 s or more after their only message (0 with "
      "the epoll build), and with 10,000 connections the echo of the first message on each "
      "stalled for over 90 s (the epoll build closes them on time). The benchmark's "
      "120 s timeout never expires within a run, so the tables are not affected.")
    w("")
    w("Ratio columns: the server's median divided by the best median among Go, Asio "
      "(either build) and tokio (*vs peers*), and by the better of the two raw floors "
      "(*vs floor*); above 1 is better than them for throughput. **epoll-again** and "
      "**uring-again** are the floors run a second time (interleaved like every server): "
      "the gap between a floor and its second run is the noise of this run, quoted under "
      "each table.")
    w("")
    targets(table, w)
    chart_links(w, images)

    for wl in workload_order(table):
        servers = table[wl]
        names = server_order(servers)
        w("## %s" % wl)
        w("")
        w(describe(wl) + ".")
        w("")
        if wl.startswith("idle"):
            idle_table(w, servers, names)
        elif wl.startswith("stream"):
            pb = best(servers, PEERS, "mb_per_s")
            fb = best(servers, FLOORS, "mb_per_s")
            pc = best(servers, PEERS, "mb_per_cpu_s")
            fc = best(servers, FLOORS, "mb_per_cpu_s")
            w("| server | runs ok | MB/s | MB per server CPU-s | its runs' range | MB/s vs peers "
              "| MB/s vs floor | MB/CPU-s vs peers | MB/CPU-s vs floor |")
            w("|---|---|---|---|---|---|---|---|---|")
            for s in names:
                c = servers[s]
                w("| %s | %d/%d | %s | %s | %s | %s | %s | %s | %s |" % (
                    s, c["ok"], c["total"], fmt(c["mb_per_s"]), fmt(c["mb_per_cpu_s"]),
                    run_range(c, "mb_per_cpu_s"),
                    ratio(c["mb_per_s"], pb), ratio(c["mb_per_s"], fb),
                    ratio(c["mb_per_cpu_s"], pc), ratio(c["mb_per_cpu_s"], fc)))
        else:
            throughput_table(w, servers, names, [("peers", PEERS), ("floor", FLOORS)])
        spread = floor_spread(servers, "mb_per_cpu_s" if wl.startswith("stream")
                              else "req_per_cpu_s")
        if spread:
            w("")
            w("Noise: each floor run twice, per server CPU-second: " + "; ".join(
                "%s %s" % (f, ratio(a, b)) for f, a, b in spread) +
              " (second run / first).")
        w("")

    notes_section(w, notes, runs, {wl: i for i, wl in enumerate(workload_order(table))})
    write(a, md, images, runs)


def main(report_fn=None, doc=__doc__):
    """The command line: `record` (one run) and `report` (report_fn, default io's)."""
    p = argparse.ArgumentParser(description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record")
    for flag in ("out", "workload", "server", "client", "client-output", "status", "log"):
        r.add_argument("--" + flag, required=True)
    r.add_argument("--repetition", type=int, required=True)
    r.add_argument("--server-cpu", default="")
    r.add_argument("--client-log", default="")
    r.add_argument("--detail", default="")
    r.add_argument("--exit-code", default="")
    g = sub.add_parser("report")
    g.add_argument("--results", required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--images", required=True)
    g.add_argument("--load", default="?")
    g.add_argument("--load-end", default="")
    g.add_argument("--steal", default="")
    g.add_argument("--repetitions", type=int, default=0)
    g.add_argument("--idle-repetitions", type=int, default=0)
    g.add_argument("--duration", default="?")
    g.add_argument("--warmup", default="?")
    g.add_argument("--weft-build", default="?")
    g.add_argument("--server-cpus", default="0")
    g.add_argument("--client-cpus", default="1")
    g.add_argument("--measure-seconds", type=float, default=0)
    a = p.parse_args()
    record(a) if a.command == "record" else (report_fn or report)(a)


if __name__ == "__main__":
    main()
