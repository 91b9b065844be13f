#include "weft/io/io_awaiter.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/io_operation_awaitable.h"
#include "weft/io/tcp_stream.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"

// The example of docs/io.md ("An I/O operation of your own"): sendfile(2) as an
// awaitable, written with public headers only. The code between the BEGIN and END lines
// is the document's, word for word (keep them alike).

// BEGIN docs/io.md
#include <sys/sendfile.h>

#include <cerrno>
#include <system_error>

#include <weft/coro/lazy.h>
#include <weft/io/io_awaiter.h>

// SendFile(socket, file, offset, count): `co_await` sends up to `count` bytes of `file`
// from `offset` (advanced past them) to `socket`, a non-blocking socket of one's own,
// once the socket can take them; resumes with the number sent. Cancellable; a coroutine
// destroyed while it waits withdraws the wait (IoAwaiter does both).
class SendFile {
 public:
  SendFile(int socket, int file, off_t& offset, std::size_t count)
      : socket_(socket), file_(file), offset_(&offset), count_(count) {}

  class Awaiter : public weft::IoAwaiter {
   public:
    Awaiter(const SendFile& send, weft::Executor* executor, const weft::CancellationToken& token)
        : IoAwaiter("sendfile", executor, token), send_(send) {
      weft::IoOperation& op = operation();
      op.opcode = weft::IoOpcode::kPollWritable;  // the loop waits; sendfile runs below
      op.fd = send.socket_;
      op.ownerRetiresFd = false;  // our descriptor: closed with ::close, not by weft
    }

    std::size_t await_resume() {
      // OperationCancelled, ExecutorShutDown; else the poll's result (0) or -errno.
      const std::int64_t polled = IoAwaiter::await_resume();
      if (polled < 0) throw std::system_error(static_cast<int>(-polled), std::system_category());
      const ssize_t sent = ::sendfile(send_.socket_, send_.file_, send_.offset_, send_.count_);
      if (sent >= 0) return static_cast<std::size_t>(sent);
      if (errno == EAGAIN) return 0;  // taken by someone else meanwhile: try again
      throw std::system_error(errno, std::system_category(), "sendfile");
    }

   private:
    const SendFile& send_;
  };

  // weft calls this with the awaiting coroutine's executor and cancellation token.
  Awaiter coAwait(weft::Executor* executor, const weft::CancellationToken& token) const {
    return Awaiter(*this, executor, token);
  }

 private:
  int socket_;
  int file_;
  off_t* offset_;
  std::size_t count_;
};

// The whole file, `size` bytes, as a loop of SendFile.
weft::Lazy<void> sendWholeFile(int socket, int file, std::size_t size) {
  off_t offset = 0;
  while (static_cast<std::size_t>(offset) < size) {
    co_await SendFile(socket, file, offset, size - static_cast<std::size_t>(offset));
  }
}
// END docs/io.md

namespace weft {
namespace {

// A file of `size` bytes (a memfd), filled with a pattern.
int makeFile(std::size_t size) {
  const int fd = ::memfd_create("weft-io-awaiter-test", 0);
  EXPECT_GE(fd, 0);
  std::vector<unsigned char> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>(i * 7 + 3);
  EXPECT_EQ(::pwrite(fd, bytes.data(), size, 0), static_cast<ssize_t>(size));
  return fd;
}

struct SocketPair {
  SocketPair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
    mine = fds[0];
    peer = TcpStream(fds[1]);
  }
  ~SocketPair() { ::close(mine); }
  int mine;
  TcpStream peer;
};

// Larger than a Unix socket's buffer: the sender has to wait for the reader.
constexpr std::size_t kFileSize = 4 << 20;

TEST(IoAwaiterTest, SendFileSendsAWholeFileThroughWaits) {
  ThreadPool pool(1);
  const int file = makeFile(kFileSize);
  SocketPair sockets;
  std::vector<std::byte> received(kFileSize);
  auto body = [&]() -> Lazy<void> {
    auto [sent, read] = co_await collectAll(sendWholeFile(sockets.mine, file, kFileSize),
                                            sockets.peer.readExactly(received));
    sent.value();
    read.value();
  };
  syncAwait(body(), &pool);
  for (std::size_t i = 0; i < kFileSize; ++i) {
    ASSERT_EQ(received[i], static_cast<std::byte>(i * 7 + 3)) << "at byte " << i;
  }
  ::close(file);
}

TEST(IoAwaiterTest, SendFileWorksInAFiber) {
  ThreadPool pool(2);
  const int file = makeFile(kFileSize);
  SocketPair sockets;
  auto sender = spawnFiber(&pool, [&] { await(sendWholeFile(sockets.mine, file, kFileSize)); });
  std::vector<std::byte> received(kFileSize);
  syncAwait(sockets.peer.readExactly(received), &pool);
  syncAwait(std::move(sender));
  EXPECT_EQ(received[kFileSize - 1], static_cast<std::byte>((kFileSize - 1) * 7 + 3));
  ::close(file);
}

// A wait that nobody will end (nobody reads) ends by cancellation, with
// OperationCancelled: the loop let go of it.
TEST(IoAwaiterTest, SendFileWaitEndsByCancellation) {
  ThreadPool pool(1);
  const int file = makeFile(kFileSize);
  SocketPair sockets;
  CancellationSource source;
  auto body = [&]() -> Lazy<void> {
    // Branches start in turn on this thread: the second runs once the first waits.
    auto [sent, cancelled] = co_await collectAll(
        withCancellation(source.token(), sendWholeFile(sockets.mine, file, kFileSize)),
        [&]() -> Lazy<void> {
          source.requestCancellation();
          co_return;
        }());
    EXPECT_THROW(sent.value(), OperationCancelled);
    cancelled.value();
  };
  syncAwait(body(), &pool);
  ::close(file);
}

TEST(IoAwaiterTest, OperationAwaitableWaitsForReadiness) {
  ThreadPool pool(1);
  SocketPair sockets;
  auto body = [&]() -> Lazy<std::size_t> {
    // Writable at once: an empty socket buffer.
    co_return co_await IoOperationAwaitable("wait to write", IoOpcode::kPollWritable,
                                            sockets.peer.nativeHandle());
  };
  EXPECT_EQ(syncAwait(body(), &pool), 0u);  // a poll's result
}

}  // namespace
}  // namespace weft
