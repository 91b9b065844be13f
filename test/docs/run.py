#!/usr/bin/env python3
"""Runs the shell commands that weft's documentation shows (test/run.sh docs).

    test/docs/run.py [--build-dir DIR] [--list] [FILE.md...]

Reads README.md and docs/*.md (or the FILEs given). Every shell block (```sh, ```bash,
```shell, ```console) must be preceded, on the line just before its fence, by a marker:

    <!-- ci: run [cwd=DIR] [TEXT=REPLACEMENT...] -->   run the block
    <!-- ci: skip REASON -->                             do not run it (a reason is required)

and any other fenced block may be written to a file before the commands use it:

    <!-- ci: file PATH -->                              (PATH relative to the checkout's copy)

What it does: each document with a `ci: run` block gets a fresh copy of the checkout (the
files as they are, committed or not, without build/, bazel-* and .git) in
DIR/<document>/weft, as a newcomer following that document from the top would have it.
Its `ci: file` and `ci: run` blocks are processed in document order, in that copy (or in
its subfolder cwd=DIR); a `ci: run` block's TEXT=REPLACEMENT pairs replace a placeholder
(`<prefix>`) or a path the check cannot use (`/opt/weft`) before it runs. Each command
(a line, with its backslash continuations) must succeed: the first that fails stops that
document, and is reported as `FILE:LINE: ...` with the last lines of its output; the
other documents still run. The skipped blocks are checked for shell syntax (bash -n).

What runs differently from a person's machine, and why (stand-ins, as shell functions):
  - DESTDIR is set: `cmake --install ... --prefix /opt/weft` installs into
    DIR/<document>/destdir/opt/weft, not into the machine's /opt.
  - `sudo CMD` runs CMD (CI is root). `apt-get update` does nothing and `apt-get install
    P...` installs nothing: it checks that every P is in test/run.sh's package list (which
    the deps step installs, so each exists on Debian 12) and, when the line installs
    build-essential (the build's dependencies), that it names every package of
    REQUIRED_PACKAGES below (a developer build with io_uring needs them all).
  - `cmake --build D` without --target, when D is a developer tree (WEFT_BUILD_TESTS on),
    builds weft_coro_lazy_test only, and `ctest ...` runs coro/lazy_test only
    (--no-tests=error): a full developer build and test run is the gcc step's work, ten
    minutes here. The configure commands run as written, so a missing -DWEFT_DEVELOPER=ON
    still fails (no such target, no such test).
What it does not cover: the skipped blocks (their markers say why), commands written in
the prose rather than in blocks, C++ and CMake snippets not marked `ci: file`, and other
distributions than the one CI runs on.
Cost: about 2 CPU-minutes, 3 minutes on a busy 2-core machine (per document with commands:
a library build, a developer build of the library and one test, small programs).
Exits 0 when every block ran, 1 otherwise, 2 on a malformed marker or an unmarked shell
block.
"""

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHELL_LANGS = {"sh", "bash", "shell", "console"}
# A developer build with io_uring needs these (CMakeLists.txt: a C++20 compiler, CMake,
# Ninja as the docs' generator, GoogleTest/GoogleMock, Google Benchmark, liburing).
REQUIRED_PACKAGES = ["build-essential", "cmake", "ninja-build", "libgtest-dev", "libgmock-dev",
                     "libbenchmark-dev", "liburing-dev"]
