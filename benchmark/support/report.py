#!/usr/bin/env python3
"""Writes docs/performance.md from the results benchmark/run.sh collected.

Input (--results DIR):
  <label>.<module>_<unit>.json   Google Benchmark JSON (--benchmark_repetitions, aggregates
                                 only), label = gcc | clang | gcc-alt
  <label>.<module>_<unit>.txt    "name value" lines printed by a *_memory program

Ratios: BM_<Unit>_<Case> is compared with BM_Baseline_<Kind>_<Case> from the same binary
(plus the explicit pairs in EXTRA_BASELINES). Single-threaded benchmarks are compared on
median CPU time (robust to the scheduler); benchmarks registered with UseRealTime() (their
work runs on other threads) on median wall time.
"""

import argparse
import datetime
import glob
import json
import math
import os
import platform
import re
import subprocess

# Issue #2's and #17's targets: weft benchmark -> maximum ratio to its baseline. "No
# slower" (inFiber against spawnFiber) allows the 5 % this machine's noise moves a median.
TARGETS = {
    "BM_Lazy_Chain1000": 1.25,
    "BM_Lazy_CollectAll5000x50": 1.25,
    "BM_Lazy_RecursiveChain1000": 1.25,
    "BM_TaskGroup_SpawnJoin": 1.5,
    "BM_InFiber_AwaitFromLazy": 1.05,
}
MEMORY_TARGET_BYTES = 128.0
# Pairs the generic rule cannot find (informational: no target).
EXTRA_BASELINES = {
    "BM_Task_CollectAllPara5000x50": "BM_Baseline_BareTask_CollectAll5000x50",
    "BM_TaskGroup_SpawnJoin": "BM_CollectAllPara",
    "BM_TaskGroup_SpawnNext": "BM_CollectAllPara",
    "BM_CollectAll": "BM_CollectAllPara",
    "BM_InFiber_AwaitFromLazy": "BM_SpawnFiber_AwaitFromLazy",
}
COMPILER_LABELS = {"gcc": "g++", "clang": "clang++"}

# Issue #3's targets (stackful fibers): absolute times, and bytes per parked fiber on a
# shared stack (benchmark/stackful/fiber_memory).
FIBER_TIME_TARGETS_NS = {"BM_Fiber_CreateRunDestroy": 100.0}
FIBER_MEMORY_TARGET_BYTES = 300.0
# Go comparison (programs in benchmark/go/<name>/, results labelled "go"): C++ benchmark
# -> (Go benchmark, maximum ratio C++ / Go, or None for information only). Go benchmarks
# not named here are listed on their own.
GO_BASELINES = {
    "BM_Fiber_YieldViaExecutor": ("Go_Gosched_PingPong", 0.25),
    "BM_Baseline_Lazy_YieldViaExecutor": ("Go_Gosched_PingPong", None),
    "BM_Fiber_CreateRunDestroy": ("Go_Goroutine_SpawnRun", None),
    # Issue #4: channels (benchmark/coro/channel_benchmark.cc vs benchmark/go/channel_*).
    "BM_Channel_PingPong": ("Go_Channel_PingPong", 0.25),
    "BM_FiberChannel_PingPong": ("Go_Channel_PingPong", 0.25),
    "BM_Select_PingPong": ("Go_Channel_PingPong", None),
    "BM_Channel_EchoRing30000": ("Go_Channel_EchoRing30000", 0.25),
    "BM_FiberChannel_EchoRing30000": ("Go_Channel_EchoRing30000", 0.25),
}
# benchmark/go/with_timeout's results: run.sh runs every Go program, but these are read
# against weft and tokio by benchmark/timeout/run.sh, in the section below.
TIMEOUT_GO_PREFIXES = ("Go_WithTimeout_", "Go_NoTimeout_", "Go_ReadDeadline_")
# The section benchmark/timeout/run.sh writes (WEFT_TIMEOUT_BENCH_DOC=1): kept as it is
# when this report is rewritten.
KEPT_SECTION = "## withTimeout cost"
# A section written by hand from interleaved old/new runs (issue #29's timer change): kept
# as it is too.
KEPT_TIMERS_SECTION = "## Timers in the workers (issue #29)"
# A subsection of the I/O section written by hand (issue #29's frame-free writeAll): kept
# as it is too (it runs up to the next "## " heading).
KEPT_IO_SECTION = "### `writeAll` and `readExactly` without a coroutine frame (issue #29)"


# The TLS section: a pointer to the report benchmark/tls/run.sh writes (step 7b).
TLS_SECTION = [
    "## TLS (issue #30)",
    "",
    "weft's HTTPS and TLS echo servers (`examples/https_hello`, `examples/tls_echo_server`) "
    "against nginx, Go `crypto/tls`, tokio (tokio-rustls and tokio-openssl) and Asio "
    "`ssl::stream`: HTTPS keep-alive, TLS echo, full and resumed handshakes per server "
    "CPU-second and RSS per idle TLS connection, with ratios and charts, are in "
    "[tls-benchmarks.md](tls-benchmarks.md), written by `benchmark/tls/run.sh` (step 7b of "
    "`benchmark/run.sh`).",
    "",
    "![TLS requests per server CPU-second](images/tls-req-per-cpu.svg)",
    "",
]


