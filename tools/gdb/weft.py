# weft's gdb extension: async backtraces, fibers and task dumps, read from memory.
#
# Load it with one line (in gdb, or in ~/.gdbinit):
#   source /path/to/weft/tools/gdb/weft.py
# Commands (`weft help` lists them):
#   weft bt              the selected thread's native frames down to the innermost weft
#                        coroutine, then that coroutine's async chain (who awaits it)
#   weft fibers          every live fiber: id, state, stack in use, name, what it waits on
#   weft fiber <id> bt   the native stack of a suspended fiber, from its saved context
#   weft tasks           every pending root task and fiber, as weft::dumpTasks() prints
#
# Read-only, so that it works on a core file as on a live process: everything is read
# from the inferior's memory; no register or memory is written and no function of the
# program is called. `weft fiber <id> bt` unwinds the fiber through a temporary unwinder
# (gdb.unwinder) that makes frame #0's caller the fiber's saved context, and removes it
# afterwards.
#
# Layouts: from the program's debug information where it has the type (most of weft's
# headers' types are described by any -g build that uses them), else from the constants
# below, which mirror weft's headers for LP64 Linux with libstdc++ (x86-64, aarch64). A
# change to those structures is a change here (and test/tools/gdb_extension_test.sh
# fails if they drift). Names are found through the ELF symbol table (`info symbol`),
# which every build has; file:line through the debug information.

import re
import struct
import time

import gdb

try:
    import gdb.unwinder as _unwinder_module
except ImportError:  # a gdb without Python unwinders: `weft fiber N bt` says so
    _unwinder_module = None

# --- layouts (weft's headers) -----------------------------------------------------------

_PTR = 8
_MAX_ASYNC_DEPTH = 256  # coro/async_backtrace.h kMaxAsyncDepth
_MAX_NATIVE_FRAMES = 512

# A coroutine frame (g++ and clang++): resume function, destroy function, promise.
_PROMISE_IN_FRAME = 16
# AsyncParent tags (coro/detail/lazy_promise.h).
_TAG_PROMISE, _TAG_SINK, _TAG_FOREIGN, _TAG_MASK = 0, 1, 2, 3
# RegistrySlot::subject and FiberSlot::subject values (coro/detail/registry_slot.h).
_SLOT_FREE, _SLOT_END = 0, 1

# FiberCore::State (stackful/detail/fiber_core.h) and FiberStack::Kind (fiber_stack.h).
_FIBER_STATES = {0: "created", 1: "suspended", 2: "running", 3: "done"}
_STATE_SUSPENDED, _STATE_RUNNING = 1, 2
_KIND_SHARED = 1

# type name -> {field: fallback offset}. The debug information wins when it has the type.
_FALLBACK = {
    "weft::detail::LazyPromiseBase": {
        "continuation_": 0, "asyncParent_": 8, "executor_": 16, "rootRecord_": 24, "token_": 32},
    "weft::detail::CompletionSink": {
        "onComplete_": 0, "traceLabel_": 8, "traceFiber_": 16, "traceParent_": 24},
    "weft::detail::WaitNote": {"describe": 0, "awaiter": 8},
    "weft::detail::LazyWaitNote": {"describe": 0, "awaiter": 8, "waiter": 16,
                                   "suspendPoint": 24},
    # registry_slot.h and task_registry.cc: the registry of tasks and fibers.
    "weft::detail::RegistrySlot": {"subject": 0, "sizeof": 8},
    "weft::detail::TaskRecord": {"wait": 0, "id": 8, "firstWaitMs": 16, "root": 24, "slot": 32},
    "weft::detail::FiberSlot": {"subject": 0, "sizeof": 8},
    "weft::detail::RegistryRing": {"next": 0, "capacity": 8, "sizeof": 32},
    # RegistryThread {nextThread; RegistryRings tasks; RegistryRings fibers; ...}, each
    # RegistryRings {atomic<RegistryRing*> rings; ...; 32 bytes}.
    "weft::detail::RegistryThread": {"nextThread": 0, "tasks": 8, "fibers": 40},
    "weft::detail::RegistryRings": {"rings": 0},
    # FiberCore is polymorphic: its vtable pointer comes first, then its registry slot.
    "weft::detail::FiberCore": {
        "registrySlot_": 8, "context_": 16, "extras_": 40, "parkLink_": 48, "id_": 56,
        "stack_": 64, "state_": 98},
    # FiberStack {union {OwnSlot own_ (a ProtectedStack first); SharedSlot shared_ (a
    # SharedStack* first);}; Kind kind_; ...}.
    "weft::detail::FiberStack": {"own_": 0, "shared_": 0, "kind_": 32},
    "weft::detail::FiberExtras": {"name": 0},
    "weft::ProtectedStack": {"mapping_": 0, "mappingSize_": 8, "guardSize_": 16},
    # SharedStack {ProtectedStack stack_; FiberStack* owner_; ...}.
    "weft::SharedStack": {"stack_": 0, "owner_": 24},
    "weft::detail::ParkLink": {"driver": 16, "parkSite": 48, "waitNote": 56},
}

# Saved contexts (stackful/detail/context_layout.h): register -> offset in the record the
# context handle points at, and the record's size (the stack pointer after the switch
# returns). "pc" names the slot of the return address.
_CONTEXT_LAYOUTS = {
    ("weft", "x86-64"): ({"rbx": 0x08, "rbp": 0x10, "r12": 0x18, "r13": 0x20, "r14": 0x28,
                          "r15": 0x30, "pc": 0x38}, 0x40, "rsp", "rip"),
    ("weft", "aarch64"): (dict([("x%d" % (19 + i), 0x40 + 8 * i) for i in range(10)] +
                               [("x29", 0x90), ("x30", 0x98), ("pc", 0x98)]), 0xb0, "sp", "pc"),
    # WEFT_FIBER_BACKEND=boost: Boost.Context's fcontext records.
    ("boost", "x86-64"): ({"r12": 0x08, "r13": 0x10, "r14": 0x18, "r15": 0x20, "rbx": 0x28,
                           "rbp": 0x30, "pc": 0x38}, 0x40, "rsp", "rip"),
    ("boost", "aarch64"): (dict([("x%d" % (19 + i), 0x40 + 8 * i) for i in range(10)] +
                                [("x29", 0x90), ("x30", 0x98), ("pc", 0xa0)]), 0xb0, "sp", "pc"),
}


