// BufferedReader: frames read from a TcpStream, once per backend. Frames cut at every
// byte boundary, and delivered one byte per receive (the peer sends each piece only once
// the previous one has left the socket: a hand-shake on FIONREAD, no sleep); multi-byte
// delimiters straddling receives; pipelined frames served as views into one receive;
// maxFrame; the end of the stream inside a frame; an idle reader holding no lent buffer;
// cancellation and time limits racing data without losing or duplicating a byte; fibers;
// misuse. Every test checks that no lent buffer is left out (IoLoop::lentBuffers), no
// frame leaked and no descriptor leaked.

#include <sys/ioctl.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/with_timeout.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/buffered_reader.h"
#include "weft/io/tcp_stream.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/counted.h"
#include "test/support/io_support.h"
#include "test/support/one_worker.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using test::Counted;
using test::Outcome;
using test::startOn;

using test::lentBuffers;

// Waits until the bytes sent to `stream` have left its socket (a receive took them):
// what is sent next arrives in another receive. Loopback delivers within the send, so
// the bytes are in the socket when send returns. A hand-shake, not a timing.
void waitUntilTaken(const TcpStream& stream) {
  for (;;) {
    int pending = 0;
    if (::ioctl(stream.nativeHandle(), FIONREAD, &pending) != 0 || pending == 0) return;
    std::this_thread::yield();
  }
}

// Sends `text` cut into pieces at `cuts` (increasing offsets), each piece after the
// previous one was taken by a receive of `stream`.
void sendInPieces(test::StreamAndPeer& pair, std::string_view text,
                  const std::vector<std::size_t>& cuts) {
  std::size_t from = 0;
  for (std::size_t i = 0; i <= cuts.size(); ++i) {
    const std::size_t to = i < cuts.size() ? cuts[i] : text.size();
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), text.data() + from, to - from));
    if (i < cuts.size()) waitUntilTaken(pair.stream);
    from = to;
  }
}

std::vector<std::size_t> everyByte(std::size_t size) {
  std::vector<std::size_t> cuts;
  for (std::size_t i = 1; i < size; ++i) cuts.push_back(i);
  return cuts;
}

// `count` frames read with readUntil(delimiter), copied (a frame's view expires with the
// next call).
Lazy<std::vector<std::string>> readFrames(BufferedReader& reader, std::string_view delimiter,
                                          std::size_t count) {
  Counted inFrame;
  std::vector<std::string> frames;
  for (std::size_t i = 0; i < count; ++i) {
    std::optional<std::string_view> frame = co_await reader.readUntil(delimiter);
    if (!frame) throw std::runtime_error("the stream ended after " + std::to_string(i) + " frames");
    frames.emplace_back(*frame);
  }
  co_return frames;
}

// The frames a correct reader returns: `text` cut after each first match of `delimiter`.
std::vector<std::string> expectedFrames(std::string_view text, std::string_view delimiter) {
  std::vector<std::string> frames;
  std::size_t from = 0;
  for (std::size_t at; (at = text.find(delimiter, from)) != std::string_view::npos;) {
    frames.emplace_back(text.substr(from, at + delimiter.size() - from));
    from = at + delimiter.size();
  }
  return frames;
}

template <class Exception, class F>
bool throws(F f) {
  try {
    f();
  } catch (const Exception&) {
    return true;
  }
  return false;
}

class BufferedReaderTest : public test::IoLeakCheckedTest {};

TEST_P(BufferedReaderTest, PipelinedFramesInOneReceiveAreViewsIntoIt) {
  test::Watchdog watchdog(60s, "PipelinedFrames");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  BufferedReader reader(pair.stream);
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "one\ntwo\r\nthree\n", 15));
  std::size_t lentWhileHeld = 0;
  std::size_t lentAtTheEnd = 1;
  syncAwait([&]() -> Lazy<void> {
    const std::optional<std::string_view> one = co_await reader.readLine();
    const std::optional<std::string_view> two = co_await reader.readLine();
    const std::optional<std::string_view> three = co_await reader.readLine();
    lentWhileHeld = IoLoop::current()->lentBuffers();
    EXPECT_EQ(one, "one");
    EXPECT_EQ(two, "two");  // "\r\n" stripped
    EXPECT_EQ(three, "three");
    // Views into the one lent buffer that brought them all: nothing was copied.
    EXPECT_EQ(two->data(), one->data() + 4);
    EXPECT_EQ(three->data(), two->data() + 5);
    EXPECT_TRUE(reader.buffered().empty());
    ::shutdown(pair.peer.get(), SHUT_WR);
    const std::optional<std::string_view> end = co_await reader.readLine();
    EXPECT_EQ(end, std::nullopt);  // a clean end between frames
    lentAtTheEnd = IoLoop::current()->lentBuffers();
  }().via(&pool));
  EXPECT_EQ(lentWhileHeld, 1u);
  EXPECT_EQ(lentAtTheEnd, 0u);
}

