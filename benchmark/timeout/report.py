#!/usr/bin/env python3
"""Summarises benchmark/timeout/run.sh: what a time limit costs in weft, tokio and Go.

Input: one directory per run of the script (--run DIR, repeatable, oldest first; the last
is the run reported in full), each holding <side>.r<k>.json (Google Benchmark-style JSON
from one run of one side's program in round k; sides weft-io_uring, weft-epoll, tokio, go)
and meta.json (date, load average, pinning, seconds per case).

For each case and side: the median over every repetition of every round of the time per
operation with the limit and without it; the cost of the limit, taken within each round
(the round's median with it minus its median without it: the same process, measured
within a second or two of each other), its median over the rounds and its range. The
machine's load changes from round to round, so a cost is only ever a difference within
one round (the difference of the overall medians can mix rounds). Ratios: weft's cost
over tokio's and over Go's (the issue's target: <= 1.0 x tokio). Prints a plain-text
report; with --doc FILE, also writes the section "## withTimeout cost" of that markdown
file (replacing it, or inserting it before "## Summary", else at the end).
"""

import argparse
import glob
import json
import os
import re
import sys

CASES = ["Ready", "Yield", "TcpPingPong"]
CASE_TEXT = {
    "Ready": "(a) the work completes at once",
    "Yield": "(a') the work suspends once",
    "TcpPingPong": "(b) 1-byte TCP round trip, read under the limit",
}
CASE_LABEL = {"Ready": "(a)", "Yield": "(a')", "TcpPingPong": "(b)"}
SIDES = ["weft-io_uring", "weft-epoll", "tokio", "go"]
SIDE_TEXT = {
    "weft-io_uring": "weft (io_uring)",
    "weft-epoll": "weft (epoll)",
    "tokio": "tokio",
    "go": "Go",
}
# side family -> (name with the limit, name without it), {case} filled in.
NAMES = {
    "weft": ("BM_WithTimeout_{case}", "BM_Baseline_NoTimeout_{case}"),
    "tokio": ("Tokio_Timeout_{case}", "Tokio_NoTimeout_{case}"),
    "go": ("Go_WithTimeout_{case}", "Go_NoTimeout_{case}"),
}
# Other ways to put a limit on the read, measured against the same baseline (informational).
EXTRAS = {
    "weft": [("TcpPingPong", "BM_StreamReadTimeout_TcpPingPong", "`TcpStream::setReadTimeout`")],
    "go": [("TcpPingPong", "Go_ReadDeadline_TcpPingPong", "`conn.SetReadDeadline`")],
}
TARGET_VS_TOKIO = 1.0  # issue #29: withTimeout costs at most what tokio's timeout does


def family(side):
    return side.split("-")[0]


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    if n == 0:
        return None
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def load_run(path):
    """{side: {round: {benchmark name: [real ns per op, one per repetition]}}} and the
    run's meta.json."""
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    data = {}
    for f in sorted(glob.glob(os.path.join(path, "*.r*.json"))):
        m = re.match(r"(.+)\.r(\d+)\.json$", os.path.basename(f))
        if not m:
            continue
        side, rnd = m.group(1), int(m.group(2))
        with open(f) as fh:
            doc = json.load(fh)
        times = {}
        for b in doc.get("benchmarks", []):
            if b.get("run_type", "iteration") != "iteration":
                continue
            if b.get("error_occurred"):
                sys.exit(f"{f}: {b['name']}: {b.get('error_message', 'error')}")
            backend = side.split("-", 1)[1] if side.startswith("weft-") else None
            if backend and b.get("label") and b["label"] != backend:
                sys.exit(f"{f}: {b['name']} ran on {b['label']}, not {backend}")
            name = b.get("run_name", b["name"]).split("/")[0]
            times.setdefault(name, []).append(b["real_time"] * scale[b.get("time_unit", "ns")])
        data.setdefault(side, {})[rnd] = times
    meta = {}
    if os.path.exists(os.path.join(path, "meta.json")):
        with open(os.path.join(path, "meta.json")) as fh:
            meta = json.load(fh)
    return data, meta


