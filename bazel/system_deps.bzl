"""Repositories for building weft offline against system packages (Debian/Ubuntu)."""

def weft_system_deps():
    """GoogleTest, GoogleMock and Google Benchmark as installed by apt.

    The headers are declared from /usr/include/{gtest,gmock,benchmark} (so Bazel notices
    when the package changes) and are found by the compiler in /usr/include, where they
    already are; /usr/include is never added with `includes` (that would put every
    system header behind a Bazel include path). The libraries are linked with -l,
    which finds them in the default library path of any multiarch layout.

    Repositories: @system_googletest (//:gtest, //:gtest_main, //:gmock),
    @system_benchmark (//:benchmark, //:benchmark_main), @system_boost (//:context:
    Boost.Context, for the Boost fiber backend and the switch benchmarks),
    @system_openssl (//:ssl: OpenSSL 3's libssl and libcrypto, for weft's //:tls).
    """
    native.new_local_repository(
        name = "system_googletest",
        path = "/usr/include",
        build_file = "@weft//bazel:googletest.BUILD",
    )
    native.new_local_repository(
        name = "system_benchmark",
        path = "/usr/include",
        build_file = "@weft//bazel:benchmark.BUILD",
    )
    native.new_local_repository(
        name = "system_openssl",
        path = "/usr/include",
        build_file = "@weft//bazel:openssl.BUILD",
    )
    native.new_local_repository(
        name = "system_boost",
        path = "/usr/include",
        build_file = "@weft//bazel:boost.BUILD",
    )

def weft_offline_toolchain_repositories(weft_root = ""):
    """Local stand-ins for the repositories Bazel 4 downloads into every workspace.

    Args:
      weft_root: path of the weft checkout relative to the main workspace ("" in
        weft itself; e.g. "third_party/weft/" when another offline workspace vendors it).

    rules_cc: cc/defs.bzl re-exporting the native C++ rules (all that weft loads).
    rules_java: java/defs.bzl re-exporting the native Java rules: weft has no Java, but
      @bazel_tools//tools/jdk loads it when Bazel registers its default toolchains.
    remote_coverage_tools: the coverage helpers every test rule depends on implicitly;
    only `bazel coverage` runs them, so the stand-ins fail loudly if ever run.
    """
    native.local_repository(name = "rules_cc", path = weft_root + "bazel/local/rules_cc")
    native.local_repository(name = "rules_java", path = weft_root + "bazel/local/rules_java")
    native.local_repository(
        name = "remote_coverage_tools",
        path = weft_root + "bazel/local/remote_coverage_tools",
    )
