#pragma once

#include <csignal>
#include <iosfwd>

namespace weft {

// dumpTasks(out): writes every live root task and every fiber of the process to `out`,
// as Go writes its goroutines: what each is, how long since it first waited (a task's
// age: weft reads the clock once per task, at its first wait), what it waits on, and its
// async backtrace (coro/async_backtrace.h) from the coroutine that waits up to its root.
// Tasks are listed by number (a task takes it at its first wait, or from the first dump
// that lists it before), then fibers by id.
//
//   weft: 2 tasks, 1 fiber
//
//   task 17 (start()), age 1.204 s: waiting on Mutex::lock (mutex 0x5616f2a0)
//     #0 coroutine updateAccount(int) at src/bank.cc:41
//     #1 coroutine handleRequest(Request) at src/server.cc:88
//     #2 start()
//
//   fiber 3 "reader": parked on Channel::receive (channel 0x5616f410),
//   stack 1.2 KiB of 256 KiB in use
//     #0 native consume(weft::Channel<int>&) at src/reader.cc:19
//     #1 fiber 3 "reader"
//
// Root tasks are the Lazys started by syncAwait, start() (a Task's too), spawn() and
// TaskGroup::spawn() (listed with WEFT_TASK_TRACKING); a Lazy awaited by another is shown
// in its root's backtrace, and the branches of a collect behind the collect ("waiting on
// collectAll of 3 branches"). A task whose innermost coroutine waits on nothing is
// "running or runnable", shown by its root coroutine.
//
// Consistency: a dump of a busy process is a snapshot taken one task at a time. Each
// task, and each fiber, is read at one instant: what its innermost coroutine waits on
// and the async backtrace are those of one moment, and a wait (or a task) the dump has
// seen cannot end until the dump has read that task (whoever resumes or ends it waits at
// the dump gate, coro/detail/dump_gate.h, no longer than the dump takes to read one
// task: a few words per coroutine of its chain and a line describing its wait). Different
// tasks are read at different instants, so two tasks that hand work to each other may
// both show as waiting; a task that started or finished during the dump may be missing
// or listed. The dump never reads memory that has been freed or reused meanwhile (a
// finished child's frame, an awaiter whose wait ended, a fiber's stack): waits are
// published and unpublished in an order that, with one membarrier() when the dump
// starts, lets it read them safely. Running tasks pay a load and a branch where a wait
// or a task ends, and nothing else unless a dump runs. A kernel without membarrier
// (before 4.3, or a seccomp filter that refuses it): tasks and fibers are listed by
// number only, and the first line says why. Symbolizing (addr2line, see AsyncBacktrace)
// is done after letting go of the tasks.
// Errors: what writing to `out` throws. Thread safety: any thread, any time, including
// from inside a task (which then shows itself as running); concurrent dumps take turns.
//
// Example:
//   weft::dumpTasks(std::cerr);
void dumpTasks(std::ostream& out);

// installDumpOnSignal(signal): from now on, `kill -<signal> <pid>` makes the process
// write dumpTasks() to stderr and go on (Go's SIGQUIT dump, without the exit). The
// handler only writes a byte to a pipe; a thread of weft's, started by the first call,
// makes the dump. It replaces any handler the signal had. Setting the environment
// variable WEFT_DUMP_SIGNAL (a number, or a name such as QUIT or USR1) does the same at
// start-up, before main(), in every program that uses a Lazy or a fiber, however it links
// weft (coro/detail/dump_signal_hook.h).
// Errors: std::system_error if the pipe, the thread or sigaction fails;
// std::invalid_argument for SIGKILL, SIGSTOP or a number that is not a signal.
// Thread safety: any thread; installing the same signal twice is harmless.
//
// Example:
//   weft::installDumpOnSignal(SIGQUIT);  // then: kill -QUIT <pid>
void installDumpOnSignal(int signal = SIGQUIT);

}  // namespace weft