TEST_P(BufferedReaderTest, FramesCutAtEveryByteBoundaryAreWhole) {
  test::Watchdog watchdog(120s, "CutAtEveryBoundary");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  std::optional<BufferedReader> reader(std::in_place, pair.stream);
  const std::string text = "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\n\r\n";
  const std::vector<std::string> want = expectedFrames(text, "\r\n\r\n");
  ASSERT_EQ(want.size(), 2u);
  // One cut at every offset, then every byte in a receive of its own (the delimiter then
  // straddles four receives).
  std::vector<std::vector<std::size_t>> cutsList;
  for (std::size_t cut = 1; cut < text.size(); ++cut) cutsList.push_back({cut});
  cutsList.push_back(everyByte(text.size()));
  for (const std::vector<std::size_t>& cuts : cutsList) {
    Outcome<std::vector<std::string>> frames;
    startOn(pool, readFrames(*reader, "\r\n\r\n", 2), frames);
    sendInPieces(pair, text, cuts);
    frames.wait();
    ASSERT_TRUE(frames.result.hasValue()) << frames.what();
    ASSERT_EQ(frames.result.value(), want) << "cut at " << cuts.front();
    ASSERT_TRUE(reader->buffered().empty());
  }
  test::onWorker(pool, [&] { reader.reset(); });  // it held the last frame's buffer
  EXPECT_EQ(lentBuffers(pool), 0u);
}

// Delimiters whose prefix repeats ("aab", "abab") against text of their own letters: a
// match that starts in one receive and ends in another, partial matches that fail, matches
// that overlap a failed one. Random cuts (a seeded generator), checked against
// std::string::find.
TEST_P(BufferedReaderTest, SelfOverlappingDelimitersAcrossReceives) {
  test::Watchdog watchdog(120s, "SelfOverlappingDelimiters");
  ThreadPool pool(options(1));
  std::minstd_rand random(29);
  for (std::string_view delimiter : {"aab", "abab", "\r\n\r\n", "aaaa"}) {
    test::StreamAndPeer pair = test::connectedPair(pool);
    BufferedReader reader(pair.stream);
    for (int round = 0; round < 40; ++round) {
      std::string text;
      const std::string_view letters = delimiter == "\r\n\r\n" ? "\r\nx" : "abx";
      auto framesCoverText = [&] {  // at least 3 frames, the last ending with the text
        std::size_t covered = 0;
        const std::vector<std::string> frames = expectedFrames(text, delimiter);
        for (const std::string& frame : frames) covered += frame.size();
        return frames.size() >= 3 && covered == text.size();
      };
      while (!framesCoverText()) text += letters[random() % (random() % 4 == 0 ? 3 : 2)];
      const std::vector<std::string> want = expectedFrames(text, delimiter);
      std::vector<std::size_t> cuts;
      for (std::size_t i = 1; i < text.size(); ++i) {
        if (random() % 3 == 0) cuts.push_back(i);
      }
      Outcome<std::vector<std::string>> frames;
      startOn(pool, readFrames(reader, delimiter, want.size()), frames);
      sendInPieces(pair, text, cuts);
      frames.wait();
      ASSERT_TRUE(frames.result.hasValue()) << frames.what();
      ASSERT_EQ(frames.result.value(), want) << "text " << text;
    }
  }
  EXPECT_EQ(lentBuffers(pool), 0u);
}

