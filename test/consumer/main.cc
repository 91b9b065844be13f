// The smallest program using weft, built against weft every way a user can
// (test/consumer/run.sh). Prints "consumer: ok" and exits 0 when weft works.
//
// WEFT_CONSUMER_EXPECTED_VERSION: the version the package manager reports ("1.0.0": CMake's
// weft_VERSION, pkg-config --modversion, Conan's reference), checked against
// <weft/version.h>. Bazel has no package version: its build defines
// WEFT_CONSUMER_NO_PACKAGE_VERSION instead.
#include <cstdio>

#include <array>
#include <cstddef>
#include <string_view>

#include <weft/coro/lazy.h>
#include <weft/coro/sync_await.h>
#include <weft/executors/thread_pool.h>
#include <weft/io/tcp_listener.h>
#include <weft/io/tcp_stream.h>
#include <weft/stackful/await.h>
#include <weft/stackful/spawn_fiber.h>
#include <weft/version.h>

#if defined(WEFT_CONSUMER_EXPECTED_VERSION)
static_assert(std::string_view(WEFT_VERSION_STRING) == WEFT_CONSUMER_EXPECTED_VERSION,
              "<weft/version.h> disagrees with the package's version");
static_assert(WEFT_VERSION ==
              WEFT_VERSION_MAJOR * 10000 + WEFT_VERSION_MINOR * 100 + WEFT_VERSION_PATCH);
#elif !defined(WEFT_CONSUMER_NO_PACKAGE_VERSION)
#error "define WEFT_CONSUMER_EXPECTED_VERSION to the package's version (\"1.0.0\")"
#endif

namespace {

weft::Lazy<int> answer() { co_return 21; }

weft::Lazy<int> twice() { co_return 2 * co_await answer(); }

// weft::io (and, for the io_uring loop, liburing) links: one byte over 127.0.0.1.
weft::Lazy<int> loopbackByte() {
  auto listener = weft::TcpListener::bind(weft::SocketAddress::loopbackV4(0));
  weft::TcpStream client = co_await weft::TcpStream::connect(listener.localAddress());
  weft::TcpStream server = co_await listener.accept();
  co_await client.writeAll("*");
  std::array<std::byte, 1> byte{};
  co_await server.readExactly(byte);
  co_return static_cast<int>(byte[0]);
}

}  // namespace

int main() {
  weft::ThreadPool pool(2);
  int inline_result = weft::syncAwait(twice());
  int pool_result = weft::syncAwait(twice(), &pool);
  int io_result = weft::syncAwait(loopbackByte(), &pool);
  // weft::stackful (and its switch core) links: a fiber awaiting a Lazy.
  int fiber_result =
      weft::syncAwait(weft::spawnFiber(&pool, [] { return weft::await(twice()) + 1; }));
  if (inline_result != 42 || pool_result != 42 || io_result != '*' || fiber_result != 43) {
    std::printf("consumer: wrong results %d %d %d %d\n", inline_result, pool_result, io_result,
                fiber_result);
    return 1;
  }
  std::printf("consumer: ok (weft %s)\n", WEFT_VERSION_STRING);
  return 0;
}
