// Raw epoll floor for benchmark/io: `epoll_peer <port>` serves on 127.0.0.1:<port> until
// SIGINT/SIGTERM, then exits 0. Plain C++, no coroutines: one state machine per connection,
// level-triggered, non-blocking.
//
//   WEFT_THREADS=n       n threads, each with its own epoll and its own SO_REUSEPORT
//                        listener (the kernel spreads connections over them); default 1
//   BENCH_PROTOCOL=echo  read up to 64 KiB, write all of it back, until EOF (default)
//   BENCH_PROTOCOL=http  HTTP/1.1 keep-alive hello, pipelined requests answered in order
//   READ_TIMEOUT_MS      ignored: this floor keeps no timers (the cost a timer adds is
//                        part of what the other servers are measured with)
//
// Reads go to one 64 KiB buffer per thread; a connection owns memory only for what it
// could not write yet (echo) or a request not complete yet (http).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

constexpr std::string_view kResponse =
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello";
constexpr size_t kReadSize = 64 * 1024;

int stopFd = -1;  // eventfd written by the signal handler; every loop watches it
bool isHttp = false;

void onSignal(int) {
  uint64_t one = 1;
  [[maybe_unused]] auto n = write(stopFd, &one, sizeof one);
}

struct Conn {
  int fd;
  std::string pending;  // echo: bytes not written yet; http: responses not written yet
  std::string request;  // http: the start of a request not complete yet
};

int listenOn(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 4096) != 0) {
    std::perror("bind/listen");
    std::exit(1);
  }
  return fd;
}

// Writes c->pending; false when the connection failed. Leaves the rest in pending.
bool flush(Conn* c) {
  while (!c->pending.empty()) {
    ssize_t n = send(c->fd, c->pending.data(), c->pending.size(), MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN;
    c->pending.erase(0, static_cast<size_t>(n));
  }
  return true;
}

// Appends one response per complete request in c->request to c->pending.
void answer(Conn* c) {
  size_t start = 0, end;
  while ((end = c->request.find("\r\n\r\n", start)) != std::string::npos) {
    c->pending.append(kResponse);
    start = end + 4;
  }
  c->request.erase(0, start);
}

void loop(int port) {
  int listener = listenOn(port);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the listener
  epoll_ctl(ep, EPOLL_CTL_ADD, listener, &ev);
  ev.data.ptr = &stopFd;  // the stop eventfd (never read: it stays readable for all loops)
  epoll_ctl(ep, EPOLL_CTL_ADD, stopFd, &ev);
  std::vector<char> buf(kReadSize);
  epoll_event events[256];

  auto close_conn = [&](Conn* c) {
    close(c->fd);  // also removes it from the epoll set
    delete c;
  };
  // Sets the interest: EPOLLOUT while something is pending (echo stops reading then).
  auto want = [&](Conn* c, bool out) {
    epoll_event e{};
    e.events = out ? EPOLLOUT : EPOLLIN;
    e.data.ptr = c;
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e);
  };

  for (;;) {
    int n = epoll_wait(ep, events, 256, -1);
    if (n < 0 && errno == EINTR) continue;
    for (int i = 0; i < n; ++i) {
      void* tag = events[i].data.ptr;
      if (tag == &stopFd) return;
      if (tag == nullptr) {
        for (;;) {
          int fd = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd < 0) break;
          int one = 1;
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          auto* c = new Conn{fd, {}, {}};
          epoll_event e{};
          e.events = EPOLLIN;
          e.data.ptr = c;
          epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
        }
        continue;
      }
      auto* c = static_cast<Conn*>(tag);
      if (events[i].events & EPOLLOUT) {
        if (!flush(c)) {
          close_conn(c);
        } else if (c->pending.empty()) {
          want(c, false);
        }
        continue;
      }
      ssize_t got = recv(c->fd, buf.data(), buf.size(), 0);
      if (got == 0 || (got < 0 && errno != EAGAIN)) {
        close_conn(c);
        continue;
      }
      if (got < 0) continue;
      if (isHttp) {
        c->request.append(buf.data(), static_cast<size_t>(got));
        answer(c);
      } else {
        c->pending.assign(buf.data(), static_cast<size_t>(got));
      }
      if (!flush(c)) {
        close_conn(c);
      } else if (!c->pending.empty()) {
        want(c, true);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <port>\n", argv[0]);
    return 2;
  }
  int port = std::atoi(argv[1]);
  const char* threadsEnv = std::getenv("WEFT_THREADS");
  int threads = threadsEnv ? std::max(1, std::atoi(threadsEnv)) : 1;
  const char* protocol = std::getenv("BENCH_PROTOCOL");
  isHttp = protocol && std::string_view(protocol) == "http";

  stopFd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back(loop, port);
  loop(port);
  for (auto& w : workers) w.join();
  return 0;
}
