// Vectored writes (TcpStream::write/writeAll of a list of buffers, UdpSocket::sendTo/send
// of one), and the char and text forms of the stream and datagram verbs. Every test runs
// once per backend.
//
//  - writeAll of thousands of small buffers (more than IOV_MAX, some empty) and a few of
//    1 MiB, through a small SO_SNDBUF to a peer that reads nothing until the writer is
//    seen waiting for room (its bytes arrived, and it has not ended after the worker went
//    idle): the peer gets the concatenation byte for byte.
//  - write of a list is ONE sendmsg: with room, one write returns the whole total (bytes
//    from every buffer, in one call); when the send buffer is full, it returns n and the
//    peer gets exactly the first n bytes of the concatenation after what was queued.
//  - writeAll of a list cancelled part-way: IncompleteTransfer(n), the peer got exactly
//    the first n bytes of the concatenation and nothing more, then exactly the rest when
//    the caller writes that.
//  - a closed stream is EBADF; empty totals complete at once; more than IOV_MAX non-empty
//    buffers is std::invalid_argument for write (nothing sent), fine for writeAll.
//  - read/readExactly/tryRead into chars, write/writeAll/tryWrite of text, readSome;
//    UdpSocket: one datagram from several buffers, text and char forms.

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/task.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/incomplete_transfer.h"
#include "weft/io/tcp_stream.h"
#include "weft/io/udp_socket.h"
#include "test/support/io_support.h"
#include "test/support/one_worker.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Outcome;
using test::quiesce;
using test::startOn;

using Bytes = std::span<const std::byte>;

using test::notYetAcknowledged;
using test::queuedToRead;
using test::waitUntil;

void setSendBuffer(TcpStream& stream, int size) {
  ASSERT_EQ(::setsockopt(stream.nativeHandle(), SOL_SOCKET, SO_SNDBUF, &size, sizeof size), 0);
}

// Bytes that differ with their position, so that a misplaced, lost or repeated piece shows.
std::vector<std::byte> pattern(std::size_t size) {
  std::vector<std::byte> data(size);
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (std::byte& b : data) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = std::byte(static_cast<unsigned char>(x));
  }
  return data;
}

// `data` cut into consecutive pieces of the given sizes (their sum is data.size()).
std::vector<Bytes> cut(const std::vector<std::byte>& data, const std::vector<std::size_t>& sizes) {
  std::vector<Bytes> pieces;
  std::size_t at = 0;
  for (std::size_t size : sizes) {
    pieces.push_back(Bytes(data).subspan(at, size));
    at += size;
  }
  EXPECT_EQ(at, data.size());
  return pieces;
}

// The pieces of `pieces` after their first `n` bytes (the first of them cut inside).
std::vector<Bytes> after(const std::vector<Bytes>& pieces, std::size_t n) {
  std::vector<Bytes> rest;
  for (Bytes piece : pieces) {
    const std::size_t skip = std::min(n, piece.size());
    n -= skip;
    if (skip < piece.size()) rest.push_back(piece.subspan(skip));
  }
  return rest;
}

// Receives exactly `size` bytes from a blocking socket, `chunk` at most per recv.
std::vector<std::byte> receiveExactly(int fd, std::size_t size, std::size_t chunk = 65536) {
  std::vector<std::byte> data(size);
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(fd, data.data() + got, std::min(chunk, size - got), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ADD_FAILURE() << "recv: " << (n == 0 ? "end of stream" : std::strerror(errno)) << " after "
                    << got << " of " << size << " bytes";
      data.resize(got);
      break;
    }
    got += static_cast<std::size_t>(n);
  }
  return data;
}