// Length-prefixed frames ("0005hello"): readExactly of the 4-byte length, then of the
// body, with every byte in a receive of its own, then all in one receive.
TEST_P(BufferedReaderTest, ReadExactlyJoinsReceivesAndServesPipelinedFrames) {
  test::Watchdog watchdog(60s, "ReadExactly");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  BufferedReader reader(pair.stream);
  const std::vector<std::string> bodies = {"hello", "", "a longer body, with spaces", "x"};
  std::string text;
  for (const std::string& body : bodies) {
    char length[5];
    std::snprintf(length, sizeof length, "%04zu", body.size());
    text += length + body;
  }
  auto readAll = [&]() -> Lazy<std::vector<std::string>> {
    std::vector<std::string> got;
    for (std::size_t i = 0; i < bodies.size(); ++i) {
      const std::optional<std::string_view> length = co_await reader.readExactly(4);
      if (!length) throw std::runtime_error("the stream ended");
      const std::optional<std::string_view> body =
          co_await reader.readExactly(std::stoul(std::string(*length)));
      got.emplace_back(body.value());
    }
    co_return got;
  };
  for (bool byteByByte : {true, false}) {
    Outcome<std::vector<std::string>> got;
    startOn(pool, readAll(), got);
    sendInPieces(pair, text, byteByByte ? everyByte(text.size()) : std::vector<std::size_t>{});
    got.wait();
    ASSERT_TRUE(got.result.hasValue()) << got.what();
    EXPECT_EQ(got.result.value(), bodies);
  }
  ::shutdown(pair.peer.get(), SHUT_WR);
  EXPECT_EQ(syncAwait(reader.readExactly(4).via(&pool)), std::nullopt);  // a clean end
  EXPECT_EQ(syncAwait(reader.readExactly(0).via(&pool)), std::string_view());
  EXPECT_EQ(lentBuffers(pool), 0u);
}

// A frame of 1 MiB arrives in dozens of receives (64 KiB at most each) and is joined;
// the line after it, in the same receive as its end, is served from that receive.
TEST_P(BufferedReaderTest, LargeFramesAreJoinedWhole) {
  test::Watchdog watchdog(120s, "LargeFrames");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  std::optional<BufferedReader> reader(std::in_place, pair.stream, 2 << 20);
  std::string big(1 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i * 7 % 26);
  std::thread peer([&] {
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), big.data(), big.size()));
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "\nnext\n", 6));
  });
  const auto [first, second] = syncAwait([&]() -> Lazy<std::pair<std::string, std::string>> {
    const std::optional<std::string_view> one = co_await reader->readLine();
    std::string copy(one.value());
    const std::optional<std::string_view> two = co_await reader->readLine();
    co_return std::pair(std::move(copy), std::string(two.value()));
  }().via(&pool));
  peer.join();
  EXPECT_TRUE(first == big) << "the large frame differs";
  EXPECT_EQ(second, "next");
  test::onWorker(pool, [&] { reader.reset(); });  // it held the last frame's buffer
  EXPECT_EQ(lentBuffers(pool), 0u);
}

