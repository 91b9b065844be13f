// The smallest program using weft, built against weft the three ways a user can
// (test/consumer/run.sh). Prints "consumer: ok" and exits 0 when weft works.
#include <cstdio>

#include <array>
#include <cstddef>

#include <weft/coro/lazy.h>
#include <weft/coro/sync_await.h>
#include <weft/executors/thread_pool.h>
#include <weft/io/tcp_listener.h>
#include <weft/io/tcp_stream.h>

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
  if (inline_result != 42 || pool_result != 42 || io_result != '*') {
    std::printf("consumer: wrong results %d %d %d\n", inline_result, pool_result, io_result);
    return 1;
  }
  std::printf("consumer: ok\n");
  return 0;
}
