#!/usr/bin/env bash
# Tests tools/gdb/weft.py: debugs test/tools/gdb_program.cc (built -O2 -g) with gdb and
# the extension, on the live process stopped at a breakpoint and on a core file, and
# checks what `weft bt`, `weft fibers`, `weft fiber N bt` and `weft tasks` print.
#
# Usage: gdb_extension_test.sh <gdb_program> [gdb] [expect_tracking]
#
# expect_tracking (test/CMakeLists.txt passes it): 1 if the program's build must list root
# tasks (task tracking on: the default, in every build type), 0 if it must not; without
# it, whichever the program's own dump shows is checked.
#
# 1. The program alone must exit 0 (it releases everything it parked).
# 2. `gdb_program abort` under gdb: at its SIGABRT, `weft fibers` (for the fiber's id) and
#    generate-core-file (no core_pattern or ulimit involved).
# 3. The live process at `break weftGdbBreakHere`: every command, every check; also
#    compared with what the program printed in-process (dumpTasks) just before.
# 4. The core file: every command, every check, and the same comparison with what the
#    aborting run printed.
# Exit status: 0 if every check passed, 1 if one failed (each failure prints what was
# expected and what gdb printed), 77 (ctest: skipped) if gdb cannot debug here (ptrace
# refused, as in some containers).
set -u