class _Layout:
    """Field offsets, from the debug information when it describes the type."""

    def __init__(self):
        self._cache = {}
        self._types = {}

    def type(self, name):
        """The type `name` from the debug information, or None."""
        if name not in self._types:
            try:
                self._types[name] = gdb.lookup_type(name).strip_typedefs()
            except gdb.error:
                self._types[name] = None
        return self._types[name]

    @staticmethod
    def _find_field(type_, name, base):
        for field in type_.fields():
            if not hasattr(field, "bitpos"):
                continue  # a static member
            offset = base + field.bitpos // 8
            if field.name == name:
                return offset
            # Anonymous unions and base classes: look inside.
            if field.name is None or field.is_base_class:
                inner = _Layout._find_field(field.type.strip_typedefs(), name, offset)
                if inner is not None:
                    return inner
        return None

    def has_field(self, type_name, field):
        """False when the debug information describes `type_name` without `field` (a member
        compiled out); True otherwise, also when there is no debug information."""
        type_ = self.type(type_name)
        return type_ is None or self._find_field(type_, field, 0) is not None

    def offset(self, type_name, field):
        key = (type_name, field)
        if key not in self._cache:
            type_ = self.type(type_name)
            found = None
            if type_ is not None:
                if field == "sizeof":
                    found = type_.sizeof
                else:
                    found = self._find_field(type_, field, 0)
            self._cache[key] = found if found is not None else _FALLBACK[type_name][field]
        return self._cache[key]


_layout = _Layout()


def _off(type_name, field):
    return _layout.offset(type_name, field)


# --- memory -----------------------------------------------------------------------------

def _memory(address, size):
    return gdb.selected_inferior().read_memory(address, size).tobytes()


def _u64(address):
    return struct.unpack("<Q", _memory(address, 8))[0]


def _u32(address):
    return struct.unpack("<I", _memory(address, 4))[0]


def _u8(address):
    return _memory(address, 1)[0]


def _cstring(address, limit=4096):
    out = b""
    while len(out) < limit:
        chunk = _memory(address + len(out), 64)
        end = chunk.find(b"\0")
        if end >= 0:
            return (out + chunk[:end]).decode("utf-8", "replace")
        out += chunk
    return out.decode("utf-8", "replace")


def _std_string(address):
    """A libstdc++ std::string: {char* data; size_t size; ...}."""
    data = _u64(address)
    size = _u64(address + 8)
    if data == 0 or size > 4096:
        return None
    return _memory(data, size).decode("utf-8", "replace") if size else ""


def _is_live():
    """True for a live process on this machine, whose clocks are ours."""
    inferior = gdb.selected_inferior()
    try:
        connection = inferior.connection
        return connection is not None and connection.type == "native" and inferior.pid > 0
    except AttributeError:  # gdb < 12: no connection; a core file has no threads running
        return inferior.pid > 0 and "core" not in gdb.execute("info target", to_string=True)


# --- symbols ----------------------------------------------------------------------------

_SYMBOL_LINE = re.compile(r"^(\S+)(?: \+ (\d+))? in section \S+")


class _Symbols:
    """Function names from the ELF symbol table (as weft's own symbolizer finds them),
    demangled with gdb's demangler."""

    def __init__(self):
        self._minimal = {}
        self._demangled = {}

    def minimal(self, address):
        """(mangled name, offset) of the function at `address`, or None."""
        if address not in self._minimal:
            saved = (gdb.parameter("print demangle"), gdb.parameter("print asm-demangle"))
            try:
                gdb.execute("set print demangle off", to_string=True)
                gdb.execute("set print asm-demangle off", to_string=True)
                text = gdb.execute("info symbol 0x%x" % address, to_string=True)
            except gdb.error:
                text = ""
            finally:
                gdb.execute("set print demangle %s" % ("on" if saved[0] else "off"),
                            to_string=True)
                gdb.execute("set print asm-demangle %s" % ("on" if saved[1] else "off"),
                            to_string=True)
            match = _SYMBOL_LINE.match(text.strip())
            self._minimal[address] = (
                (match.group(1), int(match.group(2) or 0)) if match else None)
        return self._minimal[address]

    def demangle(self, mangled):
        if mangled not in self._demangled:
            try:
                text = gdb.execute("demangle -l c++ -- %s" % mangled, to_string=True).strip()
            except gdb.error:
                text = ""
            self._demangled[mangled] = text or mangled
        return self._demangled[mangled]

    def function(self, address):
        """The source-level name of the function at `address` (a coroutine's body clone
        named as the coroutine), or None."""
        found = self.minimal(address)
        if found is None:
            try:
                block = gdb.block_for_pc(address)
            except RuntimeError:
                block = None
            while block is not None and block.function is None:
                block = block.superblock
            return block.function.print_name if block is not None else None
        return self.demangle(_original_mangled_name(found[0]))


_symbols = _Symbols()


def _reset():
    """Forgets what earlier commands looked up: the program, its libraries or its debug
    information may have changed since (each command starts afresh)."""
    global _layout, _symbols
    _layout = _Layout()
    _symbols = _Symbols()


def _original_mangled_name(symbol):
    """The mangled name of the function a compiler clone was made from (as weft's
    symbolizer, executors/symbolizer.cc): g++ names a coroutine body "<name>.actor" with a
    parameter of the frame's type, whose name embeds the coroutine's mangled name as
    "<length><original>.Frame"; other clones end in suffixes (".cold", clang++ ".resume")."""
    if not symbol.startswith("_Z"):
        return symbol
    frame = symbol.rfind(".Frame")
    if frame >= 0:
        end = frame + 6
        p = frame
        while p > 0:
            p -= 1
            if not symbol.startswith("_Z", p):
                continue
            length = str(end - p)
            if p >= len(length) and symbol[p - len(length):p] == length:
                return symbol[p:frame]
    dot = symbol.find(".")
    return symbol if dot < 0 else symbol[:dot]


def _is_internal(name):
    """weft's own machinery, left out of async backtraces as in-process
    (coro/async_backtrace.cc isInternal): functions in weft::detail, and the switch core."""
    if name.startswith("weft_context_"):
        return True
    angles = 0
    start = 0
    for i, c in enumerate(name):
        if c == "<":
            angles += 1
        elif c == ">":
            angles -= 1
        elif angles == 0 and c == " ":
            start = i + 1
        elif angles == 0 and c == "(":
            return name.startswith("weft::detail::", start)
    return False


def _filename(symtab):
    """A source file's name as gdb shows it (set filename-display)."""
    display = gdb.parameter("filename-display")
    if display == "absolute":
        return symtab.fullname()
    if display == "basename":
        return symtab.filename.rsplit("/", 1)[-1]
    return symtab.filename


def _source_line(address):
    sal = gdb.find_pc_line(address)
    if sal.symtab is None or sal.line == 0:
        return None
    return "%s:%d" % (_filename(sal.symtab), sal.line)


def _object_name(address):
    name = gdb.solib_name(address)
    if name:
        return name
    try:
        progspace = gdb.current_progspace()
        return progspace.filename
    except RuntimeError:
        return None


# --- async chains -----------------------------------------------------------------------