// Everything until the end of the stream.
std::vector<std::byte> receiveAll(int fd) {
  std::vector<std::byte> data;
  std::array<std::byte, 65536> chunk;
  for (;;) {
    const ssize_t n = ::recv(fd, chunk.data(), chunk.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    data.insert(data.end(), chunk.begin(), chunk.begin() + n);
  }
  return data;
}

// The index of the first difference of two byte sequences, or -1 if they are equal.
std::ptrdiff_t firstDifference(std::span<const std::byte> a, std::span<const std::byte> b) {
  if (a.size() != b.size()) return static_cast<std::ptrdiff_t>(std::min(a.size(), b.size()));
  const auto [x, y] = std::mismatch(a.begin(), a.end(), b.begin());
  return x == a.end() ? -1 : x - a.begin();
}

// One await of `awaitable` as a Lazy (its parameter lives in the frame: no dangling
// lambda capture when the Lazy runs later).
template <class Awaitable>
Lazy<std::size_t> once(Awaitable awaitable) {
  co_return co_await awaitable;
}

template <class E>
bool causeIs(const IncompleteTransfer& e) {
  try {
    std::rethrow_exception(e.cause());
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

// The errno of `body`'s std::system_error, or -1 if it threw none (or something else).
template <class Body>
int errnoOf(Body body) {
  try {
    body();
  } catch (const IncompleteTransfer& e) {
    ADD_FAILURE() << "an IncompleteTransfer: " << e.what();
    return -1;
  } catch (const std::system_error& e) {
    return e.code().value();
  }
  return -1;
}

// ---------------------------------------------------------------------------------------
// TcpStream: vectored writes.

class TcpStreamVectoredTest : public test::IoBackendTest {};

TEST_P(TcpStreamVectoredTest, WriteAllSendsManySmallAndAFewLargeBuffersInOrder) {
  test::Watchdog watchdog(120s, "WriteAllSendsManySmallAndAFewLargeBuffersInOrder");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  setSendBuffer(pair.stream, 4096);
  // 3000 small buffers of 0 to 30 bytes (every 31st empty), and three of 1 MiB: more
  // non-empty buffers than one sendmsg takes, and far more bytes than the peer's receive
  // buffer and the stream's send buffer hold while the peer does not read.
  constexpr std::size_t kSmall = 3000;
  std::vector<std::size_t> sizes;
  std::size_t total = 0;
  for (std::size_t i = 0; i < kSmall; ++i) {
    std::size_t size = (i * 7) % 31;
    if (i == 10 || i == 1500 || i == 2990) size = (1u << 20) + i;
    sizes.push_back(size);
    total += size;
  }
  ASSERT_GT(kSmall - kSmall / 31, detail::kMaxIovecs);
  const std::vector<std::byte> data = pattern(total);
  const std::vector<Bytes> pieces = cut(data, sizes);

  Outcome<void> write;
  startOn(pool, pair.stream.writeAll(pieces), write);
  // Hand-shake: bytes reached the peer, and once the worker is idle the writer has not
  // ended: it waits for room with part of the list sent (a partial write happened).
  waitUntil([&] { return queuedToRead(pair.peer.get()) > 0; });
  quiesce(pool);
  EXPECT_EQ(write.ends.load(), 0) << "writeAll ended though the peer read nothing";
  // The peer now reads, slowly (1000 bytes per recv): every partial transfer resumes
  // from inside some buffer.
  const std::vector<std::byte> received = receiveExactly(pair.peer.get(), total, 1000);
  write.wait();
  write.result.value();
  EXPECT_EQ(firstDifference(received, data), -1);
  pair.stream.shutdownWrite();
  EXPECT_TRUE(receiveAll(pair.peer.get()).empty()) << "more bytes than the buffers hold";
}

// One write of a list is one sendmsg: with room, it returns the whole total at once (its
// bytes come from every buffer); with the send buffer full, it waits, then returns n and
// the peer gets exactly the first n bytes of the concatenation, after what was queued.
TEST_P(TcpStreamVectoredTest, WriteOfAListIsOneSendmsg) {
  test::Watchdog watchdog(60s, "WriteOfAListIsOneSendmsg");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  setSendBuffer(pair.stream, 1 << 20);  // room for all of it, on any machine
  const std::vector<std::byte> data = pattern(3 * 1000 + 20000);
  const std::vector<Bytes> pieces = cut(data, {1000, 0, 1000, 1000, 20000});

  std::size_t n = syncAwait(once(pair.stream.write(pieces)), &pool);
  EXPECT_EQ(n, data.size()) << "a write with room for all sent only part";
  EXPECT_EQ(firstDifference(receiveExactly(pair.peer.get(), data.size()), data), -1);

  // Buffers named in the call: bytes, text, or both.
  const std::string path = "/index.html";
  n = syncAwait(once(pair.stream.write(Bytes(data).first(3), Bytes(data).subspan(10, 4))), &pool);
  EXPECT_EQ(n, 7u);
  const std::vector<std::byte> seven = receiveExactly(pair.peer.get(), 7);
  EXPECT_EQ(firstDifference(Bytes(seven).first(3), Bytes(data).first(3)), -1);
  EXPECT_EQ(firstDifference(Bytes(seven).subspan(3), Bytes(data).subspan(10, 4)), -1);
  n = syncAwait(once(pair.stream.write("GET ", path, std::string_view(" HTTP/1.1\r\n"))), &pool);
  const std::string request = "GET /index.html HTTP/1.1\r\n";
  EXPECT_EQ(n, request.size());
  const std::vector<std::byte> got = receiveExactly(pair.peer.get(), request.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(got.data()), got.size()), request);

  // The send buffer full: the write waits for room; the peer then drains everything.
  setSendBuffer(pair.stream, 4096);
  const std::vector<std::byte> fill(65536, std::byte{'f'});
  std::size_t queued = 0;
  while (std::optional<std::size_t> sent = pair.stream.tryWrite(fill)) queued += *sent;
  Outcome<std::size_t> write;
  startOn(pool, once(pair.stream.write(pieces)), write);
  quiesce(pool);
  std::vector<std::byte> received;
  std::thread reader([&] { received = receiveAll(pair.peer.get()); });
  write.wait();
  n = write.result.value();
  pair.stream.shutdownWrite();
  reader.join();
  ASSERT_GE(n, 1u);
  ASSERT_LE(n, data.size());
  ASSERT_EQ(received.size(), queued + n);
  EXPECT_TRUE(std::all_of(received.begin(), received.begin() + static_cast<std::ptrdiff_t>(queued),
                          [](std::byte b) { return b == std::byte{'f'}; }));
  EXPECT_EQ(firstDifference(Bytes(received).subspan(queued), Bytes(data).first(n)), -1);
}

TEST_P(TcpStreamVectoredTest, WriteAllStoppedByCancellationSaysHowMuchItWrote) {
  test::Watchdog watchdog(120s, "VectoredWriteAllStoppedByCancellation");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  setSendBuffer(pair.stream, 4096);
  // 4 MiB in pieces of uneven sizes, so that the stop falls inside some piece.
  std::vector<std::size_t> sizes;
  std::size_t total = 0;
  for (std::size_t i = 0; total < (4u << 20); ++i) {
    const std::size_t size = std::array<std::size_t, 5>{1, 4099, 0, 65536 + 7, 333}[i % 5];
    sizes.push_back(size);
    total += size;
  }
  const std::vector<std::byte> data = pattern(total);
  const std::vector<Bytes> pieces = cut(data, sizes);
  CancellationSource source;
  Outcome<void> write;
  startOn(pool, withCancellation(source.token(), pair.stream.writeAll(pieces)), write);
  // Some bytes reached the peer, which reads nothing: writeAll waits for room.
  waitUntil([&] { return queuedToRead(pair.peer.get()) > 0; });
  quiesce(pool);
  EXPECT_EQ(write.ends.load(), 0);
  source.requestCancellation();
  write.wait();
  std::size_t n = 0;
  try {
    write.result.value();
    FAIL() << "writeAll finished though the peer reads nothing";
  } catch (const IncompleteTransfer& e) {
    EXPECT_TRUE(causeIs<OperationCancelled>(e)) << e.what();
    EXPECT_NE(std::string(e.what()).find("writeAll"), std::string::npos) << e.what();
    EXPECT_EQ(e.bytesRequested(), total);
    n = e.bytesTransferred();
  }
  ASSERT_GE(n, 1u);
  ASSERT_LT(n, total);
  // The peer got exactly the first n bytes of the concatenation, and nothing beyond.
  const std::vector<std::byte> prefix = receiveExactly(pair.peer.get(), n);
  EXPECT_EQ(firstDifference(prefix, Bytes(data).first(n)), -1);
  waitUntil([&] { return notYetAcknowledged(pair.stream.nativeHandle()) == 0; });
  EXPECT_EQ(queuedToRead(pair.peer.get()), 0)
      << "more than the " << n << " bytes reported were sent";
  // The rest of the list, from byte n on, completes the stream exactly.
  setSendBuffer(pair.stream, 1 << 20);
  std::vector<std::byte> rest;
  std::thread reader([&] { rest = receiveAll(pair.peer.get()); });
  syncAwait(pair.stream.writeAll(after(pieces, n)), &pool);
  pair.stream.shutdownWrite();
  reader.join();
  EXPECT_EQ(firstDifference(rest, Bytes(data).subspan(n)), -1);
}

// With nothing written, the failure is unchanged: EBADF on a closed stream (for write and
// writeAll, with or without bytes), OperationCancelled when cancelled before.
TEST_P(TcpStreamVectoredTest, AClosedStreamFailsWithEbadf) {
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  const std::string text = "abc";
  const Bytes bytes = std::as_bytes(std::span(text));
  CancellationSource cancelled;
  cancelled.requestCancellation();
  EXPECT_THROW(syncAwait(withCancellation(cancelled.token(), pair.stream.writeAll(bytes, bytes)),
                         &pool),
               OperationCancelled);
  EXPECT_THROW(
      syncAwait(withCancellation(cancelled.token(), once(pair.stream.write(bytes, bytes))), &pool),
      OperationCancelled);
  TcpStream& stream = pair.stream;
  stream.close();
  EXPECT_EQ(errnoOf([&] { syncAwait(stream.writeAll(bytes, bytes), &pool); }), EBADF);
  EXPECT_EQ(errnoOf([&] { syncAwait(stream.writeAll("a", "b"), &pool); }), EBADF);
  EXPECT_EQ(errnoOf([&] { syncAwait(once(stream.write(bytes, bytes)), &pool); }), EBADF);
  // A write of an empty list still says the stream is closed, as write() of an empty
  // buffer does; writeAll of nothing completes at once, as writeAll of an empty buffer.
  EXPECT_EQ(errnoOf([&] { syncAwait(once(stream.write(Bytes(), Bytes())), &pool); }), EBADF);
  syncAwait(stream.writeAll(Bytes(), Bytes()), &pool);
}

// An empty total completes at once, even with the send buffer full (a write that waited
// for room would never end here: the peer does not read).
TEST_P(TcpStreamVectoredTest, AnEmptyTotalCompletesAtOnce) {
  test::Watchdog watchdog(60s, "AnEmptyTotalCompletesAtOnce");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  const std::vector<std::byte> fill(65536, std::byte{'f'});
  while (pair.stream.tryWrite(fill)) {
  }
  CancellationSource source;  // ends a write that wrongly waits, so that the test ends
  Outcome<std::size_t> write;
  Outcome<void> writeAll;
  const std::vector<Bytes> empties(5);
  startOn(pool, withCancellation(source.token(), once(pair.stream.write(empties))), write);
  startOn(pool, withCancellation(source.token(), pair.stream.writeAll("", "")), writeAll);
  quiesce(pool);
  EXPECT_EQ(write.ends.load(), 1) << "a write of nothing waited for room";
  EXPECT_EQ(writeAll.ends.load(), 1) << "a writeAll of nothing waited for room";
  source.requestCancellation();
  write.wait();
  writeAll.wait();
  EXPECT_EQ(write.result.value(), 0u);
  writeAll.result.value();
}

// One write takes at most IOV_MAX non-empty buffers (empty ones do not count); more is
// std::invalid_argument with nothing sent. writeAll takes any number.
TEST_P(TcpStreamVectoredTest, MoreThanIovMaxBuffersIsInvalidForWriteAndFineForWriteAll) {
  test::Watchdog watchdog(60s, "MoreThanIovMaxBuffers");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  const std::vector<std::byte> data = pattern(3 * detail::kMaxIovecs + 7);
  const std::vector<Bytes> ones = cut(data, std::vector<std::size_t>(data.size(), 1));
  auto writeOnce = [&](std::span<const Bytes> list) {
    return syncAwait(once(pair.stream.write(list)), &pool);
  };
  try {
    writeOnce(std::span(ones).first(detail::kMaxIovecs + 1));
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("IOV_MAX"), std::string::npos) << e.what();
  }
  EXPECT_EQ(notYetAcknowledged(pair.stream.nativeHandle()), 0);
  EXPECT_EQ(queuedToRead(pair.peer.get()), 0) << "bytes were sent";
  // IOV_MAX non-empty ones among empty ones: one write sends them all.
  std::vector<Bytes> withEmpties;
  for (std::size_t i = 0; i < detail::kMaxIovecs; ++i) {
    withEmpties.push_back(ones[i]);
    if (i % 100 == 0) withEmpties.push_back(Bytes());
  }
  EXPECT_EQ(writeOnce(withEmpties), detail::kMaxIovecs);
  EXPECT_EQ(firstDifference(receiveExactly(pair.peer.get(), detail::kMaxIovecs),
                            Bytes(data).first(detail::kMaxIovecs)),
            -1);
  syncAwait(pair.stream.writeAll(ones), &pool);
  EXPECT_EQ(firstDifference(receiveExactly(pair.peer.get(), data.size()), data), -1);
}

// The list given to writeAll is copied when writeAll is called: a temporary list may be
// gone by the time the Lazy runs.
TEST_P(TcpStreamVectoredTest, WriteAllCopiesTheListWhenCalled) {
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  const std::string first = "first-", second = "second";
  const Bytes a = std::as_bytes(std::span(first)), b = std::as_bytes(std::span(second));
  Lazy<void> named = pair.stream.writeAll(first, second);
  Lazy<void> fromTemporary = pair.stream.writeAll(std::vector<Bytes>{b, a});  // gone here
  std::vector<std::string_view> texts = {"x", "y"};
  Lazy<void> fromVector = pair.stream.writeAll(texts);
  texts.assign(2, "changed");  // writeAll still sends what the list was
  syncAwait(std::move(named), &pool);
  syncAwait(std::move(fromTemporary), &pool);
  syncAwait(std::move(fromVector), &pool);
  const std::vector<std::byte> got = receiveExactly(pair.peer.get(), 26);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(got.data()), got.size()),
            "first-secondsecondfirst-xy");
}