program=${1:?usage: gdb_extension_test.sh <gdb_program> [gdb]}
gdb=${2:-gdb}
expect_tracking=${3-}
here=$(cd "$(dirname "$0")" && pwd)
extension="$here/../../tools/gdb/weft.py"
work=$(mktemp -d "${TMPDIR:-/tmp}/weft-gdb-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# gdb in batch mode, no init files, the extension loaded. Bounded: a hung gdb is killed,
# and the program it traced then runs to its end on its own (exit 0, or its abort).
run_gdb() {
  timeout -k 5 60 "$gdb" -batch -nx -iex 'set debuginfod enabled off' \
    -iex 'set auto-load no' -ex "source $extension" "$@" 2>&1
}

skip_if_ptrace_refused() {
  local refused="ptrace: Operation not permitted|Couldn't get (registers|CS register)"
  if grep -qE "$refused|not permitted to trace" "$1"; then
    echo "SKIP: gdb cannot trace processes here (ptrace refused):"
    cat "$1"
    exit 77
  fi
}

# The lines of a log between "@@<name>" and the next "@@" marker.
section() {
  awk -v name="@@$2" '$0 == name {on = 1; next} /^@@/ {on = 0} on' "$1"
}

# check_lines <what> <text> <regex>...: some line matches the first regex (POSIX ERE) and
# the lines right after it match the following ones, in order.
check_lines() {
  local what=$1 text=$2
  shift 2
  local -a lines want=("$@")
  mapfile -t lines <<<"$text"
  local start i ok
  for ((start = 0; start < ${#lines[@]}; ++start)); do
    ok=1
    for ((i = 0; i < ${#want[@]}; ++i)); do
      if ! [[ ${lines[start + i]-} =~ ${want[i]} ]]; then
        ok=0
        break
      fi
    done
    [ "$ok" -eq 1 ] && return 0
  done
  fail "$what: expected consecutive lines matching:"
  printf '    %s\n' "${want[@]}"
  echo "  got:"
  printf '%s\n' "$text" | sed 's/^/    | /'
}

# check_order <what> <text> <regex>...: lines matching each regex, in this order (not
# necessarily adjacent).
check_order() {
  local what=$1 text=$2
  shift 2
  local -a lines want=("$@")
  mapfile -t lines <<<"$text"
  local at=0 line
  for line in "${lines[@]}"; do
    if [ "$at" -lt "${#want[@]}" ] && [[ $line =~ ${want[at]} ]]; then
      at=$((at + 1))
    fi
  done
  [ "$at" -eq "${#want[@]}" ] && return 0
  fail "$what: expected lines matching, in this order:"
  printf '    %s\n' "${want[@]}"
  echo "  got:"
  printf '%s\n' "$text" | sed 's/^/    | /'
}

# check_same <what> <expected> <got>
check_same() {
  if [ "$2" != "$3" ]; then
    fail "$1: expected"
    printf '%s\n' "$2" | sed 's/^/    | /'
    echo "  got:"
    printf '%s\n' "$3" | sed 's/^/    | /'
  fi
}

# Every check of one gdb session's log (live or core), and the comparison with the
# in-process dump the same process printed.
check_session() {
  local kind=$1 log=$2 id=$3
  local bt fibers fiber tasks
  bt=$(section "$log" bt)
  fibers=$(section "$log" fibers)
  fiber=$(section "$log" fiber)
  tasks=$(section "$log" tasks)
  # Pieces of the regexes (POSIX ERE).
  local hex='0x[0-9a-f]+' anon='\(anonymous namespace\)::' src=' at .*gdb_program\.cc:[0-9]+$'
  local n='^#[0-9]+ +' consumer="\"gdb-consumer\""

  # weft bt: the native frame that stopped, the coroutine running it, its awaiters, the
  # root.
  check_lines "$kind: weft bt" "$bt" \
    "${n}native weftGdbBreakHere\\(bool\\)$src" \
    "${n}coroutine ${anon}gdbInnermost\\(bool\\)$src" \
    "${n}coroutine ${anon}gdbMiddle\\(bool\\)$src" \
    "${n}coroutine ${anon}gdbOutermost\\(bool\\)$src" \
    "${n}syncAwait\$"

  # weft fibers: the consumer, suspended, parked on the channel, its stack in use.
  check_lines "$kind: weft fibers" "$fibers" \
    "^$id +suspended +[0-9]+ B of 256 KiB +gdb-consumer +Channel::receive \\($hex\\)\$"

  # weft fiber N bt: the fiber's own frames, from its saved context: where it parked
  # (inside await()), the function that called await(), down to the fiber's entry.
  check_order "$kind: weft fiber $id bt" "$fiber" \
    "^fiber $id $consumer: suspended, parked on Channel::receive \\($hex\\)\$" \
    '^#0 ' \
    "${n}weft::await<" \
    "${n}$hex in ${anon}gdbConsume \\(.*\\)$src" \
    "${n}$hex in weft::detail::FiberCore::entryFor<"

  # The in-process dump says whether root tasks are listed (WEFT_TASK_TRACKING).
  local in_process tracking=1
  in_process=$(awk '/^in-process dumpTasks:$/ {on = 1; next}
                    /^end of in-process output$/ {on = 0} on' "$log")
  if grep -q 'root tasks are listed in builds with WEFT_TASK_TRACKING=1' <<<"$in_process"; then
    tracking=0
  fi
  if [ -n "$expect_tracking" ] && [ "$tracking" != "$expect_tracking" ]; then
    fail "$kind: the program's dumpTasks says task tracking is $tracking, expected $expect_tracking" \
      "(1: root tasks listed, as in a build with the default options)"
  fi

  # weft tasks: the header, each task's wait and chain, the fiber.
  local in_use='stack [0-9]+\.[0-9] KiB of 256 KiB in use'
  check_lines "$kind: weft tasks (the fiber)" "$tasks" \
    "^fiber $id $consumer: parked on Channel::receive \\($hex\\), $in_use\$" \
    "^  #0 native ${anon}gdbConsume\\(weft::Channel<int>&\\) at .*:[0-9]+\$" \
    "^  #1 fiber $id $consumer\$"
  if [ "$tracking" -eq 0 ]; then
    # Without tracking: no root task is listed, by gdb either.
    check_lines "$kind: weft tasks header" "$tasks" \
      '^weft: 0 tasks, 1 fiber \(root tasks are listed in builds with WEFT_TASK_TRACKING=1\)$'
    check_same "$kind: weft tasks vs the program's dumpTasks (fibers)" \
      "$(printf '%s\n' "$in_process" | grep -E '^fiber ')" \
      "$(printf '%s\n' "$tasks" | grep -E '^fiber ')"
    return
  fi
  local task='^task [0-9]+ \(start\(\)\), (age|first waited at) [0-9]+\.[0-9]{3} s[^:]*: waiting on'
  check_lines "$kind: weft tasks header" "$tasks" '^weft: 3 tasks, 1 fiber$'
  check_lines "$kind: weft tasks (the mutex)" "$tasks" \
    "$task Mutex::lock \\($hex\\)\$" \
    "^  #0 coroutine ${anon}gdbLockWaiter\\(weft::Mutex&\\)$src" \
    '^  #1 start\(\)$'
  check_lines "$kind: weft tasks (the sleep)" "$tasks" \
    "$task sleep, due (in 35[0-9]{2}\\.[0-9]{3} s|at [0-9]+\\.[0-9]{3} s \\(steady clock\\))\$" \
    "^  #0 coroutine ${anon}gdbSleeper\\(\\)$src" \
    '^  #1 start\(\)$'
  check_lines "$kind: weft tasks (the syncAwait root)" "$tasks" \
    "^task [0-9]+ \\(syncAwait\\), .*: waiting on .*TaskAwaiter<int> \\(awaiter $hex\\)\$" \
    '^  #0 syncAwait$'

  # The same tasks, waits and objects as the process's own dumpTasks() (its ages and the
  # sleep's time left aside; gdb adds the awaiter's address where it names a type).
  local normalize
  normalize='s/, (age|first waited at) [0-9]+\.[0-9]{3} s( \(monotonic clock\))?//'
  normalize+='; s/due (in|at) [0-9.]+ s( \(steady clock\))?/due/'
  normalize+='; s/ \(awaiter 0x[0-9a-f]+\)//; s/weft::detail::(TaskAwaiter)/\1/'
  check_same "$kind: weft tasks vs the program's dumpTasks (titles and waits)" \
    "$(printf '%s\n' "$in_process" | grep -E '^(task|fiber) ' | sed -E "$normalize")" \
    "$(printf '%s\n' "$tasks" | grep -E '^(task|fiber) ' | sed -E "$normalize")"
}

if [ ! -x "$program" ]; then
  echo "FAIL: no program $program"
  exit 1
fi

# 1. Without gdb.
timeout -k 5 60 "$program" >"$work/plain.log" 2>&1
status=$?
if [ "$status" -ne 0 ]; then
  fail "$program exited with status $status without gdb (expected 0):"
  sed 's/^/    | /' "$work/plain.log"
fi

# 2. The aborting run: the fiber's id, and a core file written by gdb. Not for a program
# built with ASan or TSan: their shadow memory would make the core file huge (gdb takes
# minutes to write it); the live session is checked all the same.
core="$work/gdb_program.core"
dump=(-ex "generate-core-file $core")
if grep -qa -e __asan_init -e __tsan_init "$program"; then
  echo "note: $program is built with a sanitizer: no core file test"
  dump=()
fi
run_gdb -ex run -ex 'echo @@fibers\n' -ex 'weft fibers' -ex 'echo @@end\n' "${dump[@]}" \
  --args "$program" abort >"$work/abort.log"
skip_if_ptrace_refused "$work/abort.log"
id=$(section "$work/abort.log" fibers | awk '/ gdb-consumer .*Channel::receive/ {print $1; exit}')
if [ -z "$id" ]; then
  fail "weft fibers at the abort lists no fiber \"gdb-consumer\" parked on Channel::receive:"
  sed 's/^/    | /' "$work/abort.log"
  id=1
fi
if [ ${#dump[@]} -ne 0 ] && [ ! -s "$core" ]; then
  fail "gdb wrote no core file at the abort:"
  sed 's/^/    | /' "$work/abort.log"
fi

commands=(-ex 'echo @@bt\n' -ex 'weft bt' -ex 'echo @@fibers\n' -ex 'weft fibers'
          -ex 'echo @@fiber\n' -ex "weft fiber $id bt" -ex 'echo @@tasks\n' -ex 'weft tasks'
          -ex 'echo @@end\n')

# 3. The live process at the breakpoint.
run_gdb -ex 'break weftGdbBreakHere' -ex run "${commands[@]}" --args "$program" >"$work/live.log"
skip_if_ptrace_refused "$work/live.log"
check_session live "$work/live.log" "$id"

# 4. The core file (the aborting run's own in-process dump is in abort.log).
if [ ${#dump[@]} -ne 0 ] && [ -s "$core" ]; then
  run_gdb "${commands[@]}" "$program" "$core" >"$work/core.log"
  awk '/^in-process dumpTasks:$/ {on = 1} on {print} /^end of in-process output$/ {exit}' \
    "$work/abort.log" >>"$work/core.log"
  check_session core "$work/core.log" "$id"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed. gdb's full output:"
  for log in live core; do
    [ -f "$work/$log.log" ] && { echo "--- $log"; cat "$work/$log.log"; }
  done
  exit 1
fi
if [ ${#dump[@]} -ne 0 ]; then
  echo "PASS: tools/gdb/weft.py on a live process and on a core file (fiber $id)"
else
  echo "PASS: tools/gdb/weft.py on a live process (fiber $id)"
fi