TEST_P(BufferedReaderTest, FramesLongerThanMaxFrameThrowFrameTooLargeAndStayBuffered) {
  test::Watchdog watchdog(60s, "MaxFrame");
  ThreadPool pool(options(1));
  for (bool split : {false, true}) {
    test::StreamAndPeer pair = test::connectedPair(pool);
    BufferedReader reader(pair.stream, 8);
    auto readLine = [&] { return reader.readLine().via(&pool); };
    // Exactly maxFrame bytes with the "\n": accepted, whole or cut in two.
    Outcome<std::optional<std::string_view>> fits;
    startOn(pool, reader.readLine(), fits);
    std::vector<std::size_t> cuts;
    if (split) cuts.push_back(4);
    sendInPieces(pair, "1234567\n", cuts);
    fits.wait();
    ASSERT_TRUE(fits.result.hasValue()) << fits.what();
    EXPECT_EQ(fits.result.value(), "1234567");
    // One byte more: FrameTooLarge, once the reader knows the frame is longer (the ninth
    // byte without the delimiter, or the delimiter found too late).
    Outcome<std::optional<std::string_view>> tooLong;
    startOn(pool, reader.readLine(), tooLong);
    sendInPieces(pair, "12345678\n", cuts);
    tooLong.wait();
    ASSERT_TRUE(tooLong.endedWith<FrameTooLarge>()) << tooLong.what();
    try {
      std::rethrow_exception(tooLong.result.exception());
    } catch (const FrameTooLarge& e) {
      EXPECT_EQ(e.limit(), 8u);
      EXPECT_GE(e.buffered(), 8u);
      EXPECT_NE(std::string(e.what()).find("maxFrame"), std::string::npos) << e.what();
    }
    EXPECT_EQ(reader.buffered(), "12345678\n");  // nothing dropped
    // Lengths beyond the limit fail at once, without receiving.
    EXPECT_TRUE(throws<FrameTooLarge>([&] { (void)syncAwait(reader.readExactly(9).via(&pool)); }));
    EXPECT_TRUE(throws<FrameTooLarge>([&] { (void)syncAwait(reader.peek(9).via(&pool)); }));
    // The caller may skip what it cannot take and go on.
    reader.consume(reader.buffered().size());
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "ok\n", 3));
    EXPECT_EQ(syncAwait(readLine()), "ok");
    ::shutdown(pair.peer.get(), SHUT_WR);
    EXPECT_EQ(syncAwait(readLine()), std::nullopt);
  }
  EXPECT_EQ(lentBuffers(pool), 0u);
}

TEST_P(BufferedReaderTest, TheEndOfTheStreamInsideAFrameThrowsEndOfStreamWithTheBytesBuffered) {
  test::Watchdog watchdog(60s, "EndOfStream");
  ThreadPool pool(options(1));
  for (bool split : {false, true}) {
    test::StreamAndPeer pair = test::connectedPair(pool);
    BufferedReader reader(pair.stream);
    Outcome<std::optional<std::string_view>> line;
    startOn(pool, reader.readLine(), line);
    sendInPieces(pair, "abc", split ? std::vector<std::size_t>{1, 2} : std::vector<std::size_t>{});
    waitUntilTaken(pair.stream);
    ::shutdown(pair.peer.get(), SHUT_WR);
    line.wait();
    ASSERT_TRUE(line.endedWith<EndOfStream>()) << line.what();
    try {
      std::rethrow_exception(line.result.exception());
    } catch (const EndOfStream& e) {
      EXPECT_EQ(e.bytesRead(), 3u);
    }
    EXPECT_EQ(reader.buffered(), "abc");
    // Every verb sees the same end; peek returns what there is.
    try {
      (void)syncAwait(reader.readExactly(4).via(&pool));
      ADD_FAILURE() << "readExactly did not throw";
    } catch (const EndOfStream& e) {
      EXPECT_EQ(e.bytesRead(), 3u);
    }
    EXPECT_EQ(syncAwait(reader.peek(10).via(&pool)), "abc");
    EXPECT_EQ(syncAwait(reader.readExactly(3).via(&pool)), "abc");
    EXPECT_EQ(syncAwait(reader.readLine().via(&pool)), std::nullopt);
    EXPECT_EQ(syncAwait(reader.peek().via(&pool)), "");
  }
  EXPECT_EQ(lentBuffers(pool), 0u);
}

// A reader waiting for the next frame, everything before consumed, holds no lent buffer:
// not after frames served from a receive, and not after a frame joined across receives.
TEST_P(BufferedReaderTest, AnIdleReaderHoldsNoLentBuffer) {
  test::Watchdog watchdog(60s, "IdleReader");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  BufferedReader reader(pair.stream);
  std::atomic<int> framesRead{0};
  std::size_t lentWithAFrame = 0;
  auto readFour = [&]() -> Lazy<std::vector<std::string>> {  // outlives the coroutine
    std::vector<std::string> got;
    for (int i = 0; i < 4; ++i) {
      std::optional<std::string_view> line = co_await reader.readLine();
      got.emplace_back(line.value());
      if (i == 2) lentWithAFrame = IoLoop::current()->lentBuffers();  // "third" is a view
      framesRead.fetch_add(1);
      framesRead.notify_all();
    }
    co_return got;
  };
  Outcome<std::vector<std::string>> lines;
  startOn(pool, readFour(), lines);
  // "second" is cut in two (joined); "third" comes in the receive that ends it.
  sendInPieces(pair, "first\nsec", {});
  while (framesRead.load() < 1) framesRead.wait(0);
  waitUntilTaken(pair.stream);
  sendInPieces(pair, "ond\nthird\n", {});
  while (framesRead.load() < 3) framesRead.wait(framesRead.load());
  // Now the reader waits in its fourth readLine.
  EXPECT_EQ(lentBuffers(pool), 0u) << "an idle reader holds a lent buffer";
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "fourth\n", 7));
  lines.wait();
  ASSERT_TRUE(lines.result.hasValue()) << lines.what();
  EXPECT_EQ(lines.result.value(), (std::vector<std::string>{"first", "second", "third", "fourth"}));
  EXPECT_EQ(lentWithAFrame, 1u) << "the frame's view keeps its buffer until the next call";
}