INSTANTIATE_TEST_SUITE_P(Backends, TcpStreamVectoredTest, test::kIoBackends, test::ioBackendName);

// ---------------------------------------------------------------------------------------
// TcpStream: chars and text.

// The calls the char and text forms exist for resolve, unambiguously, to them.
template <class T>
constexpr bool kIsStreamTransfer = std::is_same_v<T, detail::StreamTransferAwaitable>;
static_assert(kIsStreamTransfer<decltype(std::declval<TcpStream&>().write("literal"))>);
static_assert(kIsStreamTransfer<decltype(std::declval<TcpStream&>().write(std::string()))>);
static_assert(kIsStreamTransfer<decltype(std::declval<TcpStream&>().read(
                  std::declval<char (&)[8]>()))>);
static_assert(kIsStreamTransfer<decltype(std::declval<TcpStream&>().read(
                  std::declval<std::string&>()))>);
static_assert(kIsStreamTransfer<decltype(std::declval<TcpStream&>().read(
                  std::declval<std::vector<char>&>()))>);
static_assert(kIsStreamTransfer<decltype(std::declval<TcpStream&>().read(
                  std::declval<std::array<std::byte, 8>&>()))>);
// Two or more buffers, bytes and text mixed, are a vectored write; a pointer and a size
// are still one buffer.
using TwoBuffers = detail::VectoredSendAwaitable<std::array<iovec, 2>>;
static_assert(std::is_same_v<decltype(std::declval<TcpStream&>().write("a", std::string())),
                             TwoBuffers>);
