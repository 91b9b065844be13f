// A tiny key-value server with a line protocol, to show framing with weft::BufferedReader:
// one command per line (ended by "\n" or "\r\n"), one reply line per command, in order.
//   SET key value     OK                    (the value is the rest of the line)
//   GET key           VALUE value, or NOT_FOUND
//   DEL key           DELETED, or NOT_FOUND
//   anything else     ERROR ... (the connection stays open)
// A line longer than 4 KiB is answered "ERROR line too long" and the connection closed.
// Commands sent together (pipelined) are answered together, with one write.
//   kv_server PORT    serves 127.0.0.1:PORT until SIGINT or SIGTERM, then stops
//                     accepting, lets connections finish (5 s at most), cancels the
//                     rest, and exits 0.
// Environment: WEFT_THREADS (workers, default 1), WEFT_IO_BACKEND (io_uring or epoll),
// SHUTDOWN_GRACE_MS (what a stop leaves connections to finish; default 5000).
// Try it: `printf 'SET greeting hello world\nGET greeting\n' | nc -q1 127.0.0.1 PORT`.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <unordered_map>

#include <weft/coro/cancellation.h>
#include <weft/executors/thread_pool.h>
#include <weft/io/buffered_reader.h>
#include <weft/io/signal_set.h>
#include <weft/io/tcp_listener.h>

#include "server.h"

using namespace std::chrono_literals;

// The store, shared by every connection (on every worker). A plain std::mutex: it is held
// only for a lookup, never across a co_await.
class Store {
 public:
  void set(std::string_view key, std::string_view value) {
    const std::lock_guard lock(mutex_);
    map_.insert_or_assign(std::string(key), std::string(value));
  }
  std::optional<std::string> get(std::string_view key) const {
    const std::lock_guard lock(mutex_);
    const auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  bool erase(std::string_view key) {
    const std::lock_guard lock(mutex_);
    const auto it = map_.find(key);
    if (it == map_.end()) return false;
    map_.erase(it);
    return true;
  }

 private:
  struct Hash {  // lookups by std::string_view, without making a std::string
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::string, Hash, std::equal_to<>> map_;
};

Store store;

// The first word of `text` (up to a space), removed from it.
std::string_view nextWord(std::string_view& text) {
  const std::size_t space = text.find(' ');
  const std::string_view word = text.substr(0, space);
  text.remove_prefix(space == std::string_view::npos ? text.size() : space + 1);
  return word;
}

// Appends the reply to one command line to `replies`.
void execute(std::string_view line, std::string& replies) {
  const std::string_view command = nextWord(line);
  const std::string_view key = nextWord(line);  // `line` is now the value, if any
  if (command == "SET" && !key.empty()) {
    store.set(key, line);
    replies += "OK\n";
  } else if (command == "GET" && !key.empty() && line.empty()) {
    const std::optional<std::string> value = store.get(key);
    replies += value ? "VALUE " + *value + "\n" : "NOT_FOUND\n";
  } else if (command == "DEL" && !key.empty() && line.empty()) {
    replies += store.erase(key) ? "DELETED\n" : "NOT_FOUND\n";
  } else {
    replies += "ERROR expected SET key value, GET key or DEL key\n";
  }
}

// One connection: read a line, answer it. The reader hands out each line as a view into
// the buffer the event loop lent for the receive that brought it (no copy unless the line
// was cut in two by the network), and holds nothing while the client is quiet.
weft::Lazy<void> serve(weft::TcpStream stream) {
  weft::BufferedReader reader(stream, 4096);  // the longest line we accept, "\n" included
  std::string replies;
  try {
    while (std::optional<std::string_view> line = co_await reader.readLine()) {
      execute(*line, replies);
      // More whole commands already here (pipelined): answer them all with one write.
      if (reader.buffered().find('\n') != std::string_view::npos) continue;
      co_await stream.writeAll(replies);
      replies.clear();
    }
  } catch (const weft::FrameTooLarge&) {
    replies += "ERROR line too long\n";
  } catch (const std::exception&) {  // reset by the peer, or cancelled at shutdown
    replies.clear();
  }
  if (!replies.empty()) {  // what is owed before closing (a line too long)
    try {
      co_await stream.writeAll(replies);
    } catch (const std::exception&) {
    }
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PORT\n", argv[0]);
    return 2;
  }
  weft::SignalSet signals{SIGINT, SIGTERM};  // from here on they no longer end the process
  const char* threads = std::getenv("WEFT_THREADS");
  weft::ThreadPool pool(threads != nullptr ? std::strtoul(threads, nullptr, 10) : 1, "kv");
  auto listener =
      weft::TcpListener::bind(weft::SocketAddress::parse("127.0.0.1", std::atoi(argv[1])));
  std::printf("kv_server: 127.0.0.1:%d, %s, %zu thread(s)\n", listener.localAddress().port(),
              weft::ioBackendName(pool.ioBackend()).data(), pool.threadCount());
  std::fflush(stdout);

  const int signal = runUntilSignal(pool, signals, [&](weft::CancellationToken stop) {
    return serveConnections(listener, serve, std::move(stop), shutdownGrace(5s));
  });
  std::printf("kv_server: stopped by signal %d\n", signal);
  return 0;
}
