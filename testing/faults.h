#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace weft::testing {

class Simulation;

// Faults: what a Network connection does to the bytes between the test's client and the
// server (Network::connect): delays, pacing, cuts into pieces, resets, half-closes and a
// receiver that stops reading. All of it happens in the simulation's virtual time, and
// what is drawn at random (chunk sizes) comes from the simulation's seed: the same seed
// gives the same pieces at the same virtual times.
//
// A default Faults is a perfect network: every byte arrives at once, in pieces as large
// as the relay reads (up to maxChunk). Each direction has its own Path; times are counted
// from the moment the connection was made.
//
// Semantics of one Path (the bytes one side writes, on their way to the other):
//  - latency: each piece arrives this long after it left (after the bandwidth let it go).
//  - bytesPerSecond: the relay reads from the sender no faster than this: a piece of n
//    bytes occupies the link for n / bytesPerSecond, and the next is read only then (the
//    sender's writes wait for room meanwhile, as behind a slow link). 0: no limit.
//    A piece arrives whole, when its last byte would have: use small pieces (maxChunk)
//    for a smooth arrival.
//  - maxChunk, randomChunks: the relay reads and writes at most maxChunk bytes at a time
//    (the receiver's reads return at most that much per piece that arrives separately);
//    with randomChunks, each piece's size is drawn from the seed in [1, maxChunk]: partial
//    reads and writes.
//  - window: at most this many bytes in flight (read from the sender, not yet delivered);
//    the relay reads no more until some are delivered.
//  - resetAfter: once this many bytes have arrived this way (at the virtual time the last
//    of them arrives; at once for 0), the connection is reset: the relay drops what is in
//    flight both ways; the client's and the server's reads return the bytes already
//    delivered to them, then fail with ECONNRESET; their writes fail (EPIPE: a Unix
//    socket reports a write after a reset so, where TCP would say ECONNRESET first).
//  - shutdownAfter: once this many bytes have arrived this way, the receiver sees the end
//    of the stream (as after the sender's shutdown(SHUT_WR)); what the sender writes
//    after them is read and dropped.
//  - stallAt, stallFor: from stallAt after the connection was made, for stallFor
//    (forever by default), the relay stops reading from the sender: a receiver that stops
//    reading. The sender's socket buffer fills (a few KiB: NetworkOptions::sendBuffer),
//    its writes wait, and a write time limit expires, in virtual time. Bytes in flight
//    before the stall are still delivered.
// resetAt resets the connection (as resetAfter does) at that time after it was made.
//
// What the Network does on its own, as TCP would: a side that ends its stream
// (shutdownWrite, or close) is seen by the other as the end of the stream after the
// bytes before it; a side that closes with unread data, or whose socket is written to
// after it closed, resets the connection: the other side's reads see ECONNRESET after the
// bytes that were in flight to it. A stall ends when its receiver closes (what was held
// back then reaches a closed socket, which resets the sender).
//
// Preconditions (checked by Network::connect, std::invalid_argument): latencies, times
// and stallFor are not negative; maxChunk and window are at least 1.
// Thread safety: a plain value.
//
// Example:
//   weft::testing::Faults faults;
//   faults.toClient.bytesPerSecond = 1000;       // a slow client: 1 KB/s
//   faults.toClient.maxChunk = 100;
//   faults.toServer.resetAfter = 10;             // reset in the middle of the request
//   TcpStream client = co_await net.connect("echo", faults);
struct Faults {
  using Duration = std::chrono::nanoseconds;

  struct Path {
    Duration latency{0};
    std::uint64_t bytesPerSecond = 0;
    std::size_t maxChunk = 65536;
    bool randomChunks = false;
    std::size_t window = 65536;
    std::optional<std::uint64_t> resetAfter;
    std::optional<std::uint64_t> shutdownAfter;
    std::optional<Duration> stallAt;
    Duration stallFor = Duration::max();
  };

  Path toServer;  // what the client writes, on its way to the server
  Path toClient;  // what the server writes, on its way to the client
  std::optional<Duration> resetAt;

  // A network that is slow and cuts bytes into pieces, but loses nothing: for each path,
  // drawn from sim.random(): a latency of 0 to 100 ms (whole milliseconds), a bandwidth
  // (a third of the time none; else 10 kB/s, 100 kB/s, 1 MB/s or 10 MB/s) and, half of
  // the time, random pieces of at most 1 to 4096 bytes (a power of two). Nothing
  // destructive (reset, shutdown, stall): set those yourself. noexcept: arithmetic.
  static Faults random(Simulation& sim) noexcept;

  // "to server: latency 20 ms, 1000 B/s, pieces of 1..16 B; to client: none", for
  // failure messages (SCOPED_TRACE). Errors: std::bad_alloc.
  std::string toString() const;
};

}  // namespace weft::testing