class _Entry:
    """One frame of an async backtrace (coro/async_backtrace.h AsyncBacktrace::Frame)."""

    def __init__(self, kind, address=None, label=None, suspend_point=None):
        self.kind = kind  # "coroutine", "native" (a return address), "marker"
        self.address = address
        self.label = label
        # A suspended coroutine: the address of its co_await, whose line is shown.
        self.suspend_point = suspend_point

    def function(self):
        if self.kind == "marker":
            return None
        lookup = self.address - 1 if self.kind == "native" else self.address
        return _symbols.function(lookup)

    def text(self):
        if self.kind == "marker":
            return self.label
        lookup = self.address - 1 if self.kind == "native" else self.address
        name = self.function()
        if name is None:
            name = "0x%x" % self.address
            obj = _object_name(self.address)
            if obj:
                name += " in " + obj
        # gdb names an address by its innermost inlined line: the suspend point is in
        # weft's awaiter, inlined at the co_await, whose line gdb's Python API does not
        # give (in-process traces get it from addr2line -i). Then the definition's line.
        where = _source_line(self.suspend_point) if self.suspend_point else None
        if where and ("/coro/" in where or "/stackful/" in where):
            where = None
        if not where:
            where = _source_line(lookup)
        return "%s %s%s" % (self.kind, name, " at " + where if where else "")


def _format_entries(entries, first_number=0, indent=""):
    lines = []
    number = first_number
    for entry in entries:
        if entry.kind != "marker":
            name = entry.function()
            if name is not None and _is_internal(name):
                continue
        lines.append("%s#%d %s" % (indent, number, entry.text()))
        number += 1
    return lines


def _fiber_label(fiber):
    label = "fiber %d" % _u64(fiber + _off("weft::detail::FiberCore", "id_"))
    name = _fiber_name(fiber)
    if name is not None:
        label += ' "%s"' % name
    return label


def _fiber_name(fiber):
    extras = _u64(fiber + _off("weft::detail::FiberCore", "extras_"))
    if extras == 0:
        return None
    name = _std_string(extras + _off("weft::detail::FiberExtras", "name"))
    return name or None


def _append_fiber(entries, fiber):
    """A fiber in a chain (stackful/detail/fiber_registry.cc appendFiber): where it is parked, then it."""
    state = _u8(fiber + _off("weft::detail::FiberCore", "state_"))
    link = _u64(fiber + _off("weft::detail::FiberCore", "parkLink_"))
    if state == _STATE_SUSPENDED and link != 0:
        park_site = _u64(link + _off("weft::detail::ParkLink", "parkSite"))
        if park_site != 0:
            entries.append(_Entry("native", park_site))
    entries.append(_Entry("marker", label=_fiber_label(fiber)))


def _code_of_frame(frame):
    """A code address naming the coroutine of `frame` (async_backtrace.cc codeOfFrame): its
    resume function, or its destroy function once the resume pointer is cleared (g++ clears
    it when the body ends)."""
    resume = _u64(frame)
    return resume if resume != 0 else _u64(frame + _PTR)


def _published_note(promise):
    """The wait note its root task's record publishes (LazyWaitNote*), if the program
    keeps task registries (WEFT_TASK_TRACKING) and `promise` has a root; else 0."""
    if not _layout.has_field("weft::detail::LazyPromiseBase", "rootRecord_"):
        return 0
    record = _u64(promise + _off("weft::detail::LazyPromiseBase", "rootRecord_"))
    if record == 0:
        return 0
    wait = _u64(record + _off("weft::detail::TaskRecord", "wait"))
    return wait if wait != 0 and not wait & 1 else 0


def _suspend_point(promise):
    """Where a suspended coroutine waits (coro/async_backtrace.cc suspendPointOf): its
    published wait's suspend point when the note is its own, else None (a coroutine
    awaiting a Lazy records none; nor does a program without WEFT_TASK_TRACKING)."""
    note = _published_note(promise)
    if note and _u64(note + _off("weft::detail::LazyWaitNote", "waiter")) == promise:
        return _u64(note + _off("weft::detail::LazyWaitNote", "suspendPoint")) or None
    return None


def _async_parent(promise):
    """LazyPromiseBase::asyncParent(): the sink when the continuation is one, else the
    recorded parent (an AsyncParent word)."""
    continuation = _u64(promise + _off("weft::detail::LazyPromiseBase", "continuation_"))
    if continuation & 1:
        return continuation  # AsyncParent::sink(continuation & ~1): the same word
    return _u64(promise + _off("weft::detail::LazyPromiseBase", "asyncParent_"))


def _append_async_chain(entries, word, first_suspended=True):
    """coro/async_backtrace.cc appendAsyncChain, from an AsyncParent word up to its root.
    Every coroutine above the first is suspended; the first too unless `first_suspended`
    is False (it runs, or may)."""
    at = word
    depth = 0
    suspended = first_suspended
    try:
        while at:
            if depth == _MAX_ASYNC_DEPTH:
                entries.append(_Entry(
                    "marker", label="... (chain cut at %d frames)" % _MAX_ASYNC_DEPTH))
                return
            depth += 1
            tag = at & _TAG_MASK
            pointer = at & ~_TAG_MASK
            if tag == _TAG_PROMISE:
                point = _suspend_point(pointer) if suspended else None
                entries.append(_Entry("coroutine", _code_of_frame(pointer - _PROMISE_IN_FRAME),
                                      suspend_point=point))
                suspended = True
                at = _async_parent(pointer)
            elif tag == _TAG_SINK and pointer != 0:
                suspended = True
                sink = pointer
                fiber = _u64(sink + _off("weft::detail::CompletionSink", "traceFiber_"))
                if fiber != 0:
                    _append_fiber(entries, fiber)
                label = _u64(sink + _off("weft::detail::CompletionSink", "traceLabel_"))
                if label != 0:
                    entries.append(_Entry("marker", label=_cstring(label)))
                at = _u64(sink + _off("weft::detail::CompletionSink", "traceParent_"))
            elif tag == _TAG_FOREIGN and pointer != 0:
                # A coroutine weft knows nothing of: named, but its awaiter is unknown.
                entries.append(_Entry("coroutine", _code_of_frame(pointer)))
                return
            else:
                entries.append(_Entry("marker", label="<bad async parent 0x%x>" % at))
                return
    except gdb.MemoryError as e:
        entries.append(_Entry("marker", label="<chain cut: %s>" % e))


# --- what a coroutine or fiber waits on -------------------------------------------------

def _template_argument(name, template):
    """The text between `template<` and its matching `>` in `name`, or None."""
    start = name.find(template + "<")
    if start < 0:
        return None
    start += len(template) + 1
    depth = 1
    for i in range(start, len(name)):
        if name[i] == "<":
            depth += 1
        elif name[i] == ">":
            depth -= 1
            if depth == 0:
                return name[start:i].strip()
    return None


def _split_template_arguments(text):
    args, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
    args.append(text[start:].strip())
    return args


def _typed(address, type_name):
    """The object at `address` as `type_name`, if the debug information has the type."""
    type_ = _layout.type(type_name)
    if type_ is None:
        return None
    return gdb.Value(address).cast(type_.pointer()).dereference()


