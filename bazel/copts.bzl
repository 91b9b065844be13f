"""Compiler options for weft's own Bazel targets."""

# Warnings as in CMake. -Werror only with --define=weft_werror=true (set by weft's own
# .bazelrc), so a project that depends on weft never builds it with -Werror.
WEFT_COPTS = [
    "-Wall",
    "-Wextra",
] + select({
    "//bazel:werror": ["-Werror"],
    "//conditions:default": [],
})

# The lazy_fn<N> benchmark chains recurse 1000 templates deep.
WEFT_BENCHMARK_COPTS = WEFT_COPTS + ["-ftemplate-depth=2048"]

def weft_fiber_backend_select(asm_x86_64, asm_aarch64, boost):
    """select() over weft's fiber switch core: its own assembly on x86-64 and aarch64,
    Boost.Context's fcontext with --define=weft_fiber_backend=boost or elsewhere.

    Args:
      asm_x86_64: the value with weft's x86-64 assembly.
      asm_aarch64: the value with weft's aarch64 assembly.
      boost: the value with Boost.Context.
    Returns:
      A select().
    """
    return select({
        "//bazel:x86_64_boost": boost,
        "//bazel:aarch64_boost": boost,
        "//bazel:x86_64": asm_x86_64,
        "//bazel:aarch64": asm_aarch64,
        "//conditions:default": boost,
    })

def weft_io_uring_select(io_uring, epoll_only):
    """select() over the event loops built: io_uring (liburing) and epoll by default, epoll
    only with --define=weft_io_uring=off (.bazelrc: --config=epoll), for systems without
    liburing, as CMake's -DWEFT_IO_URING=OFF.

    Args:
      io_uring: the value when the io_uring loop is built (the default).
      epoll_only: the value with --define=weft_io_uring=off.
    Returns:
      A select().
    """
    return select({
        "//bazel:epoll_only": epoll_only,
        "//conditions:default": io_uring,
    })

def weft_task_tracking_select(on, off):
    """select() over task tracking (WEFT_TASK_TRACKING): on by default in every
    compilation mode, off with --define=weft_task_tracking=off (.bazelrc:
    --config=notracking), as CMake's -DWEFT_TASK_TRACKING=OFF.

    Args:
      on: the value with task tracking (the default).
      off: the value with --define=weft_task_tracking=off.
    Returns:
      A select().
    """
    return select({
        "//bazel:no_task_tracking": off,
        "//conditions:default": on,
    })