def kept_section(path, heading=KEPT_SECTION):
    """The lines of the section `heading` in the existing report at `path` (up to the next
    "## " heading), or [] when there is none."""
    try:
        with open(path) as f:
            lines = f.read().split("\n")
    except OSError:
        return []
    start = next((i for i, l in enumerate(lines) if l.strip() == heading), None)
    if start is None:
        return []
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    section = lines[start:end]
    while section and not section[-1].strip():
        section.pop()
    return section + [""]


def base_name(run_name):
    """'BM_X/real_time' -> 'BM_X' (the name without Google Benchmark's suffixes)."""
    return run_name.split("/")[0]


def case_of(name):
    """BM_<Unit>_<Case> -> <Case>; BM_Baseline_<Kind>_<Case> -> <Case>."""
    parts = base_name(name).split("_")
    if len(parts) >= 4 and parts[1] == "Baseline":
        return "_".join(parts[3:])
    return "_".join(parts[2:]) if len(parts) >= 3 else None


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return None if n == 0 else (xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2)


def cv(xs):
    if len(xs) < 2:
        return None
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
    return math.sqrt(var) / mean if mean else None


def load_benchmarks(paths):
    """Every repetition in `paths` (the rounds of one binary), reduced per benchmark to
    {'real': median ns, 'cpu': median ns, 'cv_real', 'cv_cpu', 'n', 'real_time': bool}."""
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    context, samples, errors, order = {}, {}, {}, {}
    for path in paths:
        if os.path.getsize(path) == 0:
            continue  # WEFT_BENCH_FILTER matched nothing in that binary: it wrote nothing
        with open(path) as f:
            data = json.load(f)
        context = context or data.get("context", {})
        for b in data.get("benchmarks", []):
            if b.get("run_type", "iteration") != "iteration":
                continue  # aggregates: recomputed below over every round
            name = b.get("run_name", b["name"])
            if b.get("error_occurred"):
                errors[name] = b.get("error_message", "error")
                continue
            s = scale[b.get("time_unit", "ns")]
            samples.setdefault(name, []).append((b["real_time"] * s, b["cpu_time"] * s))
            order.setdefault(name, (b.get("family_index", 0), b.get("per_family_instance_index", 0)))
    out = {}
    names = sorted(set(samples) | set(errors), key=lambda n: order.get(n, (1 << 30, 0)))
    for name in names:
        entry = {"real_time": name.endswith("/real_time")}
        if name in errors:
            entry["error"] = errors[name]
        xs = samples.get(name, [])
        if xs:
            real = [r for r, _ in xs]
            cpu = [c for _, c in xs]
            entry.update(real=median(real), cpu=median(cpu), cv_real=cv(real), cv_cpu=cv(cpu),
                         min_real=min(real), min_cpu=min(cpu), n=len(xs))
        out[name] = entry
    return context, out


def measured(entry):
    """The time a benchmark is judged on (see the module comment)."""
    return entry.get("real") if entry["real_time"] else entry.get("cpu")


def fastest(entry):
    """The minimum over the repetitions, on the same clock as measured()."""
    return entry.get("min_real") if entry["real_time"] else entry.get("min_cpu")


def cv_of(entry):
    return entry.get("cv_real") if entry["real_time"] else entry.get("cv_cpu")


def fmt_time(ns):
    if ns is None:
        return "—"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}" if ns / scale < 100 else f"{ns / scale:.0f} {unit}"
    return f"{ns:.3g} ns"


def fmt_pct(x):
    return "—" if x is None else f"{100 * x:.1f} %"


def baseline_of(name, names):
    base = base_name(name)
    if base in EXTRA_BASELINES:
        wanted = EXTRA_BASELINES[base]
        return next((n for n in names if base_name(n) == wanted), None)
    if base.startswith("BM_Baseline_"):
        return None
    case = case_of(name)
    found = [n for n in names if base_name(n).startswith("BM_Baseline_") and case_of(n) == case]
    return found[0] if len(found) == 1 else None


def load_memory(path):
    values = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                try:
                    values[parts[0]] = float(parts[1])
                except ValueError:
                    pass
    return values


