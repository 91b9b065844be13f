// The smallest program using weft, built against weft every way a user can
// (test/consumer/run.sh). Prints "consumer: ok" and exits 0 when weft works.
//
// `consumer --raise-dump-signal QUIT` (or USR1), run with WEFT_DUMP_SIGNAL set to that
// signal, also raises it while its pool runs: the task dump that weft installed at
// start-up (docs/debugging.md) must catch it, and the dump goes to stderr. The program
// never names weft's task dump itself, as a service run with WEFT_DUMP_SIGNAL does not.
//
// WEFT_CONSUMER_EXPECTED_VERSION: the version the package manager reports ("1.0.0": CMake's
// weft_VERSION, pkg-config --modversion, Conan's reference), checked against
// <weft/version.h>. Bazel has no package version: its build defines
// WEFT_CONSUMER_NO_PACKAGE_VERSION instead.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include <array>
#include <cstddef>
#include <string>
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

// Reads `fd` into `text` until `text` holds a whole line (stopAtLine) or the end.
void readInto(int fd, std::string& text, bool stopAtLine) {
  std::array<char, 512> buffer{};
  while (!stopAtLine || text.find('\n') == std::string::npos) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.append(buffer.data(), static_cast<std::size_t>(n));
  }
}

// Raises `name` (QUIT or USR1), which WEFT_DUMP_SIGNAL should have given to weft's task
// dump at start-up, and passes the dump on to stderr. False, with a message, when the
// signal has no handler (its default action would end the program) or no dump comes.
bool raiseDumpSignal(std::string_view name) {
  const int number = name == "QUIT" ? SIGQUIT : name == "USR1" ? SIGUSR1 : 0;
  if (number == 0) {
    std::fprintf(stderr, "consumer: --raise-dump-signal takes QUIT or USR1, not %.*s\n",
                 static_cast<int>(name.size()), name.data());
    return false;
  }
  struct sigaction current {};
  if (::sigaction(number, nullptr, &current) != 0 ||
      ((current.sa_flags & SA_SIGINFO) == 0 &&
       (current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN))) {
    std::fprintf(stderr, "consumer: SIG%.*s has no handler: WEFT_DUMP_SIGNAL was ignored\n",
                 static_cast<int>(name.size()), name.data());
    return false;
  }
  // The dump is written to stderr by a thread of weft's: stderr is a pipe read here until
  // the dump's first line has come, then stderr again, and the pipe is read to its end
  // (the end of a write under way).
  int pipeFds[2];
  const int savedStderr = ::dup(2);
  if (savedStderr < 0 || ::pipe(pipeFds) != 0 || ::dup2(pipeFds[1], 2) < 0) {
    std::perror("consumer: stderr to a pipe");
    return false;
  }
  ::close(pipeFds[1]);
  ::raise(number);
  std::string dump;
  readInto(pipeFds[0], dump, true);
  ::dup2(savedStderr, 2);
  ::close(savedStderr);
  readInto(pipeFds[0], dump, false);
  ::close(pipeFds[0]);
  std::fputs(dump.c_str(), stderr);
  if (dump.rfind("weft: ", 0) != 0) {
    std::fprintf(stderr, "consumer: SIG%.*s gave no task dump\n", static_cast<int>(name.size()),
                 name.data());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
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
  if (argc == 3 && std::string_view(argv[1]) == "--raise-dump-signal" &&
      !raiseDumpSignal(argv[2])) {
    return 1;
  }
  std::printf("consumer: ok (weft %s)\n", WEFT_VERSION_STRING);
  return 0;
}
