#pragma once

#include <atomic>
#include <cstdint>

#include "weft/coro/detail/config.h"

namespace weft::detail {

// The dump gate: how a task dump (weft::dumpTasks, coro/task_dump.h) reads coroutines and
// fibers that other threads run, without ever reading what has been freed or reused.
//
// A dump follows pointers that their owners publish as they suspend (a root task's note
// of what its innermost coroutine waits on; a fiber's park) or as they start (a fiber, or
// a root task at its first wait, in its registry slot, coro/detail/registry_slot.h) into
// memory that their owners free or reuse once the wait or the task is over (an awaiter in
// a frame or on a fiber's stack, a slot of a frame that the next co_await reuses, the
// frames of a task and its record, a fiber). So every owner, where a wait or a task ends,
// first unpublishes it (withdraws the note, marks the fiber running, releases the registry
// slot) and then passes the gate, before anything it leads to may go:
//
//   owner                                    dump
//   clear the note                           (DumpSession) dumping = 1; heavy barrier
//   passDumpGate: if dumping, wait until     (DumpRead, per task) reading = odd; fence
//     the dump's current read is over          read the notes, describe the waits
//   free the frame, end the awaiter          reading = even
//
// Cost on the owner's side: a load of `dumping` and a branch, never taken unless
// a dump runs; no fence. The dump makes that enough with an asymmetric barrier when it
// starts: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) makes every thread of the process
// execute a full memory barrier, so an owner that read `dumping` as 0 had cleared its
// note before that barrier, and the dump, reading after it, finds the note cleared.
// An owner that sees `dumping` set fences and, if the dump is in the middle of a read,
// waits until that read is over, whichever task it reads (the gate does not know what a
// read can reach): no longer than the dump takes to read one task (a few words per
// coroutine in its chain and a description of what it waits on). A read that starts
// after the owner's fence sees its note cleared (Dekker's pattern, both sides fenced).
// Publishing is a release store, after the note's contents: a dump that reads a note
// (acquire) reads what it leads to as written for this wait, not what an earlier use of
// that memory left (on x86-64: no instruction, only the compiler's ordering).
//
// Why a gate rather than deferring the free of frames while a dump runs: what a note
// leads to is not only frames. The awaiter a note describes lives in a slot of its
// coroutine's frame that the next co_await reuses, or on a fiber's stack, and points to
// objects its owner frees when the wait ends (a FiberFuture's shared state); clang
// allocates the frame of an awaited Lazy inside its caller's (so no free happens at
// all). Holding the wait at its end covers all of these; and it costs the same load and
// branch per await as a check in the frame allocator would.
//
// A read must not end a wait itself (it would wait for its own read): it only reads, and
// describes waits (DescribeWait: no lock, nothing that blocks).
//
// Where the kernel offers no membarrier (neither the expedited nor the global kind),
// dumps cannot synchronise with the owners: DumpSession::canRead() is false, and a dump
// lists tasks and fibers without reading what they wait on.
//
// Thread safety: passDumpGate from any thread, any time (noexcept: loads, a fence, and a
// wait for one read of the dump); DumpSession serialises dumps, and DumpReads are made
// inside one, by its thread.
struct DumpGateWords {
  // Nonzero while a dump runs (DumpSession). Read by every owner, written only by dumps:
  // on a cache line of its own, so the owners' reads always hit.
  alignas(64) std::atomic<std::uint32_t> dumping{0};
  // Odd while the dump reads one task or fiber (DumpRead); only the dump writes it.
  alignas(64) std::atomic<std::uint64_t> reading{0};
};
extern DumpGateWords gDumpGate;

// The owner's slow path: a dump runs; waits until its current read, if any, is over.
// Out of line and cold. noexcept: a fence, loads and a wait.
[[gnu::cold]] WEFT_NOINLINE void waitForDumpRead() noexcept;

// Called by the owner of a published wait after it unpublished it by writing
// `unpublished` (a plain or relaxed store: the note cleared, the fiber's state), and
// before anything the wait led a dump to may be freed or reused. Forced inline: it is on
// the path of every await a dump can see: one load and a branch (x86-64:
// `cmpl $0, gDumpGate(%rip); jne`), the store kept before the load by the compiler
// (WEFT_FLAG_AFTER_STORE), and by the dump's membarrier on the hardware (see above).
template <class T>
[[gnu::always_inline]] inline void passDumpGate(const T& unpublished) noexcept {
  if (WEFT_FLAG_AFTER_STORE(gDumpGate.dumping, unpublished)) [[unlikely]] waitForDumpRead();
}

// A dump, from its start to its end: one at a time (others wait for it). Makes the
// asymmetric barrier described above.
class DumpSession {
 public:
  DumpSession() noexcept;
  ~DumpSession();
  DumpSession(const DumpSession&) = delete;
  DumpSession& operator=(const DumpSession&) = delete;

  // Whether the session of the calling thread's dump may read what tasks and fibers wait
  // on (in DumpReads): false when the kernel offers no membarrier (see above). Only
  // meaningful inside a session.
  static bool canRead() noexcept;
};

// A dump's state of a task or fiber when it cannot read it (DumpSession::canRead false).
inline constexpr char kWaitNotRead[] = "not read (no membarrier: see the first line)";

// The dump's read of one task or fiber, inside a DumpSession: while it lives, no owner
// that published a wait the read can reach gets past passDumpGate(). Keep it short.
class DumpRead {
 public:
  DumpRead() noexcept;
  ~DumpRead();
  DumpRead(const DumpRead&) = delete;
  DumpRead& operator=(const DumpRead&) = delete;
};

}  // namespace weft::detail