# Where the stand-ins' cut-down developer build and test run point.
STAND_IN_TARGET = "weft_coro_lazy_test"
STAND_IN_TEST = "^coro/lazy_test$"

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([A-Za-z0-9_+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*ci:\s*(.*?)\s*-->\s*$")

PRELUDE = r"""
# Written by test/docs/run.py: the stand-ins its docstring describes.
set -o pipefail
__weft_docs_fail() {  # FILE LINE STATUS
  echo "test/docs/run.py: $1:$2: exited $3" >&2
  exit "$3"
}
sudo() {
  while [[ "${1:-}" == -* ]]; do shift; done
  "$@"
}
apt-get() {
  local sub="" arg missing=() unknown=() p
  local -a pkgs=()
  for arg in "$@"; do
    [[ "${arg}" == -* ]] && continue
    if [[ -z "${sub}" ]]; then sub="${arg}"; else pkgs+=("${arg}"); fi
  done
  case "${sub}" in
    update)
      echo "[docs stand-in] apt-get update: not run"
      ;;
    install)
      echo "[docs stand-in] apt-get install ${pkgs[*]}: checked, not installed"
      for p in "${pkgs[@]}"; do
        [[ " ${WEFT_DOCS_KNOWN_PACKAGES} " == *" ${p} "* ]] || unknown+=("${p}")
      done
      if [[ " ${pkgs[*]} " == *" build-essential "* ]]; then
        for p in ${WEFT_DOCS_REQUIRED_PACKAGES}; do
          [[ " ${pkgs[*]} " == *" ${p} "* ]] || missing+=("${p}")
        done
      fi
      if [[ ${#unknown[@]} -gt 0 ]]; then
        echo "apt-get install: not in test/run.sh's package list: ${unknown[*]}" >&2
        return 1
      fi
      if [[ ${#missing[@]} -gt 0 ]]; then
        echo "apt-get install: a developer build also needs: ${missing[*]}" >&2
        return 1
      fi
      ;;
    *)
      echo "apt-get ${sub}: no stand-in for it in test/docs/run.py" >&2
      return 2
      ;;
  esac
}
cmake() {
  local arg
  if [[ "${1:-}" == --build && -n "${2:-}" ]] &&
      grep -qx 'WEFT_BUILD_TESTS:BOOL=ON' "$2/CMakeCache.txt" 2>/dev/null; then
    for arg in "$@"; do
      if [[ "${arg}" == --target || "${arg}" == --target=* || "${arg}" == -t ]]; then
        command cmake "$@"
        return
      fi
    done
    echo "[docs stand-in] cmake --build $2: a developer tree: ${WEFT_DOCS_TARGET} only"
    command cmake --build "$2" --target "${WEFT_DOCS_TARGET}" "${@:3}"
    return
  fi
  command cmake "$@"
}
ctest() {
  echo "[docs stand-in] ctest $*: ${WEFT_DOCS_TEST} only"
  command ctest "$@" -R "${WEFT_DOCS_TEST}" --no-tests=error
}
"""


class DocError(Exception):
    """A malformed marker or an unmarked shell block: FILE:LINE: message."""


class Block:
    def __init__(self, path, line, lang, text, marker):
        self.path = path        # relative to REPO
        self.line = line        # 1-based line of the opening fence
        self.lang = lang
        self.text = text
        self.marker = marker    # (kind, args) or None

    def where(self):
        return f"{self.path}:{self.line}"


def parse(path):
    """The fenced blocks of `path` (relative to REPO), with their markers."""
    lines = (REPO / path).read_text(encoding="utf-8").splitlines()
    blocks = []
    pending = None  # (line, kind, args) of a marker waiting for its fence
    i = 0
    while i < len(lines):
        line = lines[i]
        m = MARKER.match(line)
        if m:
            words = m.group(1).split(None, 1)
            kind = words[0] if words else ""
            rest = words[1] if len(words) > 1 else ""
            if kind not in ("run", "skip", "file"):
                raise DocError(f"{path}:{i + 1}: unknown marker 'ci: {m.group(1)}' "
                               "(run, skip, file)")
            if kind == "skip" and not rest:
                raise DocError(f"{path}:{i + 1}: 'ci: skip' needs a reason")
            if kind == "file" and (not rest or len(rest.split()) != 1):
                raise DocError(f"{path}:{i + 1}: 'ci: file' needs one path")
            pending = (i + 1, kind, rest)
            i += 1
            continue
        f = FENCE.match(line)
        if not f:
            if pending:
                raise DocError(f"{path}:{pending[0]}: a ci marker must be on the line "
                               "just before a fence")
            i += 1
            continue
        indent, fence, lang = f.group(1), f.group(2), f.group(3).lower()
        start = i
        body = []
        i += 1
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}:
                break
            text = lines[i]
            # The content of a fence inside a list item is indented like the fence.
            if text.startswith(indent):
                text = text[len(indent):]
            body.append(text)
            i += 1
        else:
            raise DocError(f"{path}:{start + 1}: unclosed code fence")
        marker = (pending[1], pending[2]) if pending else None
        pending = None
        block = Block(path, start + 1, lang, "\n".join(body) + "\n", marker)
        if lang in SHELL_LANGS and (marker is None or marker[0] == "file"):
            raise DocError(f"{block.where()}: a shell block needs a marker on the line before it: "
                           "<!-- ci: run --> or <!-- ci: skip REASON --> (see test/docs/run.py)")
        if lang not in SHELL_LANGS and marker and marker[0] != "file":
            raise DocError(f"{block.where()}: 'ci: {marker[0]}' is for shell blocks; this is "
                           f"```{lang}")
        blocks.append(block)
        i += 1
    if pending:
        raise DocError(f"{path}:{pending[0]}: a ci marker must be on the line "
                       "just before a fence")
    return blocks


def commands(block):
    """The block's commands: (markdown line, text) per line with its continuations."""
    result = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        first = i
        text = lines[i]
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text += "\n" + lines[i]
        i += 1
        if text.strip() and not text.strip().startswith("#"):
            result.append((block.line + 1 + first, text))
    return result


def bash_syntax_ok(text):
    return subprocess.run(["bash", "-n"], input=text, text=True,
                          capture_output=True).returncode == 0


def run_options(block):
    """cwd and the replacements of a `ci: run` marker."""
    cwd = "."
    replacements = []
    for word in shlex.split(block.marker[1]):
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise DocError(f"{block.where()}: 'ci: run' takes cwd=DIR and TEXT=REPLACEMENT, "
                           f"not '{word}'")
        if key == "cwd":
            cwd = value
        else:
            replacements.append((key, value))
    return cwd, replacements


def check_skipped(block):
    if not bash_syntax_ok(block.text):
        raise DocError(f"{block.where()}: not valid shell (bash -n)")


def known_packages():
    """test/run.sh's package list (what its deps step installs)."""
    text = (REPO / "test/run.sh").read_text(encoding="utf-8")
    m = re.search(r"^packages=\((.*?)\)", text, re.M | re.S)
    if not m:
        raise DocError("test/run.sh: no packages=(...) list")
    return m.group(1).split()


def copy_checkout(dest):
    if dest.exists():
        shutil.rmtree(dest)

    def ignore(folder, names):
        if Path(folder).resolve() != REPO:
            return []
        return [n for n in names
                if n in ("build", ".git") or n.startswith("bazel-") or n.startswith("build-")
                or n.startswith("cmake-build-")]

    shutil.copytree(REPO, dest, symlinks=True, ignore=ignore)


def run_document(path, blocks, scratch, env_base):
    """Runs one document's blocks in a fresh copy; True when all ran."""
    doc_dir = scratch / re.sub(r"[^A-Za-z0-9_.-]", "_", str(path.with_suffix("")))
    copy = doc_dir / "weft"
    destdir = doc_dir / "destdir"
    if doc_dir.exists():
        shutil.rmtree(doc_dir)
    doc_dir.mkdir(parents=True)
    copy_checkout(copy)
    destdir.mkdir()
    prelude = doc_dir / "prelude.sh"
    prelude.write_text(PRELUDE, encoding="utf-8")
    env = dict(env_base, DESTDIR=str(destdir))
    print(f"[docs] {path}: a fresh copy of the checkout in {copy}", flush=True)
    for n, block in enumerate(blocks):
        kind = block.marker[0] if block.marker else None
        if kind == "file":
            target = copy / block.marker[1]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text, encoding="utf-8")
            print(f"[docs] {block.where()}: wrote {block.marker[1]}", flush=True)
            continue
        if kind == "skip":
            check_skipped(block)
            print(f"[docs] {block.where()}: skipped ({block.marker[1]})", flush=True)
            continue
        if kind != "run":
            continue
        cwd, replacements = run_options(block)
        workdir = copy / cwd
        workdir.mkdir(parents=True, exist_ok=True)
        script = [f"source {shlex.quote(str(prelude))}"]
        for line, text in commands(block):
            for key, value in replacements:
                text = text.replace(key, value)
            if not bash_syntax_ok(text):
                raise DocError(f"{path}:{line}: not a complete command on its own (bash -n); the "
                               "check runs a block command by command")
            script.append(f"echo {shlex.quote(f'+ {path}:{line}: ' + text)}")
            script.append(text)
            # On a line of its own: the command may end with a comment.
            script.append(f'__weft_docs_status=$?; [[ $__weft_docs_status -eq 0 ]] || '
                          f'__weft_docs_fail {shlex.quote(str(path))} {line} $__weft_docs_status')
        script_path = doc_dir / f"block{n}.sh"
        script_path.write_text("\n".join(script) + "\n", encoding="utf-8")
        log_path = doc_dir / f"block{n}.log"
        start = time.monotonic()
        with open(log_path, "w", encoding="utf-8") as log:
            rc = subprocess.run(["bash", str(script_path)], cwd=workdir, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
        took = time.monotonic() - start
        if rc != 0:
            tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-60:]
            print("\n".join(tail), flush=True)
            failed = [l for l in tail if l.startswith("test/docs/run.py: ")]
            where = (failed[-1][len("test/docs/run.py: "):] if failed
                     else f"{block.where()}: exited {rc}")
            print(f"{where} (block at {block.where()}; log {log_path}); not running the rest of "
                  f"{path}", file=sys.stderr, flush=True)
            return False
        print(f"[docs] {block.where()}: ok ({took:.0f}s)", flush=True)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-dir", default=str(REPO / "build" / "docs"),
                        help="scratch folder (default build/docs), emptied first")
    parser.add_argument("--list", action="store_true", help="list the blocks, run nothing")
    parser.add_argument("files", nargs="*", help="markdown files (default README.md docs/*.md)")
    args = parser.parse_args()

    files = [Path(f) for f in args.files] or (
        [Path("README.md")] + sorted(p.relative_to(REPO) for p in (REPO / "docs").glob("*.md")))
    files = [f.resolve().relative_to(REPO) if f.is_absolute() else f for f in files]
    try:
        documents = [(f, parse(f)) for f in files]
        if args.list:
            for f, blocks in documents:
                for b in blocks:
                    if b.marker or b.lang in SHELL_LANGS:
                        print(f"{b.where()}: ```{b.lang} {b.marker[0] if b.marker else ''} "
                              f"{b.marker[1] if b.marker else ''}".rstrip())
            return 0
        env = dict(os.environ)
        env.pop("BASH_ENV", None)
        env.update(WEFT_DOCS_KNOWN_PACKAGES=" ".join(known_packages()),
                   WEFT_DOCS_REQUIRED_PACKAGES=" ".join(REQUIRED_PACKAGES),
                   WEFT_DOCS_TARGET=STAND_IN_TARGET, WEFT_DOCS_TEST=STAND_IN_TEST)
        if os.environ.get("JOBS"):
            env["CMAKE_BUILD_PARALLEL_LEVEL"] = os.environ["JOBS"]
        scratch = Path(args.build_dir).resolve()
        scratch.mkdir(parents=True, exist_ok=True)
        ok = True
        for f, blocks in documents:
            if any(b.marker and b.marker[0] == "run" for b in blocks):
                ok = run_document(f, blocks, scratch, env) and ok
            else:
                for b in blocks:
                    if b.marker and b.marker[0] == "skip":
                        check_skipped(b)
                print(f"[docs] {f}: nothing to run", flush=True)
    except DocError as e:
        print(f"{e}", file=sys.stderr)
        return 2
    print("[docs] ok" if ok else "[docs] FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