def _field_address(value, field):
    """The address of the object a member refers to (a reference or a pointer member)."""
    if value is None:
        return None
    try:
        member = value[field]
        type_ = member.type.strip_typedefs()
        if type_.code in (gdb.TYPE_CODE_REF, getattr(gdb, "TYPE_CODE_RVALUE_REF", -1)):
            return int(member.referenced_value().address)
        if type_.code == gdb.TYPE_CODE_PTR:
            return int(member)
        return int(member.address)
    except (gdb.error, gdb.MemoryError):
        return None


# Awaiters that describe themselves in-process (describeWait) -> (what, the member naming
# the object waited on); matched on the type's name without its namespace.
_AWAITERS = [
    (re.compile(r"^weft::detail::SyncWaitAwaiter<weft::detail::MutexLockOp\s*,"), "Mutex::lock",
     "primitive_"),
    (re.compile(r"^weft::detail::SyncWaitAwaiter<weft::detail::SemaphoreAcquireOp\s*,"),
     "Semaphore::acquire", "primitive_"),
    (re.compile(r"^weft::detail::SyncWaitAwaiter<weft::detail::EventWaitOp\s*,"), "Event::wait",
     "primitive_"),
    (re.compile(r"^weft::detail::SyncWaitAwaiter<weft::detail::SharedMutexLockOp<true>"),
     "SharedMutex::lock", "primitive_"),
    (re.compile(r"^weft::detail::SyncWaitAwaiter<weft::detail::SharedMutexLockOp<false>"),
     "SharedMutex::lockShared", "primitive_"),
    (re.compile(r"^weft::detail::LatchArriveAwaiter$"), "Latch::arriveAndWait", "latch_"),
    (re.compile(r"^weft::detail::ConditionVariableWaitAwaiter$"), "ConditionVariable::wait",
     "cv_"),
    (re.compile(r"^weft::detail::ConditionVariablePredicateAwaiter<"),
     "ConditionVariable::wait(predicate)", "cv_"),
    (re.compile(r"^weft::detail::ChannelSendAwaiter<"), "Channel::send", "channel_"),
    (re.compile(r"^weft::detail::ChannelReceiveAwaiter<"), "Channel::receive", "channel_"),
]


def _describe_awaiter(type_name, awaiter):
    """What an awaiter of type `type_name` at `awaiter` waits on, as its describeWait()
    says in-process, from memory."""
    type_name = re.sub(r"\s*(const|volatile|&&|&)\s*$", "", type_name.strip())
    for pattern, what, member in _AWAITERS:
        if pattern.search(type_name):
            target = _field_address(_typed(awaiter, type_name), member)
            if target is None:
                return "%s (awaiter 0x%x)" % (what, awaiter)
            return "%s (0x%x)" % (what, target)
    arguments = _template_argument(type_name, "weft::detail::ChannelOpAwaiter")
    if arguments is not None:
        sender = _split_template_arguments(arguments)[-1] == "true"
        what = "Channel::send" if sender else "Channel::receive"
        target = _field_address(_typed(awaiter, type_name), "channel_")
        return "%s (%s)" % (what, "0x%x" % target if target else "awaiter 0x%x" % awaiter)
    if type_name == "weft::detail::SleepAwaiter":
        return _describe_sleep(awaiter)
    if re.match(r"^weft::FiberFuture<.*>::Awaiter$", type_name):
        try:
            value = _typed(awaiter, type_name)
            return "FiberFuture of fiber %d" % int(value["state_"].dereference()["fiberId_"])
        except (gdb.error, gdb.MemoryError, TypeError):
            return "FiberFuture (awaiter 0x%x)" % awaiter
    if re.match(r"^weft::detail::CollectAwaiter<.*>::Ref$", type_name):
        return _describe_collect(awaiter)
    inner = _template_argument(type_name, "weft::ViaAwaiter")
    if inner is not None and type_name.startswith("weft::ViaAwaiter<"):
        # A foreign awaitable, wrapped: describe what it wraps (its member awaiter_).
        value = _typed(awaiter, type_name)
        inner_address = _field_address(value, "awaiter_")
        if inner_address is None:
            inner_address = _u64(awaiter) if inner.rstrip().endswith("&") else awaiter
        return _describe_awaiter(inner, inner_address)
    # Anything else is named by its type, as typeNameOf() does in-process.
    return "%s (awaiter 0x%x)" % (type_name, awaiter)


def _describe_collect(awaiter):
    """CollectAwaiter<StartAll>::Ref {CollectAwaiter* self;}; CollectAwaiter {size_t
    branches_; CollectBarrier& barrier_; ...}; the barrier is a CompletionSink whose
    traceLabel_ names the collect ("collectAll", "collectAny"...). gdb cannot name a type
    with a lambda argument, so without the type the two first members are read as words."""
    try:
        self = _u64(awaiter)
        branches = _u64(self)
        barrier = _u64(self + 8)
        label = _u64(barrier + _off("weft::detail::CompletionSink", "traceLabel_"))
        name = _cstring(label) if label else "collect"
        return "%s of %d branches" % (name, branches)
    except (gdb.error, gdb.MemoryError):
        return "collect (awaiter 0x%x)" % awaiter