TEST_P(BufferedReaderTest, PeekAndConsumeServeACustomDecoder) {
  test::Watchdog watchdog(60s, "PeekAndConsume");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  BufferedReader reader(pair.stream);
  // Netstring-like frames "<length>:<body>", decoded from peek() and consumed.
  const std::string text = "5:hello0:11:hello world1:x";
  auto decode = [&]() -> Lazy<std::vector<std::string>> {
    std::vector<std::string> got;
    for (int i = 0; i < 4; ++i) {
      std::string_view have = co_await reader.peek();
      while (have.find(':') == std::string_view::npos) have = co_await reader.peek(have.size() + 1);
      const std::size_t colon = have.find(':');
      const std::size_t length = std::stoul(std::string(have.substr(0, colon)));
      if (have.size() < colon + 1 + length) have = co_await reader.peek(colon + 1 + length);
      got.emplace_back(have.substr(colon + 1, length));
      reader.consume(colon + 1 + length);
      EXPECT_EQ(got.back(), have.substr(colon + 1, length)) << "consume moved a view";
    }
    co_return got;
  };
  for (bool byteByByte : {true, false}) {
    Outcome<std::vector<std::string>> got;
    startOn(pool, decode(), got);
    sendInPieces(pair, text, byteByByte ? everyByte(text.size()) : std::vector<std::size_t>{});
    got.wait();
    ASSERT_TRUE(got.result.hasValue()) << got.what();
    EXPECT_EQ(got.result.value(), (std::vector<std::string>{"hello", "", "hello world", "x"}));
  }
  // peek() with something buffered returns it without receiving.
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "abc", 3));
  EXPECT_EQ(syncAwait(reader.peek().via(&pool)), "abc");
  EXPECT_EQ(syncAwait(reader.peek().via(&pool)), "abc");
  reader.consume(1);
  EXPECT_EQ(reader.buffered(), "bc");
  EXPECT_TRUE(throws<std::out_of_range>([&] { reader.consume(3); }));
  reader.consume(2);
  ::shutdown(pair.peer.get(), SHUT_WR);
  EXPECT_EQ(syncAwait(reader.peek().via(&pool)), "");  // the end of the stream
  EXPECT_EQ(lentBuffers(pool), 0u);
}

// The read time limit ends a call with half a line buffered; the line is whole at the
// next call (nothing lost). No timing: the limit must fire because nothing else arrives.
TEST_P(BufferedReaderTest, ATimeLimitKeepsWhatArrivedForTheNextCall) {
  test::Watchdog watchdog(60s, "TimeLimitKeeps");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  BufferedReader reader(pair.stream);
  pair.stream.setReadTimeout(10ms);
  std::string sent;
  for (std::string_view part : {"hal", "ha"}) {  // the second time, joined to the first
    ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), part.data(), part.size()));
    sent += part;
    try {
      (void)syncAwait(reader.readLine().via(&pool));
      ADD_FAILURE() << "no time limit";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code().value(), ETIMEDOUT) << e.what();
    }
    EXPECT_EQ(reader.buffered(), sent);
  }
  // Cancellation likewise: withTimeout around readUntil (no read limit to race it).
  pair.stream.setReadTimeout(0ns);
  EXPECT_TRUE(throws<TimeoutError>([&] {
    (void)syncAwait(withTimeout(reader.readUntil("\r\n"), 1ms).via(&pool));
  }));
  EXPECT_EQ(reader.buffered(), "halha");
  EXPECT_EQ(lentBuffers(pool), 0u) << "a reader waiting between receives holds a lent buffer";
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "lf\n", 3));
  EXPECT_EQ(syncAwait(reader.readLine().via(&pool)), "halhalf");
  EXPECT_EQ(lentBuffers(pool), 0u);
}