def summarise(data):
    """{(side, case or extra name): {'with', 'without', 'cost', 'lo', 'hi', 'n'}}."""
    out = {}
    for side, rounds in data.items():
        fam = family(side)
        rows = [(case, NAMES[fam][0].format(case=case), NAMES[fam][1].format(case=case))
                for case in CASES]
        rows += [(extra, name, NAMES[fam][1].format(case=case))
                 for case, name, _ in EXTRAS.get(fam, []) for extra in [name]]
        for key, with_name, base_name in rows:
            both = [t for t in rounds.values() if with_name in t and base_name in t]
            if not both:
                continue
            with_all = [x for t in both for x in t[with_name]]
            base_all = [x for t in both for x in t[base_name]]
            costs = [median(t[with_name]) - median(t[base_name]) for t in both]
            out[(side, key)] = {
                "with": median(with_all),
                "without": median(base_all),
                "cost": median(costs),
                "lo": min(costs),
                "hi": max(costs),
                "n": len(with_all),
            }
    return out


def fmt_ns(ns):
    if ns is None:
        return "—"
    if abs(ns) >= 10000:
        return f"{ns / 1000:.1f} µs"
    if abs(ns) >= 1000:
        return f"{ns / 1000:.2f} µs"
    return f"{ns:.0f} ns" if abs(ns) >= 100 else f"{ns:.1f} ns"


def ratio(summary, side, other, case):
    a, b = summary.get((side, case)), summary.get((other, case))
    if not a or not b:
        return None
    if b["cost"] <= 0:
        return float("inf")  # the other side's cost is lost in the noise
    return a["cost"] / b["cost"]


def fmt_ratio(r):
    if r is None:
        return "—"
    if r == float("inf"):
        return "∞ (other's cost ≤ 0)"
    return f"{r:.2f} ×"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def text_report(summary, sides, meta):
    lines = []
    lines.append(f"withTimeout cost: {meta.get('rounds', '?')} rounds x {meta.get('repetitions', '?')} "
                 f"repetitions x {meta.get('min_time', '?')} s per case, {meta.get('pin', '?')}, "
                 f"load at start: {meta.get('load', '?')}")
    lines.append(f"{'case':<12} {'side':<48} {'with limit':>11} {'without':>11} {'cost':>11}   "
                 "cost range over rounds")
    for case in CASES:
        for side in sides:
            s = summary.get((side, case))
            if s:
                lines.append(f"{case:<12} {SIDE_TEXT[side]:<48} {fmt_ns(s['with']):>11} "
                             f"{fmt_ns(s['without']):>11} {fmt_ns(s['cost']):>11}   "
                             f"{fmt_ns(s['lo'])} .. {fmt_ns(s['hi'])}")
        for side in sides:
            for extra_case, name, text in EXTRAS.get(family(side), []):
                s = summary.get((side, name))
                if extra_case == case and s:
                    label = f"{SIDE_TEXT[side]}, {text.strip('`')} instead"
                    lines.append(f"{case:<12} {label:<48} "
                                 f"{fmt_ns(s['with']):>11} {fmt_ns(s['without']):>11} "
                                 f"{fmt_ns(s['cost']):>11}   {fmt_ns(s['lo'])} .. {fmt_ns(s['hi'])}")
    lines.append("")
    lines.append("ratios of the cost (median over the rounds of with the limit - without), weft / other:")
    for case in CASES:
        cells = []
        for side in [s for s in sides if s.startswith("weft-")]:
            for other in ("tokio", "go"):
                if other in sides:
                    cells.append(f"{SIDE_TEXT[side]}/{SIDE_TEXT[other]} "
                                 f"{fmt_ratio(ratio(summary, side, other, case))}")
        lines.append(f"  {case:<12} " + "   ".join(cells))
    return "\n".join(lines)


