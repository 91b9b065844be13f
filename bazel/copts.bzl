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