// Byte `i` of the race's line stream: lines of 1 to 80 letters, each ended by "\n".
std::string raceText(std::size_t lines) {
  std::minstd_rand random(5);
  std::string text;
  for (std::size_t i = 0; i < lines; ++i) {
    const std::size_t length = 1 + random() % 80;
    for (std::size_t k = 0; k < length; ++k) text += static_cast<char>('a' + (i + k) % 26);
    text += '\n';
  }
  return text;
}

void spin(unsigned rounds) {
  std::atomic<unsigned> counter{0};
  while (counter.fetch_add(1, std::memory_order_relaxed) < rounds) {
  }
}

// A readLine that announces its start, and copies its line.
Lazy<std::optional<std::string>> readLineAnnounced(BufferedReader& reader,
                                                   std::atomic<int>& starts) {
  Counted inFrame;
  starts.fetch_add(1);
  starts.notify_all();
  const std::optional<std::string_view> line = co_await reader.readLine();
  if (!line) co_return std::nullopt;
  co_return std::string(*line);
}

enum class Race { kCancellationSource, kTimeout };

// readLine on a ThreadPool(1), cancelled from the test thread (or timed out) at a random
// moment while a peer thread writes pieces of the line stream at random moments, both
// anchored to the call's start (as io_cancellation_test.cc's races). Each call ends
// once, with a line or with the cancellation; the lines returned, then those read after
// the race, are exactly the lines sent: a byte that arrived in a cancelled call stayed
// buffered for the next.
void raceReadLines(ThreadPool& pool, Race race) {
  test::StreamAndPeer pair = test::connectedPair(pool);
  BufferedReader reader(pair.stream);
  const int iterations = test::reducedIoScale() ? 500 : 2000;
  const std::string text = raceText(static_cast<std::size_t>(iterations));
  std::atomic<int> readStarted{-1};  // the iteration whose call has started; -2: stop
  std::size_t sent = 0;
  std::thread writer([&] {
    std::minstd_rand random(7);
    int last = -1;
    for (;;) {
      readStarted.wait(last);
      last = readStarted.load();
      if (last == -2) break;
      if (random() % 4 == 0 || sent == text.size()) continue;
      spin(random() % 20000);
      const std::size_t n = std::min<std::size_t>(1 + random() % 40, text.size() - sent);
      ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), text.data() + sent, n));
      sent += n;
    }
    if (sent < text.size()) {
      ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), text.data() + sent, text.size() - sent));
    }
    ::shutdown(pair.peer.get(), SHUT_WR);
  });

  std::string received;
  std::minstd_rand random(11);
  std::atomic<int> starts{0};
  int cancelled = 0;
  int completed = 0;
  int wrongEnds = 0;
  std::string firstWrongEnd;
  for (int i = 0; i < iterations; ++i) {
    Outcome<std::optional<std::string>> read;
    CancellationSource source;
    const unsigned when = random() % 8;
    if (race == Race::kCancellationSource && when == 0) source.requestCancellation();
    const int before = starts.load();
    if (race == Race::kCancellationSource) {
      startOn(pool, withCancellation(source.token(), readLineAnnounced(reader, starts)), read);
    } else {
      startOn(pool,
              withTimeout(readLineAnnounced(reader, starts),
                          std::chrono::microseconds(when == 0 ? 0 : random() % (when * 25))),
              read);
    }
    starts.wait(before);  // the call has started on the worker
    readStarted.store(i);
    readStarted.notify_all();
    if (race == Race::kCancellationSource && when != 0) {
      spin(random() % (when * 3000));
      source.requestCancellation();
    }
    read.wait();
    if (read.result.hasValue() && read.result.value().has_value()) {
      received += *read.result.value();
      received += '\n';
      ++completed;
    } else if (race == Race::kTimeout ? read.endedWith<TimeoutError>()
                                      : read.endedWith<OperationCancelled>()) {
      ++cancelled;
    } else {
      ++wrongEnds;
      if (firstWrongEnd.empty()) {
        firstWrongEnd = read.result.hasValue() ? "the end of the stream" : read.what();
      }
    }
    EXPECT_EQ(read.ends.load(), 1);
  }
  readStarted.store(-2);
  readStarted.notify_all();
  // The rest of the lines, to the end of the stream.
  syncAwait([&]() -> Lazy<void> {
    while (std::optional<std::string_view> line = co_await reader.readLine()) {
      received += *line;
      received += '\n';
    }
  }().via(&pool));
  writer.join();
  EXPECT_EQ(wrongEnds, 0) << "first: " << firstWrongEnd;
  ASSERT_EQ(received.size(), text.size()) << "bytes lost or duplicated";
  EXPECT_TRUE(received == text) << "the lines differ";
  std::printf("  %d calls: %d returned a line, %d ended by the cancellation\n", iterations,
              completed, cancelled);
  EXPECT_EQ(lentBuffers(pool), 0u) << "lent buffers were not given back";
}

