"""weft's tests for Bazel: one cc_test per file, depending on what the file uses."""

load("@rules_cc//cc:defs.bzl", "cc_test")
load("//bazel:copts.bzl", "WEFT_COPTS", "weft_io_uring_select", "weft_task_tracking_select")

# What a test may use (the names in BUILD.bazel's WEFT_TESTS), as Bazel labels. Each test
# also links GoogleTest's main.
_USES = {
    "executors": "//:executors",
    "coro": "//:coro",
    "stackful": "//:stackful",
    "io": "//:io",
    "tls": "//:tls",
    "testing": "//:testing",
    "support": "//:test_support",
    "gmock": "@system_googletest//:gmock",
}

def weft_tests(tests, found):
    """One cc_test per entry of `tests`, named after its file without .cc.

    Args:
      tests: {"test/<module>/<unit>_test.cc": [what it uses: "coro", "io", "support", ...]},
        the weft modules whose headers the file includes (directly or through the
        test/support headers it includes), "support" when it includes test/support/, and
        "gmock" when it uses GoogleMock.
      found: the test files on disk (a glob): each must be in `tests`, so that a new test
        file cannot be left out silently.
    """
    missing = [f for f in found if f not in tests]
    if missing:
        fail("weft: test files not in WEFT_TESTS (BUILD.bazel): " + ", ".join(missing))
    for src, uses in tests.items():
        unknown = [u for u in uses if u not in _USES]
        if unknown:
            fail("weft: %s uses %s; known: %s" % (src, unknown, sorted(_USES.keys())))
        cc_test(
            name = src[:-len(".cc")],
            size = "medium",
            srcs = [src],
            copts = WEFT_COPTS,
            # Whether weft has its io_uring loop (test/io/io_backend_test.cc), and whether
            # task dumps must list root tasks (test/CMakeLists.txt: WEFT_TEST_EXPECT_TRACKING).
            local_defines = weft_io_uring_select(
                epoll_only = ["WEFT_TEST_IO_URING_BUILT=0"],
                io_uring = ["WEFT_TEST_IO_URING_BUILT=1"],
            ) + weft_task_tracking_select(
                off = ["WEFT_TEST_EXPECT_TRACKING=0"],
                on = ["WEFT_TEST_EXPECT_TRACKING=1"],
            ),
            deps = [_USES[u] for u in uses] + ["@system_googletest//:gtest_main"],
        )