def markdown_section(runs, sides):
    """The "## withTimeout cost" section: the last run in full, every run's ratios."""
    (summary, meta), w = runs[-1], []
    w.append("## withTimeout cost")
    w.append("")
    w.append("Written by `WEFT_TIMEOUT_BENCH_DOC=1 benchmark/timeout/run.sh` (issue #29, item 3; "
             "step 6b of `benchmark/run.sh`, whose report keeps this section as it is). What a time limit "
             "costs around one operation: `weft::withTimeout` "
             "(`benchmark/coro/with_timeout_benchmark.cc`, on a `ThreadPool(1)` worker), "
             "`tokio::time::timeout` (`benchmark/timeout/tokio`, current_thread runtime) and Go's "
             "`context.WithTimeout` (`benchmark/go/with_timeout`, `GOMAXPROCS(1)`), each doing "
             "the same work with a 10 s limit that is never reached. Cases: (a) the work "
             "completes at once (weft: a `Lazy` that returns without suspending; tokio: an "
             "`async fn` that is immediately ready; Go: a `select` on a ready channel and "
             "`ctx.Done()`); (a') the work suspends once (`co_await yield()`, `yield_now()`, "
             "`runtime.Gosched()`), so that the timer is armed and disarmed; (b) a 1-byte TCP "
             "ping-pong over 127.0.0.1 with an echo server in the same thread, the client's "
             "read under the limit (Go: `context.AfterFunc` + `SetReadDeadline`, how a "
             "`net.Conn` read honours a context). In (a) weft arms no timer (withTimeout arms "
             "its timer only once the work has suspended, so work that finishes first never "
             "reads the clock) and tokio registers none (its timer is registered when the work is first "
             "pending); Go arms one in every case. Times are medians over every repetition of "
             "every round. The cost is (time with the limit − time without it) within each "
             "round (each side's two medians of that round), then the median over the rounds; "
             "its range over the rounds shows the noise of the shared machine.")
    w.append("")
    w.append(f"- Date: {meta.get('date', '?')}; weft commit {meta.get('commit', '?')}")
    w.append(f"- CPU: {meta.get('cpu', cpu_model())}; every program pinned with "
             f"`{meta.get('pin', '?')}` (one CPU: weft's timer thread shares it)")
    w.append(f"- {meta.get('rounds', '?')} rounds, each side once per round in an order reversed "
             f"every round, {meta.get('repetitions', '?')} repetitions of "
             f"{meta.get('min_time', '?')} s per case and round; load average at "
             f"the start: {meta.get('load', '?')} (the machine is shared: well above 0 means "
             "other work ran)")
    for tool in ("tokio", "go"):
        if meta.get(tool):
            w.append(f"- {meta[tool]}")
    w.append("")
    w.append("| case | runtime | with the limit | without | cost | cost, range of the rounds |")
    w.append("| --- | --- | ---: | ---: | ---: | ---: |")
    for case in CASES:
        for side in sides:
            s = summary.get((side, case))
            if s:
                w.append(f"| {CASE_TEXT[case]} | {SIDE_TEXT[side]} | {fmt_ns(s['with'])} | "
                         f"{fmt_ns(s['without'])} | **{fmt_ns(s['cost'])}** | "
                         f"{fmt_ns(s['lo'])} – {fmt_ns(s['hi'])} |")
        for side in sides:
            for extra_case, name, text in EXTRAS.get(family(side), []):
                s = summary.get((side, name))
                if extra_case == case and s:
                    w.append(f"| (b) with {text} instead | {SIDE_TEXT[side]} | {fmt_ns(s['with'])} | "
                             f"{fmt_ns(s['without'])} | {fmt_ns(s['cost'])} | "
                             f"{fmt_ns(s['lo'])} – {fmt_ns(s['hi'])} |")
    w.append("")
    weft_sides = [s for s in sides if s.startswith("weft-")]
    others = [o for o in ("tokio", "go") if o in sides]
    if weft_sides and others:
        w.append("Ratios of the cost, weft / other (target, issue #29: ≤ "
                 f"{TARGET_VS_TOKIO:.1f} × tokio):")
        w.append("")
        header = [f"{SIDE_TEXT[s]} / {SIDE_TEXT[o]}" for s in weft_sides for o in others]
        w.append("| case | " + " | ".join(header) + " |")
        w.append("| --- |" + " ---: |" * len(header))
        for case in CASES:
            cells = [fmt_ratio(ratio(summary, s, o, case)) for s in weft_sides for o in others]
            w.append(f"| {CASE_TEXT[case]} | " + " | ".join(cells) + " |")
        w.append("")
        if "tokio" in others:
            missed = [f"{CASE_LABEL[c]} {SIDE_TEXT[s]}" for c in CASES for s in weft_sides
                      if (r := ratio(summary, s, "tokio", c)) is not None and r > TARGET_VS_TOKIO]
            w.append(f"Target ≤ {TARGET_VS_TOKIO:.1f} × tokio: " +
                     ("met in every case." if not missed else "not met in " + ", ".join(missed) + "."))
            w.append("")
    if len(runs) > 1 and weft_sides and others:
        w.append("Every kept run of the script on this machine (run to run spread), cost ratios "
                 f"of {SIDE_TEXT[weft_sides[0]]}:")
        w.append("")
        cols = [(c, o) for c in CASES for o in others]
        w.append("| run | load at start | " +
                 " | ".join(f"{c} / {SIDE_TEXT[o]}" for c, o in cols) + " |")
        w.append("| --- | --- |" + " ---: |" * len(cols))
        for s, m in runs:
            w.append(f"| {m.get('date', '?')} | {m.get('load', '?')} | " +
                     " | ".join(fmt_ratio(ratio(s, weft_sides[0], o, c)) for c, o in cols) + " |")
        w.append("")
    return "\n".join(w)