static_assert(std::is_same_v<decltype(std::declval<TcpStream&>().write(
                                 Bytes(), std::declval<std::vector<std::byte>&>())),
                             TwoBuffers>);
static_assert(kIsStreamTransfer<decltype(std::declval<TcpStream&>().write(
                  std::declval<const char*>(), std::size_t{3}))>);
static_assert(kIsStreamTransfer<decltype(std::declval<TcpStream&>().write(
                  std::declval<std::byte*>(), 3))>);

class TcpStreamTextTest : public test::IoBackendTest {};

TEST_P(TcpStreamTextTest, ReadsIntoCharsAndWritesText) {
  test::Watchdog watchdog(60s, "ReadsIntoCharsAndWritesText");
  ThreadPool pool(options(1));
  TcpListener listener = TcpListener::bind(SocketAddress::loopbackV4(0));
  auto body = [&]() -> Lazy<void> {
    TcpStream client = co_await TcpStream::connect(listener.localAddress());
    TcpStream server = co_await listener.accept();
    EXPECT_EQ(co_await client.write("literal"), 7u);  // without the NUL
    co_await client.writeAll(std::string{"string"});
    EXPECT_EQ(client.tryWrite(std::string_view("try")), std::optional<std::size_t>(3));
    co_await client.writeAll("a", std::string("b"), std::string_view("c"));

    char charArray[7];
    co_await server.readExactly(charArray);
    EXPECT_EQ(std::string_view(charArray, 7), "literal");
    std::string text(6, '?');
    co_await server.readExactly(text);
    EXPECT_EQ(text, "string");
    std::vector<char> chars(6);
    std::size_t got = 0;
    while (got < 6) {
      co_await server.readable();
      got += server.tryRead(std::span(chars).subspan(got)).value_or(0);
    }
    EXPECT_EQ(std::string_view(chars.data(), chars.size()), "tryabc");

    // readSome appends, and leaves `out` as it was when the read fails.
    std::string out = "prefix:";
    co_await client.writeAll("xyz");
    while (out.size() < 10) {
      const std::size_t n = co_await server.readSome(out, 100);
      EXPECT_GT(n, 0u);
    }
    EXPECT_EQ(out, "prefix:xyz");
    EXPECT_EQ(co_await server.readSome(out, 0), 0u);  // not the end of the stream
    CancellationSource cancelled;
    cancelled.requestCancellation();
    int cancellations = 0;
    try {
      co_await withCancellation(cancelled.token(), server.readSome(out, 100));
    } catch (const OperationCancelled&) {
      ++cancellations;
    }
    EXPECT_EQ(cancellations, 1);
    EXPECT_EQ(out, "prefix:xyz");
    client.shutdownWrite();
    EXPECT_EQ(co_await server.readSome(out, 100), 0u);  // the end of the stream
    EXPECT_EQ(out, "prefix:xyz");
    EXPECT_EQ(co_await server.read(charArray), 0u);
  };
  syncAwait(body(), &pool);
}

