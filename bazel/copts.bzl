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