# A hand-written subsection of "## withTimeout cost" (callgrind instruction counts, which
# this script does not measure): kept, after the regenerated text, when the section is
# rewritten.
KEPT_SUBSECTION = "### Instruction counts (callgrind)"


def write_section(path, section):
    """Replaces "## withTimeout cost" in `path` (up to the next "## "), or inserts it before
    "## Summary" (else at the end). Its KEPT_SUBSECTION, if any, stays at its end."""
    text = open(path).read() if os.path.exists(path) else ""
    lines = text.split("\n")
    start = next((i for i, l in enumerate(lines) if l.strip() == "## withTimeout cost"), None)
    new = section.rstrip("\n").split("\n") + [""]
    if start is not None:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")),
                   len(lines))
        kept = next((i for i in range(start + 1, end) if lines[i].strip() == KEPT_SUBSECTION),
                    None)
        if kept is not None:
            new += lines[kept:end]
        lines[start:end] = new
    else:
        at = next((i for i, l in enumerate(lines) if l.strip() == "## Summary"), len(lines))
        lines[at:at] = new
    with open(path, "w") as fh:
        fh.write("\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", action="append", required=True,
                    help="a run's results directory; repeatable, oldest first, the last reported in full")
    ap.add_argument("--doc", help="markdown file whose 'withTimeout cost' section to write")
    ap.add_argument("--smoke", action="store_true",
                    help="check that every side produced every case; no ratios judged")
    args = ap.parse_args()

    runs = []
    for path in args.run:
        data, meta = load_run(path)
        runs.append((summarise(data), meta))
    data, _ = load_run(args.run[-1])
    sides = [s for s in SIDES if s in data]
    if not sides:
        sys.exit(f"no results in {args.run[-1]}")
    if args.smoke:
        missing = [f"{s} {c}" for s in sides for c in CASES if (s, c) not in runs[-1][0]]
        if missing:
            sys.exit("smoke run: no result for " + ", ".join(missing))
    print(text_report(runs[-1][0], sides, runs[-1][1]))
    if args.doc:
        write_section(args.doc, markdown_section(runs, sides))
        print(f"wrote the 'withTimeout cost' section of {args.doc}")


if __name__ == "__main__":
    main()