def load_go_extras(paths):
    """The keys a Go memory program adds to its JSON entries (goroutines,
    parked_bytes_per_goroutine...): {benchmark name: {key: median value}}."""
    standard = {"name", "run_name", "run_type", "repetition_index", "repetitions",
                "iterations", "real_time", "cpu_time", "time_unit"}
    values = {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        for b in data.get("benchmarks", []):
            for key, value in b.items():
                if key not in standard and isinstance(value, (int, float)):
                    values.setdefault(b.get("run_name", b["name"]), {}).setdefault(key, []).append(value)
    return {name: {k: median(v) for k, v in keys.items()} for name, keys in values.items()}


def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def os_name():
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()


def compile_command(build_dir, source):
    """The exact compile command of `source` from compile_commands.json, if exported."""
    path = os.path.join(build_dir, "compile_commands.json")
    try:
        with open(path) as f:
            for entry in json.load(f):
                if entry["file"].endswith(source):
                    cmd = entry.get("command") or " ".join(entry.get("arguments", []))
                    # Keep the flags: drop the compiler, includes, output and source.
                    words = cmd.split()[1:]
                    keep, skip = [], False
                    for w in words:
                        if skip:
                            skip = False
                            continue
                        if w in ("-o", "-c", "-MF", "-MT", "-I", "-isystem"):
                            skip = True
                            continue
                        if w.startswith(("-I", "-MF", "-MT")) or w in ("-MD",) or w.endswith(source):
                            continue
                        keep.append(w)
                    return " ".join(keep)
    except (OSError, ValueError, KeyError):
        pass
    return None


def verdict(ok):
    return "met" if ok else "**MISSED**"


def find_bench(benches, wanted):
    """The entry of benchmark `wanted` (by base name) in one binary's results, or None."""
    return next((e for n, e in benches.items() if base_name(n) == wanted and "error" not in e), None)


def all_benches(runs, label):
    """Every benchmark of every binary built by `label`, merged: {name: entry}."""
    merged = {}
    for _, benches in runs.get(label, {}).values():
        merged.update(benches)
    return merged


def load_paired(results_dir):
    """The paired rounds of run.sh (results/paired/): for each C++ benchmark of
    GO_BASELINES that has a target and each compiler label, the list over the rounds of
    (C++ time, Go time), each the median of that round's repetitions."""
    rounds = {}  # round -> label -> benchmarks
    for path in sorted(glob.glob(os.path.join(results_dir, "paired", "*.json"))):
        stem = os.path.basename(path)[: -len(".json")]
        m = re.search(r"\.r(\d+)$", stem)
        if not m:
            continue
        label = stem.split(".", 1)[0]
        rounds.setdefault(int(m.group(1)), {}).setdefault(label, {}).update(
            load_benchmarks([path])[1])
    out = {}
    for cxx, (go_name, target) in GO_BASELINES.items():
        if target is None:
            continue
        for label in COMPILER_LABELS:
            rows = []
            for k in sorted(rounds):
                e = find_bench(rounds[k].get(label, {}), cxx)
                g = find_bench(rounds[k].get("go", {}), go_name)
                if e and g and measured(e) and g.get("real"):
                    rows.append((measured(e), g["real"]))
            if rows:
                out[(cxx, label)] = rows
    return out


def paired_table(w, paired, misses):
    """The Go targets judged on the paired rounds: the median of the per-round ratios."""
    w("#### Paired rounds: the targets")
    w("")
    w("The table above pairs medians taken minutes apart. Here each round ran a comparison's "
      "C++ benchmarks and its Go program right after each other, in alternating order "
      "(`benchmark/run.sh` step 4c); the ratio is taken within each round, and the targets "
      "are judged on the median of those ratios. The spread of the ratios shows how far "
      "the machine's drift moves them.")
    w("")
    w("| C++ benchmark | compiler | rounds | C++ (median) | Go (median) | ratio per round | median ratio | target |")
    w("| --- | --- | ---: | ---: | ---: | --- | ---: | --- |")
    for (cxx, label), rows in paired.items():
        go_name, target = GO_BASELINES[cxx]
        ratios = sorted(c / g for c, g in rows)
        r = median(ratios)
        ok = r <= target
        if not ok:
            misses.append(f"{COMPILER_LABELS[label]}: {cxx} is {r:.2f} × {go_name} "
                          f"(median of {len(rows)} paired rounds; target ≤ {target:.2f} ×)")
        w(f"| `{cxx}` | {COMPILER_LABELS[label]} | {len(rows)} | "
          f"{fmt_time(median([c for c, _ in rows]))} | {fmt_time(median([g for _, g in rows]))} | "
          f"{ratios[0]:.2f}–{ratios[-1]:.2f} × | {r:.2f} × | ≤ {target:.2f} × — {verdict(ok)} |")
    w("")


def stackful_section(w, runs, memory, files, paired):
    """Issue #3: fiber targets, shared-stack copy costs, the Go comparison and parked-fiber
    memory. Returns the list of missed targets."""
    misses = []
    go = all_benches(runs, "go")
    go_paths = [p for (label, _), paths in files.items() if label == "go" for p in paths]
    go_extras = load_go_extras(go_paths)
    # How many rounds run.sh spread the Go programs over: the r<k> of their files.
    go_rounds = len({m.group(1) for p in go_paths
                     if (m := re.search(r"\.r(\d+)\.json$", os.path.basename(p)))}) or 1
    labels = [label for label in ("gcc", "clang") if label in runs]
    if not any(find_bench(all_benches(runs, l), "BM_Fiber_CreateRunDestroy") for l in labels) and not go:
        return misses

    w("## Stackful fibers (issue #3)")
    w("")
    w("`benchmark/stackful/fiber_benchmark`. Switch times are one-way: `BM_Fiber_ResumeYield` "
      "is a `resume()` plus a `this_fiber::yield()` (two switches), `BM_SharedStackFiber_Switch` "
      "resumes two fibers of one `SharedStack` in turn (four switches per iteration, two of "
      "which copy the given number of live stack bytes out and in). `BM_Fiber_Switch` is the "
      "bare switch core (`benchmark/stackful/detail/context_benchmark`), when present.")
    w("")
    w("| compiler | create + run + destroy | target | resume/yield, one way | bare switch core, one way |")
    w("| --- | ---: | --- | ---: | ---: |")
    for label in labels:
        b = all_benches(runs, label)
        crd = find_bench(b, "BM_Fiber_CreateRunDestroy")
        ry = find_bench(b, "BM_Fiber_ResumeYield")
        core = find_bench(b, "BM_Fiber_Switch")
        target = FIBER_TIME_TARGETS_NS["BM_Fiber_CreateRunDestroy"]
        cell = ""
        if crd:
            ok = measured(crd) is not None and measured(crd) <= target
            cell = f"≤ {target:.0f} ns — {verdict(ok)}"
            if not ok:
                misses.append(f"{COMPILER_LABELS[label]}: BM_Fiber_CreateRunDestroy takes "
                              f"{fmt_time(measured(crd))} (target ≤ {target:.0f} ns)")
        w(f"| {COMPILER_LABELS[label]} | {fmt_time(measured(crd) if crd else None)} | {cell} | "
          f"{fmt_time(measured(ry) / 2 if ry and measured(ry) else None)} | "
          f"{fmt_time(measured(core) if core else None)} |")
    w("")
    copies = sorted({n for l in labels for n in all_benches(runs, l)
                     if base_name(n) == "BM_SharedStackFiber_Switch"},
                    key=lambda n: int(re.sub(r"\D", "", n.split("copy:")[-1]) or 0))
    if copies:
        w("| live stack copied | " + " | ".join(f"{COMPILER_LABELS[l]}, one way" for l in labels) + " |")
        w("| --- |" + " ---: |" * len(labels))
        for name in copies:
            cells = []
            for label in labels:
                e = all_benches(runs, label).get(name)
                cells.append(fmt_time(measured(e) / 4 if e and measured(e) else None))
            w(f"| {name.split('copy:')[-1]} bytes | " + " | ".join(cells) + " |")
        w("")

    if go:
        w("### Go comparison")
        w("")
        w("Programs in `benchmark/go/` (Go " + (sh("go", "env", "GOVERSION") or "version unknown") +
          "), run by `benchmark/run.sh` in rounds spread over the C++ benchmarks' run (" +
          str(go_rounds) + " here), their repetitions pooled; medians, on the same clock as "
          "the C++ benchmark each is compared with "
          "(`GOMAXPROCS(1)`: its wall time is its CPU time). Ratio = C++ / Go: below 1, weft is faster.")
        w("")
        w("| C++ benchmark | compiler | C++ | Go benchmark | Go | ratio | target |")
        w("| --- | --- | ---: | --- | ---: | ---: | --- |")
        listed = set()
        for cxx, (go_name, target) in GO_BASELINES.items():
            g = find_bench(go, go_name)
            if not g:
                continue
            for label in labels:
                e = find_bench(all_benches(runs, label), cxx)
                if not e or measured(e) is None:
                    continue
                listed.add(go_name)
                ratio = measured(e) / g["real"]
                tcell = ""
                if target is not None and (cxx, label) in paired:
                    tcell = "judged on the paired rounds below"
                elif target is not None:
                    ok = ratio <= target
                    tcell = f"≤ {target:.2f} × — {verdict(ok)}"
                    if not ok:
                        misses.append(f"{COMPILER_LABELS[label]}: {cxx} is {ratio:.2f} × {go_name} "
                                      f"(target ≤ {target:.2f} ×)")
                w(f"| `{cxx}` | {COMPILER_LABELS[label]} | {fmt_time(measured(e))} | `{go_name}` | "
                  f"{fmt_time(g['real'])} | {ratio:.2f} × | {tcell} |")
        for name, g in go.items():
            if name.startswith(TIMEOUT_GO_PREFIXES):
                continue  # benchmark/go/with_timeout: see the section "withTimeout cost"
            if base_name(name) not in listed and "real" in g:
                w(f"| | | | `{name}` | {fmt_time(g['real'])} | | |")
        w("")
        if paired:
            paired_table(w, paired, misses)

    w("### Memory: parked fibers")
    w("")
    w("`benchmark/stackful/fiber_memory` parks fibers in a `this_fiber::yield()` and reports "
      "the growth of the resident set per fiber: on one `SharedStack` (control block plus saved "
      "live stack, one heap block) and on pooled 256 KiB protected stacks (the touched stack "
      "pages; their number is capped by `vm.max_map_count`, each stack being two mappings). "
      "`benchmark/go/goroutine_memory` does the same with goroutines blocked on channels.")
    w("")
    w("| compiler | shared stack: fibers | bytes/fiber | target | protected stacks: fibers | bytes/fiber |")
    w("| --- | ---: | ---: | --- | ---: | ---: |")
    for label in labels:
        m = memory.get(label, {}).get("stackful_fiber_memory")
        if not m:
            continue
        shared = m.get("shared_parked_bytes_per_fiber")
        ok = shared is not None and shared <= FIBER_MEMORY_TARGET_BYTES
        if not ok:
            misses.append(f"{COMPILER_LABELS[label]}: a parked shared-stack fiber takes {shared} bytes")

        def num(key, digits=1):
            v = m.get(key)
            return "—" if v is None else f"{v:,.{digits}f}"
        w(f"| {COMPILER_LABELS[label]} | {num('shared_fibers', 0)} | {num('shared_parked_bytes_per_fiber')} | "
          f"≤ {FIBER_MEMORY_TARGET_BYTES:.0f} — {verdict(ok)} | {num('pooled_fibers', 0)} | "
          f"{num('pooled_parked_bytes_per_fiber')} |")
    g = go_extras.get("Go_Goroutine_Parked")
    if g:
        w(f"| Go (goroutines) | {g.get('goroutines', 0):,.0f} | "
          f"{g.get('parked_bytes_per_goroutine', 0):,.1f} | | | |")
    w("")
    return misses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gcc", default="g++")
    ap.add_argument("--gcc-flags", default="")
    ap.add_argument("--clang", default="clang++")
    ap.add_argument("--clang-flags", default="")
    ap.add_argument("--alt-flags", default="")
    ap.add_argument("--min-time", default="")
    ap.add_argument("--repetitions", default="")
    ap.add_argument("--load", default="")
    ap.add_argument("--steal", default="")
    ap.add_argument("--measure-seconds", default="")
    args = ap.parse_args()

    # label -> unit -> (context, benchmarks); a unit's rounds (.r1, .r2...) are pooled
    files = {}
    for path in sorted(glob.glob(os.path.join(args.results, "*.json"))):
        stem = os.path.basename(path)[: -len(".json")]
        label, rest = stem.split(".", 1)
        unit = rest.split(".")[0]
        files.setdefault((label, unit), []).append(path)
    runs = {}
    for (label, unit), paths in sorted(files.items()):
        runs.setdefault(label, {})[unit] = load_benchmarks(paths)
    memory, instructions = {}, {}
    for path in sorted(glob.glob(os.path.join(args.results, "*.txt"))):
        stem = os.path.basename(path)[: -len(".txt")]
        label, unit = stem.split(".", 1)
        if unit == "instructions":
            instructions[label] = load_memory(path)
        else:
            memory.setdefault(label, {})[unit] = load_memory(path)

    context = next((ctx for units in runs.values() for ctx, _ in units.values()), {})
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    commit = sh("git", "-C", repo, "rev-parse", "--short", "HEAD") or "unknown"
    if sh("git", "-C", repo, "status", "--porcelain", "--untracked-files=no"):
        commit += " (with uncommitted changes)"
    compilers = {
        "gcc": (args.gcc, sh(args.gcc, "--version").splitlines()[:1], args.gcc_flags, "build/bench-gcc"),
        "clang": (args.clang, sh(args.clang, "--version").splitlines()[:1], args.clang_flags, "build/bench-clang"),
    }
    misses = []
    noisiest = 0.0  # the largest CV among the benchmarks that have a target or are baselines

    L = []
    w = L.append
    w("# weft performance")
    w("")
    w("Written by `benchmark/run.sh` (do not edit by hand; run it again). Results are "
      "medians of the repetitions; each weft benchmark is read as a ratio to the same "
      "work done by a bare, featureless task (`benchmark/support/bare_task.h`) in the "
      "same binary.")
    w("")
    w("## Machine and build")
    w("")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    w(f"- Date: {now}; weft commit {commit}")
    cores = os.cpu_count()
    mhz = context.get("mhz_per_cpu")
    w(f"- CPU: {cpu_model()}, {cores} cores" + (f", {mhz} MHz" if mhz else ""))
    caches = context.get("caches") or []
    if caches:
        w("- Caches: " + ", ".join(
            f"L{c['level']} {c['type'].lower()} {c['size'] // 1024} KiB" for c in caches))
    w(f"- OS: {os_name()}, Linux {platform.release()}")
    if args.load:
        w(f"- Load average when the run started: {args.load} "
          "(a figure well above 0 means other work shared the machine)")
    if args.steal and args.measure_seconds:
        w(f"- CPU time taken by the hypervisor for other guests (steal) while the benchmarks "
          f"ran: {args.steal} s over {args.measure_seconds} s of measuring on {cores} cores")
    bm_version = sh("dpkg-query", "-W", "-f=${Version}", "libbenchmark-dev")
    w(f"- Google Benchmark {bm_version or '(version unknown)'}"
      + (f" (library built as {context['library_build_type']})" if context.get("library_build_type") else "")
      + f"; {args.repetitions} repetitions of each benchmark, randomly interleaved "
      f"(`--benchmark_enable_random_interleaving`), at least {args.min_time} s each; medians. "
      "The g++ `coro/lazy_benchmark` numbers pool rounds run alternately with the "
      "`-O2`/`-O3` comparison build.")
    for label, (cxx, version, flags, build_dir) in compilers.items():
        if label not in runs:
            continue
        cmd = compile_command(os.path.join(repo, build_dir), "benchmark/coro/lazy_benchmark.cc")
        w(f"- {COMPILER_LABELS[label]}: `{cxx}` — {version[0] if version else 'unknown version'}; "
          f"Release flags `{flags}`" + (f"; lazy_benchmark.cc compiled with `{cmd}`" if cmd else ""))
    w("")
    w("Clocks: single-threaded benchmarks are judged on CPU time (robust to the "
      "scheduler on a shared machine), those whose name ends in `/real_time` (the work runs "
      "on pool threads) on wall time. CV is the coefficient of variation of the "
      "repetitions. Targets are judged on the ratio of medians; \"fastest\" is the "
      "minimum over the repetitions, and the ratio of fastest times is shown beside it "
      "because interference from other work only ever adds time: when the two ratios "
      "disagree, the machine was not quiet.")
    w("")
    w("## Targets (issue #2)")
    w("")
    w("- `BM_Lazy_Chain1000`, `BM_Lazy_CollectAll5000x50`, `BM_Lazy_RecursiveChain1000`: "
      "each ≤ 1.25 × its bare-task baseline, with g++ and with clang++.")
    w(f"- A parked `Lazy` (1,000,000 of them): ≤ {MEMORY_TARGET_BYTES:.0f} bytes of RSS each.")
    w("- Release flags chosen from a measured `-O2` vs `-O3` comparison (g++).")
    w("")
    w("Reading `*_CollectAll5000x50`: with clang++, each 50-deep branch is folded into one "
      "frame of ~3 KiB (Lazy) or ~2.4 KiB (bare task; its promise is 16 bytes smaller: no "
      "executor, no cancellation token), 5000 of them alive at once. Freed to malloc, "
      "that memory goes back to the kernel (glibc trims its heap) and is page-faulted in "
      "again by the next iteration: on this machine page faults are most of both "
      "timings. weft's frame cache keeps up to 4 MiB of freed frames per thread "
      "(`WEFT_FRAME_CACHE_BYTES`), large ones included, which is what a burst-y fan-out "
      "in a service sees too. With g++ nothing is folded and every frame is small and "
      "cached, while the bare task calls malloc for each.")
    w("")
    w("## Targets (issue #3, stackful fibers)")
    w("")
    w("- `BM_Fiber_CreateRunDestroy` (pooled stack, trivial body): ≤ "
      f"{FIBER_TIME_TARGETS_NS['BM_Fiber_CreateRunDestroy']:.0f} ns.")
    w("- `BM_Fiber_YieldViaExecutor` (two fibers alternating through `ThreadPool(1)`): ≤ 0.25 × "
      "Go's `runtime.Gosched()` ping-pong with `GOMAXPROCS(1)` (`benchmark/go/gosched_pingpong`).")
    w(f"- A parked fiber on a shared stack (1,000,000 of them): ≤ {FIBER_MEMORY_TARGET_BYTES:.0f} "
      "bytes of RSS each.")
    w("")
    w("## Targets (issue #17, structured concurrency)")
    w("")
    w("- `BM_TaskGroup_SpawnJoin/1000` (1,000 trivial Lazys spawned into a TaskGroup and "
      "joined, from a Lazy on `ThreadPool(1)`): ≤ 1.5 × `BM_CollectAllPara/1000` (the same "
      "Lazys in a vector).")
    w("- `BM_InFiber_AwaitFromLazy` (`co_await weft::inFiber(fn)`): no slower than "
      "`BM_SpawnFiber_AwaitFromLazy` (`co_await weft::spawnFiber(executor, fn)`); judged "
      "as ≤ 1.05 ×, this machine's noise on a median.")
    w("")

    for label in ("gcc", "clang"):
        if label not in runs:
            continue
        w(f"## Results: {COMPILER_LABELS[label]} ({compilers[label][2] or 'Release'})")
        w("")
        for unit, (_, benches) in sorted(runs[label].items()):
            w(f"### `{unit.replace('_', '/', 1)}`")
            w("")
            w("| benchmark | median wall | median CPU | CV | fastest | baseline | ratio | ratio of fastest | target |")
            w("| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |")
            names = list(benches)
            for name in names:
                e = benches[name]
                if "error" in e:
                    w(f"| `{name}` | error: {e['error']} | | | | | | | |")
                    misses.append(f"{COMPILER_LABELS[label]}: {name} failed")
                    continue
                base = baseline_of(name, names)
                ratio = fast_ratio = None
                if base and measured(benches[base]) and measured(e):
                    ratio = measured(e) / measured(benches[base])
                    fast_ratio = fastest(e) / fastest(benches[base])
                target = TARGETS.get(base_name(name))
                if target is not None:
                    for x in (e, benches.get(base) or {}):
                        if x:
                            noisiest = max(noisiest, cv_of(x) or 0.0)
                tcell = ""
                if target is not None:
                    ok = ratio is not None and ratio <= target
                    tcell = f"≤ {target:.2f} × — {verdict(ok)}"
                    if not ok:
                        misses.append(f"{COMPILER_LABELS[label]}: {name} is "
                                      f"{'?' if ratio is None else f'{ratio:.2f}'} × its baseline")
                w(f"| `{name}` | {fmt_time(e.get('real'))} | {fmt_time(e.get('cpu'))} | "
                  f"{fmt_pct(cv_of(e))} | {fmt_time(fastest(e))} | "
                  f"{('`' + base_name(base) + '`') if base else ''} | "
                  f"{'' if ratio is None else f'{ratio:.2f} ×'} | "
                  f"{'' if fast_ratio is None else f'{fast_ratio:.2f} ×'} | {tcell} |")
            w("")
            para = next((n for n in names if base_name(n) == "BM_Task_CollectAllPara5000x50"), None)
            seq = next((n for n in names if base_name(n) == "BM_Lazy_CollectAll5000x50"), None)
            if para and seq and benches[para].get("real") and benches[seq].get("real"):
                w(f"`BM_Task_CollectAllPara5000x50` on a 2-thread `ThreadPool` takes "
                  f"{benches[para]['real'] / benches[seq]['real']:.2f} × the wall time of "
                  f"`BM_Lazy_CollectAll5000x50` (the same branches run one after another on "
                  f"one thread); its ratio to the bare task compares 2 threads with 1 and has "
                  f"no target.")
                w("")

    if instructions:
        w("## Instructions per iteration (callgrind)")
        w("")
        w("Timings on a shared machine move by several percent from run to run; "
          "instruction counts do not. `valgrind --tool=callgrind` runs each benchmark with "
          "a fixed iteration count (`WEFT_BENCH_ITERATIONS`) twice, n and 2n; the "
          "difference over n is one iteration. Fewer instructions is not always less time "
          "(cache misses, branch mispredictions), but a ratio that grows here is a real "
          "regression.")
        w("")
        w("| compiler | benchmark | weft | bare task | ratio |")
        w("| --- | --- | ---: | ---: | ---: |")
        for label in ("gcc", "clang"):
            counts = instructions.get(label, {})
            for name, value in counts.items():
                if not name.startswith("BM_Lazy_"):
                    continue
                base = "BM_Baseline_BareTask_" + case_of(name)
                if base not in counts or not counts[base]:
                    continue
                w(f"| {COMPILER_LABELS[label]} | `{name}` | {value:,.0f} | {counts[base]:,.0f} | "
                  f"{value / counts[base]:.2f} × |")
        w("")

    w("## Memory: parked coroutines")
    w("")
    w("`benchmark/coro/lazy_memory` parks 1,000,000 coroutines, each suspended on a "
      "trivial awaitable, through `collectAll(std::vector)` started with `.start()`, and "
      "reports the growth of the resident set while they are parked, per coroutine "
      "(frame, allocator rounding and malloc's chunk header). \"Frame request\" is the "
      "size each frame asked the heap for.")
    w("")
    w("| compiler | Lazy bytes/coroutine | Lazy frame request | bare task bytes/coroutine | bare frame request | target |")
    w("| --- | ---: | ---: | ---: | ---: | --- |")
    for label in ("gcc", "clang"):
        for unit, m in sorted(memory.get(label, {}).items()):
            if unit != "coro_lazy_memory":
                continue  # other memory programs have their own sections
            lazy = m.get("lazy_parked_bytes_per_coroutine")
            ok = lazy is not None and lazy <= MEMORY_TARGET_BYTES
            if not ok:
                misses.append(f"{COMPILER_LABELS[label]}: a parked Lazy takes {lazy} bytes")
            def num(key, digits=1):
                v = m.get(key)
                return "—" if v is None else f"{v:.{digits}f}"
            w(f"| {COMPILER_LABELS[label]} | {num('lazy_parked_bytes_per_coroutine')} | "
              f"{num('lazy_frame_request_bytes', 0)} B | {num('bare_parked_bytes_per_coroutine')} | "
              f"{num('bare_frame_request_bytes', 0)} B | ≤ {MEMORY_TARGET_BYTES:.0f} — {verdict(ok)} |")
    w("")

    misses += stackful_section(w, runs, memory, files, load_paired(args.results))

    if "gcc-alt" in runs and "gcc" in runs:
        w(f"## g++: `{args.gcc_flags}` (Release) vs `{args.alt_flags}`")
        w("")
        w("The same benchmark built a second time with only the optimisation level "
          "changed. Ratio > 1: the alternative is slower.")
        w("")
        alt_ir = instructions.get("gcc-alt", {})
        rel_ir = instructions.get("gcc", {})
        w(f"| benchmark | `{args.gcc_flags}` | `{args.alt_flags}` | ratio | ratio of fastest | "
          "ratio of instructions |")
        w("| --- | ---: | ---: | ---: | ---: | ---: |")
        ratios, fast_ratios = [], []
        for unit, (_, alt) in sorted(runs["gcc-alt"].items()):
            rel = runs["gcc"].get(unit, (None, {}))[1]
            for name, e in alt.items():
                r = rel.get(name)
                if not r or measured(r) is None or measured(e) is None:
                    continue
                ratio = measured(e) / measured(r)
                fast = fastest(e) / fastest(r)
                ratios.append(ratio)
                fast_ratios.append(fast)
                key = base_name(name)
                ir = (f"{alt_ir[key] / rel_ir[key]:.2f} ×"
                      if rel_ir.get(key) and alt_ir.get(key) else "")
                w(f"| `{name}` | {fmt_time(measured(r))} | {fmt_time(measured(e))} | "
                  f"{ratio:.2f} × | {fast:.2f} × | {ir} |")
        if ratios:
            def geomean(xs):
                return math.exp(sum(math.log(x) for x in xs) / len(xs))
            geo, geo_fast = geomean(ratios), geomean(fast_ratios)
            slower = sum(1 for x in ratios if x > 1.0)

            def side(g):
                return 0 if abs(g - 1.0) < 0.03 else (1 if g > 1.0 else -1)
            if side(geo) != side(geo_fast):
                conclusion = ("Medians and fastest times disagree: the machine was too noisy "
                              "to choose; run again on an idle machine.")
            elif side(geo) == 0:
                conclusion = "No difference beyond the noise of this machine."
            elif side(geo) > 0:
                conclusion = "The Release flags are the faster choice."
            else:
                conclusion = "**The alternative is faster here: reconsider the Release flags.**"
            w("")
            w(f"Geometric mean: `{args.alt_flags}` takes {geo:.2f} × the time of the Release "
              f"flags (fastest times: {geo_fast:.2f} ×); slower on {slower} of {len(ratios)} "
              f"benchmarks. {conclusion}")
        w("")

    w("## I/O (issue #16)")
    w("")
    w("weft's TCP echo and HTTP servers (examples/) against Go `net`, Asio, tokio, nginx and "
      "raw epoll and io_uring loops: requests per second and per server CPU-second, p50/p99 "
      "latency, streaming throughput and memory per idle connection, with ratios and charts, "
      "are in [io-benchmarks.md](io-benchmarks.md), written by `benchmark/io/run.sh` (step 7 "
      "of `benchmark/run.sh`). `benchmark/io/tcp_stream_benchmark` measures weft's own I/O "
      "path in one process.")
    w("")
    w("![requests per server CPU-second](images/io-req-per-cpu.svg)")
    w("")
    for line in kept_section(args.out, KEPT_IO_SECTION):
        w(line)
    for line in TLS_SECTION:
        w(line)
    timeout_section = kept_section(args.out)
    for line in timeout_section:
        w(line)
    for line in kept_section(args.out, KEPT_TIMERS_SECTION):
        w(line)
    w("## Summary")
    w("")
    if misses:
        w("Targets missed:")
        w("")
        for m in misses:
            w(f"- {m}")
    else:
        w("Every target is met with both compilers.")
    w("")
    if timeout_section:
        w("Not counted here: issue #29's withTimeout target (≤ 1.0 × tokio), judged in "
          "[withTimeout cost](#withtimeout-cost) by `benchmark/timeout/run.sh`.")
        w("")
    if noisiest > 0.05:
        w(f"The repetitions of the targeted benchmarks and their baselines varied by up to "
          f"{100 * noisiest:.0f} % (CV), so a single run cannot tell a ratio from its target "
          f"to within that much; compare the ratios of fastest times and the instruction "
          f"counts, which do not depend on the machine's state.")
        w("")
    w("Reproduce: `benchmark/run.sh` (installs what is missing, builds, runs, rewrites this "
      "file). Raw JSON: `build/bench-results/`.")

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(L) + "\n")
    print(f"wrote {args.out}" + (f"; {len(misses)} target(s) missed" if misses else "; all targets met"))


if __name__ == "__main__":
    main()