TEST_P(BufferedReaderTest, CancellationRacingDataKeepsEveryByte) {
  test::Watchdog watchdog(180s, "CancellationRacingData");
  ThreadPool pool(options(1));
  raceReadLines(pool, Race::kCancellationSource);
}

TEST_P(BufferedReaderTest, TimeoutsRacingDataKeepEveryByte) {
  test::Watchdog watchdog(180s, "TimeoutsRacingData");
  ThreadPool pool(options(1));
  raceReadLines(pool, Race::kTimeout);
}

TEST_P(BufferedReaderTest, FibersReadLines) {
  test::Watchdog watchdog(60s, "FibersReadLines");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  FiberFuture<std::vector<std::string>> lines = spawnFiber(&pool, [&] {
    BufferedReader reader(pair.stream);
    std::vector<std::string> got;
    while (std::optional<std::string_view> line = await(reader.readLine())) got.emplace_back(*line);
    return got;
  });
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "a\r\nbb\n\nccc\n", 11));
  ::shutdown(pair.peer.get(), SHUT_WR);
  EXPECT_EQ(syncAwait(std::move(lines)), (std::vector<std::string>{"a", "bb", "", "ccc"}));
  EXPECT_EQ(lentBuffers(pool), 0u);
}

TEST_P(BufferedReaderTest, MisuseIsAClearError) {
  test::Watchdog watchdog(60s, "Misuse");
  ThreadPool pool(options(1));
  test::StreamAndPeer pair = test::connectedPair(pool);
  EXPECT_TRUE(throws<std::invalid_argument>([&] { BufferedReader zero(pair.stream, 0); }));
  std::optional<BufferedReader> held(std::in_place, pair.stream);
  BufferedReader& reader = *held;
  EXPECT_TRUE(
      throws<std::invalid_argument>([&] { (void)syncAwait(reader.readUntil("").via(&pool)); }));
  EXPECT_TRUE(throws<std::out_of_range>([&] { reader.consume(1); }));
  // A second call while one waits: std::logic_error; the first goes on.
  Outcome<std::optional<std::string_view>> first;
  startOn(pool, reader.readLine(), first);
  test::quiesce(pool);  // the first call waits in its receive
  try {
    (void)syncAwait(reader.readLine().via(&pool));
    ADD_FAILURE() << "a second call was accepted";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("in flight"), std::string::npos) << e.what();
  }
  bool consumeRefused = false;  // on the worker: the reader is used by one thread at a time
  test::onWorker(pool, [&] {
    consumeRefused = throws<std::logic_error>([&] { reader.consume(0); });
  });
  EXPECT_TRUE(consumeRefused);
  ASSERT_TRUE(test::sendAllBlocking(pair.peer.get(), "x\n", 2));
  first.wait();
  ASSERT_TRUE(first.result.hasValue()) << first.what();
  EXPECT_EQ(first.result.value(), "x");
  test::onWorker(pool, [&] { held.reset(); });  // it held the frame's buffer
  EXPECT_EQ(lentBuffers(pool), 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, BufferedReaderTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
