#pragma once

// The runtime integrator's hooks: what a runtime built beside weft's coroutines uses to
// take part in weft's await dispatch, async backtraces and task dumps the way weft's own
// fibers (weft::stackful) do. Not for applications, and not for awaitable authors (their
// kit is coro/awaitable_support.h).
//
// These are weft's own mechanisms under public names (namespace weft::runtime), so that a
// module other than coro/ never reaches into coro's detail/. Their shape follows the
// implementation: they may change in a minor version, with a changelog entry
// (docs/versioning.md). What each is, with its contract, errors and thread safety, is
// what its comment at the definition says (coro/detail/*.h). In brief:
//
//  Await dispatch (one for `co_await x` in a Lazy and `weft::await(x)` in a fiber):
//    bindAwaitable(a, executor, token)  what an await in a Lazy bound to `executor` and
//                                       `token` awaits: `a` itself for a Lazy,
//                                       coAwait(executor, token), coAwait(executor), else
//                                       a ViaAwaiter (coro/awaitable_support.h);
//    BoundAwaitable<A>, kIsLazy<T>      its type; whether T is a Lazy.
//  Promises and async chains:
//    PromiseBase                        the base of a Lazy's promise, for a coroutine
//                                       type of one's own that awaits as a Lazy does (its
//                                       executor, token, continuation, completion sink);
//    CompletionSink                     where a finished Lazy goes when that is not "its
//                                       awaiter": a plain function pointer and the data
//                                       an async backtrace reads through it;
//    AsyncParent, asyncParentOf(h)      who waits for a coroutine, one step up its chain.
//  The one-shot result (what spawn's JoinHandle and spawnFiber's FiberFuture share):
//    OneShotResult<T, Owner>            a result published once by concurrent work, awaited
//                                       once or detached, freed by the side done last;
//    OneShotRef<State>,                 the handle's owning share of it, and its await
//    OneShotAwaiter<State>              (coro/detail/one_shot.h).
//  What a suspended coroutine or fiber waits on (task dumps, gdb):
//    WaitNote, DescribeWait,            an awaiter and how to describe it
//    describeAwaiter<Awaiter>           (its describeWait(std::string&), else its type).
//  The registry of tasks and fibers, and the dump gate (task dumps read other threads'
//  waits without reading freed memory):
//    FiberSlot, RegistryCursor,         a slot listing one fiber-like task in the calling
//    localRegistryCursor(),             thread's ring; claim and release;
//    claimSlot<FiberSlot>, releaseSlot,
//    refillFiberIds
//    TaskDumpEntry, DumpFiber,          how a dump lists such a slot's subject: the runtime
//    setFiberDumper(f)                  registers one function that fills the entry;
//    DumpRead, passDumpGate(word)       a dump's read of one task, and the owner's side.
//  Build configuration (macros): WEFT_ASAN, WEFT_TSAN (0/1: the sanitizer in effect, for
//  a runtime that switches stacks and must tell the sanitizer), WEFT_TASK_TRACKING.
//
// Thread safety and errors: as stated at each definition.
// Example (a coroutine type of one's own that awaits as a Lazy does):
//   struct MyPromise : weft::runtime::PromiseBase { /* get_return_object ... */ };
//   auto&& bound = weft::runtime::bindAwaitable(std::move(x), executor, token);

#include "weft/coro/detail/config.h"
#include "weft/coro/detail/dump_gate.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/detail/one_shot.h"
#include "weft/coro/detail/registry_slot.h"
#include "weft/coro/detail/task_registry.h"
#include "weft/coro/detail/wait_note.h"

namespace weft::runtime {

// Await dispatch.
using detail::bindAwaitable;
using detail::BoundAwaitable;
using detail::kIsLazy;

// Promises and async chains.
using PromiseBase = detail::LazyPromiseBase;
using detail::AsyncParent;
using detail::asyncParentOf;
using detail::CompletionSink;

// The one-shot result.
using detail::OneShotAwaiter;
using detail::OneShotRef;
using detail::OneShotResult;

// Wait descriptions.
using detail::describeAwaiter;
using detail::DescribeWait;
using detail::WaitNote;

// The registry of tasks and fibers; the dump gate.
using detail::claimSlot;
using detail::DumpFiber;
using detail::DumpRead;
using detail::FiberSlot;
using detail::localRegistryCursor;
using detail::passDumpGate;
using detail::refillFiberIds;
using detail::RegistryCursor;
using detail::releaseSlot;
using detail::setFiberDumper;
using detail::TaskDumpEntry;

}  // namespace weft::runtime