def _describe_sleep(awaiter):
    value = _typed(awaiter, "weft::detail::SleepAwaiter")
    try:
        deadline = int(value["deadline_"]["__d"]["__r"])  # steady_clock: CLOCK_MONOTONIC ns
    except (gdb.error, gdb.MemoryError, TypeError):
        return "sleep (awaiter 0x%x)" % awaiter
    if _is_live():
        left = (deadline - time.clock_gettime_ns(time.CLOCK_MONOTONIC)) // 1000000
        sign = "-" if left < 0 else ""
        left = abs(left)
        return "sleep, due in %s%d.%03d s" % (sign, left // 1000, left % 1000)
    # A core file does not say when it was written: the deadline, on the steady clock.
    return "sleep, due at %.3f s (steady clock)" % (deadline / 1e9)


def _describe_wait_note(note):
    """A WaitNote {describe, awaiter}: its describe function is describeAwaiter<T>, whose
    symbol names the awaiter's type."""
    describe = _u64(note + _off("weft::detail::WaitNote", "describe"))
    awaiter = _u64(note + _off("weft::detail::WaitNote", "awaiter"))
    if describe == 0:
        return None
    found = _symbols.minimal(describe)
    name = _symbols.demangle(found[0]) if found else "0x%x" % describe
    if "weft::detail::describeYield(" in name:
        return "this_fiber::yield(), queued to run"
    awaiter_type = _template_argument(name, "weft::detail::describeAwaiter")
    if awaiter_type is None:
        return "%s (awaiter 0x%x)" % (name, awaiter)
    return _describe_awaiter(awaiter_type, awaiter)


# --- registries -------------------------------------------------------------------------

def _global_address(name):
    try:
        return int(gdb.parse_and_eval("(unsigned long)&'%s'" % name))
    except gdb.error:
        return None


def _registry_slots(kind):
    """The taken slots of one kind ("tasks": RegistrySlots, "fibers": FiberSlots) of the
    registry of tasks and fibers (coro/detail/task_registry.cc: gRegistryThreads, each
    thread's rings of each kind), as (slot, subject) pairs, or None when the program has
    no registry (it uses neither Lazys nor fibers)."""
    head = _global_address("weft::detail::gRegistryThreads")
    if head is None:
        return None
    slot_type = "weft::detail::RegistrySlot" if kind == "tasks" else "weft::detail::FiberSlot"
    slot_size = _off(slot_type, "sizeof")
    subject_offset = _off(slot_type, "subject")
    ring_header = _off("weft::detail::RegistryRing", "sizeof")
    taken = []
    thread = _u64(head)
    threads = 0
    while thread != 0 and threads < 100000:
        rings = thread + _off("weft::detail::RegistryThread", kind)
        ring = _u64(rings + _off("weft::detail::RegistryRings", "rings"))
        while ring != 0:
            capacity = _u64(ring + _off("weft::detail::RegistryRing", "capacity"))
            slots = ring + ring_header
            if capacity > 1 << 24:
                break  # not a ring: a corrupt list
            data = _memory(slots, capacity * slot_size)
            for index in range(capacity):
                subject = struct.unpack_from("<Q", data, index * slot_size + subject_offset)[0]
                if subject not in (_SLOT_FREE, _SLOT_END):
                    taken.append((slots + index * slot_size, subject))
            ring = _u64(ring + _off("weft::detail::RegistryRing", "next"))
        thread = _u64(thread + _off("weft::detail::RegistryThread", "nextThread"))
        threads += 1
    return taken


def _task_slots():
    """The registry slots of root tasks (subject: the task's TaskRecord), as
    weft::dumpTasks reads them, or None without a registry."""
    return _registry_slots("tasks")


def _fibers():
    """Every live fiber's FiberCore address (the registry's fiber slots), by id as
    weft::dumpTasks lists them, or None without a registry."""
    slots = _registry_slots("fibers")
    if slots is None:
        return None
    cores = [subject for _, subject in slots]
    return sorted(cores, key=lambda core: _u64(core + _off("weft::detail::FiberCore", "id_")))


class _Fiber:
    """What a FiberCore says of itself."""

    def __init__(self, core):
        self.core = core
        self.id = _u64(self._member("id_"))
        self.name = _fiber_name(core)
        self.label = _fiber_label(core)
        self.state = _u8(self._member("state_"))
        stack = self._member("stack_")  # its FiberStack
        self.shared = _u8(stack + _off("weft::detail::FiberStack", "kind_")) == _KIND_SHARED
        self.context = _u64(self._member("context_"))
        self.link = _u64(self._member("parkLink_"))
        self.owns_stack = True
        if self.shared:
            # SharedSlot::stack, a SharedStack*, whose owner_ is the FiberStack whose frames
            # are on it.
            shared = _u64(stack + _off("weft::detail::FiberStack", "shared_"))
            protected = shared + _off("weft::SharedStack", "stack_")
            self.owns_stack = _u64(shared + _off("weft::SharedStack", "owner_")) == stack
        else:
            # OwnSlot::stack, a ProtectedStack
            protected = stack + _off("weft::detail::FiberStack", "own_")
        mapping = _u64(protected + _off("weft::ProtectedStack", "mapping_"))
        mapping_size = _u64(protected + _off("weft::ProtectedStack", "mappingSize_"))
        guard = _u32(protected + _off("weft::ProtectedStack", "guardSize_"))
        self.bottom = mapping + guard
        self.top = mapping + mapping_size
        self.size = mapping_size - guard

    def _member(self, field):
        return self.core + _off("weft::detail::FiberCore", field)

    def state_name(self):
        return _FIBER_STATES.get(self.state, "state %d" % self.state)

    def in_use(self):
        """Bytes of its stack in use while suspended (FiberCore::stackInUse), else None."""
        if self.state != _STATE_SUSPENDED or not self.owns_stack:
            return None
        if self.bottom <= self.context <= self.top:
            return self.top - self.context
        return None

    def wait(self):
        """What it is parked on (FiberCore's ParkLink wait note), or None."""
        if self.state != _STATE_SUSPENDED or self.link == 0:
            return None
        return _describe_wait_note(self.link + _off("weft::detail::ParkLink", "waitNote"))

    def trace(self):
        """Who awaits it (stackful/detail/fiber_registry.cc dumpFiber): the chain from its driver."""
        entries = []
        driver = 0
        if self.link != 0:
            driver = _u64(self.link + _off("weft::detail::ParkLink", "driver"))
        if driver != 0:
            # FiberDriverPromise::asAsyncParent(): its completion sink (spawnFiber's state).
            promise = driver + _PROMISE_IN_FRAME
            continuation = _u64(promise + _off("weft::detail::LazyPromiseBase", "continuation_"))
            _append_async_chain(entries, continuation if continuation & 1 else 0)
        else:
            entries.append(_Entry("marker", label=self.label))
        return entries


def _find_fiber(argument):
    fibers = _fibers()
    if fibers is None:
        raise gdb.GdbError("weft: no registry of fibers (weft::detail::gRegistryThreads) in "
                           "this program: it does not use weft's fibers")
    for core in fibers:
        fiber = _Fiber(core)
        if str(fiber.id) == argument or (fiber.name is not None and fiber.name == argument):
            return fiber
    raise gdb.GdbError("weft: no live fiber %s (see `weft fibers`)" % argument)


def _thread_stack_pointers():
    """(thread, stack pointer of its innermost frame) for every thread."""
    selected = gdb.selected_thread()
    try:
        frame_level = gdb.selected_frame().level()
    except gdb.error:
        frame_level = None
    result = []
    try:
        for thread in gdb.selected_inferior().threads():
            try:
                thread.switch()
                result.append((thread, int(gdb.newest_frame().read_register("sp"))))
            except gdb.error:
                pass
    finally:
        if selected is not None and selected.is_valid():
            selected.switch()
            _select_level(frame_level)
    return result


def _select_level(level):
    if level is None:
        return
    try:
        frame = gdb.newest_frame()
        while frame is not None and frame.level() < level:
            frame = frame.older()
        if frame is not None:
            frame.select()
    except gdb.error:
        pass


def _thread_running(fiber):
    for thread, sp in _thread_stack_pointers():
        if fiber.bottom <= sp < fiber.top:
            return thread
    return None


# --- native frames ----------------------------------------------------------------------

def _coroutine_body_kind(frame):
    """"gcc" for a g++ coroutine body (<name>.actor), "clang" for clang++'s (<name>.resume),
    else None."""
    if frame.type() != gdb.NORMAL_FRAME:
        return None
    found = _symbols.minimal(frame.pc())
    if found is None:
        return None
    name = found[0]
    if name.endswith(".cold"):
        name = name[:-5]
    if name.endswith(".actor"):
        return "gcc"
    if name.endswith(".resume"):
        return "clang"
    return None


def _function_start(frame):
    found = _symbols.minimal(frame.pc())
    return frame.pc() - found[1] if found else None


def _plausible_frame(frame_address, resume):
    try:
        return frame_address != 0 and (resume is None or _u64(frame_address) == resume)
    except gdb.MemoryError:
        return False


def _promise_of(frame, kind):
    """(promise address, how it was found) of the coroutine whose body runs in `frame`,
    or (None, why not)."""
    resume = _function_start(frame)
    candidates = []
    if kind == "gcc":
        # The body's parameter: the frame (g++ names it frame_ptr).
        try:
            candidates.append(int(frame.read_var("frame_ptr")))
        except (gdb.error, ValueError, RuntimeError):
            pass
        try:
            address = frame.read_var("_Coro_promise").address
            if address is not None:
                candidates.append(int(address) - _PROMISE_IN_FRAME)
        except (gdb.error, ValueError, RuntimeError):
            pass
    else:
        # clang++: the frame's promise as a local, or the frame itself.
        for name, adjust in (("__promise", _PROMISE_IN_FRAME), ("__coro_frame", 0)):
            try:
                address = frame.read_var(name).address
                if address is not None:
                    candidates.append(int(address) - adjust)
            except (gdb.error, ValueError, RuntimeError):
                pass
    for candidate in candidates:
        if _plausible_frame(candidate, resume):
            return candidate + _PROMISE_IN_FRAME, "debug information"
    # Optimized out: a callee-saved register or a stack slot of the frame that points to
    # a coroutine frame whose resume function is this body.
    if resume is not None:
        seen = set()
        registers = ["rbx", "rbp", "r12", "r13", "r14", "r15", "rdi", "rsi"]
        if "aarch64" in frame.architecture().name():
            registers = ["x%d" % i for i in range(19, 30)] + ["x0"]
        values = []
        for register in registers:
            try:
                values.append(int(frame.read_register(register)))
            except (gdb.error, ValueError):
                pass
        try:
            sp = int(frame.read_register("sp"))
            older = frame.older()
            limit = int(older.read_register("sp")) if older is not None else sp + 256
            for slot in range(sp, min(limit, sp + 4096), 8):
                values.append(_u64(slot))
        except (gdb.error, gdb.MemoryError, ValueError):
            pass
        for value in values:
            if value in seen or value % 8 != 0 or value < 4096:
                continue
            seen.add(value)
            if _plausible_frame(value, resume):
                return (value + _PROMISE_IN_FRAME,
                        "a pointer to its frame found in a register or stack slot")
    return None, "optimized out"


def _frame_function_name(frame):
    function = frame.function()
    if function is not None:
        return function.print_name
    name = frame.name()
    if name:
        return name
    obj = _object_name(frame.pc())
    return "0x%x%s" % (frame.pc(), " in " + obj if obj else "")


def _frame_location(frame):
    sal = frame.find_sal()
    if sal.symtab is None or sal.line == 0:
        return None
    return "%s:%d" % (_filename(sal.symtab), sal.line)


def _strip_parameters(name):
    """"ns::f(int) const" -> "ns::f", as `bt` names a frame."""
    text = re.sub(r"(\s*(const|volatile|noexcept|&&|&))+$", "", name)
    if not text.endswith(")"):
        return name
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            depth -= 1
            if depth == 0:
                stripped = text[:i]
                # "operator()" with no parameters is a name, not a parameter list.
                return stripped if stripped and not stripped.endswith("operator") else name
    return name


_SCALAR_CODES = {gdb.TYPE_CODE_INT, gdb.TYPE_CODE_ENUM, gdb.TYPE_CODE_BOOL,
                 gdb.TYPE_CODE_FLT, gdb.TYPE_CODE_CHAR}


def _frame_arguments(frame):
    """The arguments as `bt` shows them (print frame-arguments scalars)."""
    try:
        block = frame.block()
    except RuntimeError:
        return None
    parts = []
    while block is not None:
        for symbol in block:
            if not symbol.is_argument:
                continue
            try:
                value = frame.read_var(symbol, block)
                if value.is_optimized_out:
                    text = "<optimized out>"
                elif value.type.strip_typedefs().code == gdb.TYPE_CODE_PTR:
                    text = "0x%x" % int(value)
                elif value.type.strip_typedefs().code in _SCALAR_CODES:
                    text = str(value)
                else:
                    text = "..."  # aggregates and references, as bt's default shows them
            except (gdb.error, gdb.MemoryError, RuntimeError, TypeError):
                text = "<error>"
            parts.append("%s=%s" % (symbol.print_name, text))
        if block.function is not None:
            break
        block = block.superblock
    return parts


def _bt_line(number, frame):
    """One frame as `bt` prints it."""
    name = _strip_parameters(_frame_function_name(frame))
    arguments = _frame_arguments(frame)
    text = "#%-2d " % number
    if frame.type() != gdb.INLINE_FRAME:
        text += "0x%016x in " % frame.pc()
    text += name
    if arguments is not None:
        text += " (%s)" % ", ".join(arguments)
    where = _frame_location(frame)
    if where:
        text += " at " + where
    elif frame.function() is None:
        obj = gdb.solib_name(frame.pc())
        if obj:
            text += " from " + obj
    return text


# --- the fiber unwinder -----------------------------------------------------------------

def _architecture():
    name = gdb.selected_inferior().architecture().name() \
        if hasattr(gdb.Inferior, "architecture") else gdb.newest_frame().architecture().name()
    if "x86-64" in name or "x86_64" in name:
        return "x86-64"
    if "aarch64" in name:
        return "aarch64"
    raise gdb.GdbError("weft: fibers are unwound on x86-64 and aarch64, not %s" % name)


def _switch_core():
    """Which switch core saved the contexts: weft's own (stackful/asm) or Boost.Context."""
    if _global_address("weft_jump_context") is not None:
        return "weft"
    if _global_address("jump_fcontext") is not None:
        return "boost"
    return "weft"


if _unwinder_module is not None:
    class _FiberUnwinder(_unwinder_module.Unwinder):
        """Frame #0 of one thread "returns" into a fiber's saved context: its caller is the
        frame that switched the fiber out, and gdb unwinds the rest from there."""

        def __init__(self, ptid, registers, sp_name, pc_name):
            super().__init__("weft-fiber")
            self._ptid = ptid
            self._registers = registers
            self._sp = sp_name
            self._pc = pc_name

        def __call__(self, pending_frame):
            if pending_frame.level() != 0 or gdb.selected_thread().ptid != self._ptid:
                return None
            frame_id = _FrameId(pending_frame.read_register(self._sp),
                                pending_frame.read_register(self._pc))
            info = pending_frame.create_unwind_info(frame_id)
            for register, value in self._registers.items():
                info.add_saved_register(register, value)
            return info


class _FrameId:
    def __init__(self, sp, pc):
        self.sp = sp
        self.pc = pc


def _saved_registers(fiber):
    layout, record_size, sp_name, pc_name = _CONTEXT_LAYOUTS[(_switch_core(), _architecture())]
    word = gdb.lookup_type("unsigned long")
    registers = {}
    for register, offset in layout.items():
        name = pc_name if register == "pc" else register
        registers[name] = gdb.Value(_u64(fiber.context + offset)).cast(word)
    registers[sp_name] = gdb.Value(fiber.context + record_size).cast(word)
    return registers, sp_name, pc_name


def _fiber_frames(fiber):
    """The bt lines of a suspended fiber whose frames are on its stack."""
    if _unwinder_module is None:
        raise gdb.GdbError("weft: this gdb has no Python unwinders (gdb.unwinder)")
    registers, sp_name, pc_name = _saved_registers(fiber)
    thread = gdb.selected_thread()
    if thread is None:
        raise gdb.GdbError("weft: no thread to unwind the fiber from")
    try:
        level = gdb.selected_frame().level()
    except gdb.error:
        level = None
    unwinder = _FiberUnwinder(thread.ptid, registers, sp_name, pc_name)
    _unwinder_module.register_unwinder(None, unwinder, replace=True)
    gdb.invalidate_cached_frames()
    lines = []
    try:
        frame = gdb.newest_frame().older()
        number = 0
        while frame is not None and number < _MAX_NATIVE_FRAMES:
            lines.append(_bt_line(number, frame))
            number += 1
            try:
                frame = frame.older()
            except gdb.error as e:
                lines.append("(gdb stopped unwinding: %s)" % e)
                break
    finally:
        gdb.frame_unwinders.remove(unwinder)
        gdb.invalidate_cached_frames()
        _select_level(level)
    return lines


# --- commands ---------------------------------------------------------------------------

class _WeftCommand(gdb.Command):
    """weft: async backtraces, fibers and tasks of a program using weft.

Usage:
  weft bt              async backtrace of the selected thread: its native frames down to the
                       innermost weft coroutine, then that coroutine's awaiters up to the root
  weft fibers          every live fiber: id, state, stack in use, name, what it waits on
  weft fiber ID bt     the native stack of fiber ID (an id or a name), from its saved
                       context (nothing is resumed, no register is changed)
  weft tasks           every pending root task and fiber and what it waits on, with its
                       async chain (what weft::dumpTasks() prints in-process)
  weft help            this text

Works on a live process and on a core file: it only reads memory."""

    def __init__(self):
        super().__init__("weft", gdb.COMMAND_STACK, gdb.COMPLETE_NONE, True)

    def invoke(self, argument, from_tty):
        if argument.strip():
            raise gdb.GdbError("weft: unknown command 'weft %s' (see `weft help`)" % argument)
        print(self.__doc__)


class _WeftHelp(gdb.Command):
    """Lists weft's gdb commands."""

    def __init__(self):
        super().__init__("weft help", gdb.COMMAND_STACK)

    def invoke(self, argument, from_tty):
        print(_WeftCommand.__doc__)


class _WeftBt(gdb.Command):
    """Async backtrace of the selected thread: the native frames (as `bt`, from the selected
frame) down to the innermost weft coroutine body, then who awaits that coroutine, up to
its root (syncAwait, start(), a fiber...). weft's own internal coroutines are left out, as
in weft::asyncBacktrace(). In a fiber that runs no coroutine: the fiber's frames, the fiber,
then whoever awaits it."""

    def __init__(self):
        super().__init__("weft bt", gdb.COMMAND_STACK)

    def invoke(self, argument, from_tty):
        _reset()
        try:
            frame = gdb.selected_frame()
        except gdb.error:
            raise gdb.GdbError("weft bt: no stack (is the program running, or a core loaded?)")
        lines = []
        chain = None
        number = frame.level()
        while frame is not None and len(lines) < _MAX_NATIVE_FRAMES:
            number = frame.level()
            kind = _coroutine_body_kind(frame)
            if kind is not None:
                name = _symbols.function(frame.pc()) or _frame_function_name(frame)
                where = _frame_location(frame)
                lines.append("#%d coroutine %s%s" % (number, name, " at " + where if where else ""))
                promise, how = _promise_of(frame, kind)
                if promise is not None:
                    if how != "debug information":
                        lines.append("   (weft: its frame pointer is optimized out; the frame at "
                                     "0x%x was found as %s)" % (promise - _PROMISE_IN_FRAME, how))
                    chain = []
                    _append_async_chain(chain, _async_parent(promise))
                    break
                lines.append("weft: the promise of this coroutine cannot be read (%s): its "
                             "async chain is unknown; the native frames follow" % how)
            else:
                where = _frame_location(frame)
                lines.append("#%d native %s%s" % (number, _frame_function_name(frame),
                                                  " at " + where if where else ""))
            try:
                frame = frame.older()
            except gdb.error as e:
                lines.append("(gdb stopped unwinding: %s)" % e)
                break
        if chain is None:
            chain = self._running_fiber_chain()
            if chain is None:
                lines.append("weft: no weft coroutine or fiber on this thread's stack")
        for line in lines:
            print(line)
        if chain:
            for line in _format_entries(chain, number + 1):
                print(line)

    @staticmethod
    def _running_fiber_chain():
        """The chain of the fiber running on the selected thread, if one does."""
        try:
            sp = int(gdb.newest_frame().read_register("sp"))
            fibers = _fibers() or []
        except (gdb.error, gdb.MemoryError):
            return None
        for core in fibers:
            try:
                fiber = _Fiber(core)
            except gdb.MemoryError:
                continue
            if fiber.state == _STATE_RUNNING and fiber.bottom <= sp < fiber.top:
                return fiber.trace()
        return None


class _WeftFibers(gdb.Command):
    """Every live fiber: id, state (created/suspended/running/done), stack in use and its
size, name, and what a suspended fiber is parked on."""

    def __init__(self):
        super().__init__("weft fibers", gdb.COMMAND_STACK)

    def invoke(self, argument, from_tty):
        _reset()
        fibers = _fibers()
        if fibers is None:
            print("weft: no registry of fibers (weft::detail::gRegistryThreads): this program does "
                  "not use weft's fibers")
            return
        rows = [("Id", "State", "Stack in use", "Name", "Parked on")]
        running = None
        for core in fibers:
            try:
                fiber = _Fiber(core)
            except gdb.MemoryError as e:
                rows.append(("?", "?", "?", "?", "<fiber at 0x%x: %s>" % (core, e)))
                continue
            state = fiber.state_name()
            if fiber.state == _STATE_RUNNING:
                if running is None:
                    running = _thread_stack_pointers()
                for thread, sp in running:
                    if fiber.bottom <= sp < fiber.top:
                        state += " (thread %d)" % thread.num
            in_use = fiber.in_use()
            size = "%d KiB" % (fiber.size // 1024)
            if fiber.shared:
                stack = "%s of shared %s" % ("%d B" % in_use if in_use is not None else "?", size)
                if fiber.state == _STATE_SUSPENDED and not fiber.owns_stack:
                    stack = "saved off-stack, shared %s" % size
            else:
                stack = "%s of %s" % ("%d B" % in_use if in_use is not None else "-", size)
            wait = fiber.wait() if fiber.state == _STATE_SUSPENDED else None
            if fiber.state == _STATE_SUSPENDED and wait is None:
                wait = "(a Fiber: its owner resumes it)"
            rows.append((str(fiber.id), state, stack, fiber.name or "", wait or ""))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        print("weft: %d fiber%s" % (len(rows) - 1, "" if len(rows) == 2 else "s"))
        for row in rows:
            line = "  ".join(row[i].ljust(widths[i]) for i in range(4)) + "  " + row[4]
            print(line.rstrip())


class _WeftFiber(gdb.Command):
    """weft fiber ID bt: the native stack of fiber ID (its id, or its name), read from its
saved context without resuming it. A running fiber's frames are its thread's; a fiber of
a shared stack that another fiber occupies has its frames saved off-stack."""

    def __init__(self):
        super().__init__("weft fiber", gdb.COMMAND_STACK)

    def invoke(self, argument, from_tty):
        _reset()
        words = gdb.string_to_argv(argument)
        if not words or len(words) > 2 or (len(words) == 2 and words[1] != "bt"):
            raise gdb.GdbError("usage: weft fiber ID bt (see `weft fibers` for the ids)")
        fiber = _find_fiber(words[0])
        state = fiber.state_name()
        print("%s: %s" % (fiber.label, state + (", parked on " + fiber.wait()
                                                 if fiber.wait() else "")))
        if fiber.state == _STATE_RUNNING:
            thread = _thread_running(fiber)
            if thread is not None:
                print("it runs on thread %d: its frames are that thread's (`thread %d`, then "
                      "`bt`)" % (thread.num, thread.num))
            else:
                print("it is running: its frames are on the thread that runs it")
            return
        if fiber.state != _STATE_SUSPENDED:
            print("no frames: it %s" % ("has not started yet" if fiber.state == 0
                                         else "has finished"))
            return
        if fiber.shared and not fiber.owns_stack:
            print("frames saved off-stack: it is parked on a shared stack that another fiber "
                  "occupies, so its frames are in a save buffer, not at their addresses")
            return
        for line in _fiber_frames(fiber):
            print(line)


class _WeftTasks(gdb.Command):
    """Every pending root task (syncAwait, start(), spawn(), TaskGroup::spawn()) and every
fiber: what it waits on, then its async chain, innermost first, as weft::dumpTasks()
prints in-process. On a core file, ages are not known: when each task first waited is
shown."""

    def __init__(self):
        super().__init__("weft tasks", gdb.COMMAND_STACK)

    def invoke(self, argument, from_tty):
        _reset()
        slots = _task_slots()
        if slots is None:
            raise gdb.GdbError("weft: no registry of tasks (weft::detail::gRegistryThreads) in "
                               "this program: is it linked with weft?")
        fibers = _fibers() or []
        now = None
        if _is_live():
            # CLOCK_MONOTONIC_COARSE (6 on Linux; Python's time module may not name it).
            clock = getattr(time, "CLOCK_MONOTONIC_COARSE", 6)
            now = time.clock_gettime_ns(clock) // 1000000
        tasks = sorted((self._task(slot, subject, now) for slot, subject in slots),
                       key=lambda task: task[0])
        blocks = [lines for _, lines in tasks]
        for core in fibers:
            blocks.append(self._fiber(core))
        count = len(fibers)
        # As in-process: a program built without WEFT_TASK_TRACKING registers no root task.
        untracked = not _layout.has_field("weft::detail::LazyPromiseBase", "rootRecord_")
        print("weft: %d task%s, %d fiber%s%s" % (
            len(tasks), "" if len(tasks) == 1 else "s", count, "" if count == 1 else "s",
            " (root tasks are listed in builds with WEFT_TASK_TRACKING=1)" if untracked
            else ""))
        for block in blocks:
            print("")
            for line in block:
                print(line)

    @staticmethod
    def _task(slot, record, now):
        """coro/task_dump.cc dumpTask: (its number, its lines). What its record publishes:
        the innermost coroutine's wait and the chain from it, or, when nothing is published
        (it runs or is queued), the root alone. A listed task has waited once at least."""
        try:
            wait = _u64(record + _off("weft::detail::TaskRecord", "wait"))
            number = _u64(record + _off("weft::detail::TaskRecord", "id"))
            root = _u64(record + _off("weft::detail::TaskRecord", "root"))
            title = "task %s" % (number if number else "?")
            continuation = _u64(root + _off("weft::detail::LazyPromiseBase", "continuation_"))
            if continuation & 1:
                label = _u64((continuation & ~1) + _off("weft::detail::CompletionSink",
                                                        "traceLabel_"))
                if label != 0:
                    title += " (%s)" % _cstring(label)
            first = struct.unpack("<q", _memory(
                record + _off("weft::detail::TaskRecord", "firstWaitMs"), 8))[0]
            if now is not None:
                age = now - first
                title += ", age %d.%03d s" % (age // 1000, age % 1000)
            else:
                title += ", first waited at %d.%03d s (monotonic clock)" % (
                    first // 1000, first % 1000)
            entries = []
            if wait != 0:
                state = "waiting on " + (_describe_wait_note(wait) or "?")
                waiter = _u64(wait + _off("weft::detail::LazyWaitNote", "waiter"))
                _append_async_chain(entries, waiter)  # AsyncParent::promise(waiter)
            else:
                state = "running or runnable"
                _append_async_chain(entries, root, first_suspended=False)
        except gdb.MemoryError as e:
            return (0, ["task slot at 0x%x: unreadable (%s)" % (slot, e)])
        return (number, ["%s: %s" % (title, state)] + _format_entries(entries, 0, "  "))

    @staticmethod
    def _fiber(core):
        """stackful/detail/fiber_registry.cc dumpFiber."""
        try:
            fiber = _Fiber(core)
            if fiber.state == 0:
                state = "created, not started yet"
            elif fiber.state == _STATE_RUNNING:
                state = "running"
            elif fiber.state == _STATE_SUSPENDED:
                wait = fiber.wait()
                state = ("parked on " + wait) if wait else \
                    "suspended (a Fiber: its owner resumes it)"
                in_use = fiber.in_use() or 0
                state += ", stack %.1f KiB of %d KiB in use" % (in_use / 1024.0,
                                                                 fiber.size // 1024)
            else:
                state = "finished"
            entries = fiber.trace()
        except gdb.MemoryError as e:
            return ["fiber at 0x%x: unreadable (%s)" % (core, e)]
        return ["%s: %s" % (fiber.label, state)] + _format_entries(entries, 0, "  ")


_WeftCommand()
_WeftHelp()
_WeftBt()
_WeftFibers()
_WeftFiber()
_WeftTasks()