INSTANTIATE_TEST_SUITE_P(Backends, TcpStreamTextTest, test::kIoBackends, test::ioBackendName);

// ---------------------------------------------------------------------------------------
// UdpSocket: one datagram from several buffers; text and chars.

class UdpSocketVectoredTest : public test::IoBackendTest {};

TEST_P(UdpSocketVectoredTest, SendsOneDatagramFromSeveralBuffers) {
  test::Watchdog watchdog(60s, "SendsOneDatagramFromSeveralBuffers");
  ThreadPool pool(options(1));
  UdpSocket receiver = UdpSocket::bind(SocketAddress::loopbackV4(0));
  UdpSocket sender = UdpSocket::open(AF_INET);
  const SocketAddress to = receiver.localAddress();
  auto body = [&]() -> Lazy<void> {
    const std::string header = "HDR:", payload = "payload";
    const Bytes h = std::as_bytes(std::span(header)), p = std::as_bytes(std::span(payload));
    const Bytes parts[] = {h, Bytes(), p};
    EXPECT_EQ(co_await sender.sendTo(parts, to), 11u);
    std::array<char, 64> buffer;
    Datagram d = co_await receiver.receiveFrom(buffer);
    EXPECT_EQ(std::string_view(buffer.data(), d.size), "HDR:payload");
    EXPECT_FALSE(d.truncated);
    EXPECT_EQ(d.from.port(), sender.localAddress().port());

    EXPECT_EQ(co_await sender.sendTo("text", to), 4u);
    d = co_await receiver.receiveFrom(buffer);
    EXPECT_EQ(std::string_view(buffer.data(), d.size), "text");

    sender.connect(to);
    const std::vector<Bytes> list = {p, h};
    EXPECT_EQ(co_await sender.send(list), 11u);
    std::string received(64, '?');
    d = co_await receiver.receive(received);
    EXPECT_EQ(received.substr(0, d.size), "payloadHDR:");
    EXPECT_EQ(co_await sender.send("connected"), 9u);
    d = co_await receiver.receive(received);
    EXPECT_EQ(received.substr(0, d.size), "connected");
    // An empty list is an empty datagram, as an empty buffer is.
    EXPECT_EQ(co_await sender.send(std::span<const Bytes>()), 0u);
    d = co_await receiver.receive(received);
    EXPECT_EQ(d.size, 0u);
    EXPECT_FALSE(d.truncated);

    // A datagram cannot be split: more than IOV_MAX buffers is an error, nothing sent.
    const std::vector<Bytes> many(detail::kMaxIovecs + 1, h.first(1));
    int invalid = 0;
    try {
      co_await sender.sendTo(many, to);
    } catch (const std::invalid_argument&) {
      ++invalid;
    }
    try {
      co_await sender.send(many);
    } catch (const std::invalid_argument&) {
      ++invalid;
    }
    EXPECT_EQ(invalid, 2);
    const Bytes one[] = {h};
    EXPECT_EQ(co_await sender.send(one), 4u);  // the next datagram is this one
    d = co_await receiver.receive(received);
    EXPECT_EQ(received.substr(0, d.size), "HDR:");

    sender.close();
    int closed = 0;
    try {
      co_await sender.sendTo(parts, to);
    } catch (const std::system_error& e) {
      closed += e.code().value() == EBADF;
    }
    try {
      co_await sender.send(parts);
    } catch (const std::system_error& e) {
      closed += e.code().value() == EBADF;
    }
    EXPECT_EQ(closed, 2);
  };
  syncAwait(body(), &pool);
}

INSTANTIATE_TEST_SUITE_P(Backends, UdpSocketVectoredTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
