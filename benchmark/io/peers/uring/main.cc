// Raw io_uring floor for benchmark/io: `uring_peer <port>` serves on 127.0.0.1:<port>
// until SIGINT/SIGTERM, then exits 0. Plain C++ over liburing, no coroutines: one state
// machine per connection with one operation in flight (a recv or a send).
//
//   WEFT_THREADS=n       n threads, each with its own ring and its own SO_REUSEPORT
//                        listener (the kernel spreads connections over them); default 1
//   BENCH_PROTOCOL=echo  read up to 64 KiB, write all of it back, until EOF (default)
//   BENCH_PROTOCOL=http  HTTP/1.1 keep-alive hello, pipelined requests answered in order
//   READ_TIMEOUT_MS      echo: each recv is linked to an IORING_OP_LINK_TIMEOUT; the
//                        connection is closed when the timeout cancels the recv
//   BENCH_RECV=multishot echo: one multishot recv per connection, kept armed from accept
//                        to end of stream (no time limit); data that arrives while an
//                        echo is being sent waits in the connection's queue, in order
//
// Multishot accept; recvs pick from a provided-buffer ring of the thread (64 KiB buffers),
// so a connection waiting to read owns no buffer.
#include <arpa/inet.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
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
constexpr unsigned kBufCount = 1024;  // a power of two (buffer ring)
constexpr unsigned kBufSize = 64 * 1024;
constexpr uint16_t kGroup = 0;
// user_data: the two tags below, or a Conn* (aligned to 8) with the operation in its low bits.
constexpr uint64_t kAcceptTag = 1, kStopTag = 2;
enum Op : uint64_t { kRecv = 0, kSend = 1, kTimeout = 2 };

int stopFd = -1;
bool isHttp = false;
bool multishot = false;
long timeoutMs = 0;

void onSignal(int) {
  uint64_t one = 1;
  [[maybe_unused]] auto n = write(stopFd, &one, sizeof one);
}

struct Conn {
  int fd;
  int bid = -1;     // echo: the buffer being sent back
  unsigned len = 0;  // bytes to send (echo: in buffer bid; http: in out)
  unsigned off = 0;  // bytes sent
  std::string in;    // http: the start of a request not complete yet
  std::string out;   // http: responses being sent
  // multishot echo: received buffers not sent back yet (bid, length), in arrival order;
  // sending: a send is in flight; ended: the multishot recv has ended (EOF or error)
  std::vector<std::pair<int, unsigned>> pending;
  size_t pendingHead = 0;
  bool sending = false;
  bool ended = false;
};

int listenOn(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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

class Loop {
 public:
  explicit Loop(int port) : listener_(listenOn(port)) {
    io_uring_params p{};
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    p.flags |= IORING_SETUP_CQSIZE;
    p.cq_entries = 16384;
    if (io_uring_queue_init_params(4096, &ring_, &p) != 0) {
      p = {};  // an older kernel: no single-issuer mode
      p.flags = IORING_SETUP_CQSIZE;
      p.cq_entries = 16384;
      if (int e = io_uring_queue_init_params(4096, &ring_, &p); e != 0) {
        std::fprintf(stderr, "io_uring_queue_init: %s\n", std::strerror(-e));
        std::exit(1);
      }
    }
    size_t ringBytes = kBufCount * sizeof(io_uring_buf);
    buffers_ = static_cast<io_uring_buf_ring*>(mmap(nullptr, ringBytes, PROT_READ | PROT_WRITE,
                                                    MAP_ANONYMOUS | MAP_PRIVATE, -1, 0));
    data_ = static_cast<char*>(mmap(nullptr, size_t{kBufCount} * kBufSize, PROT_READ | PROT_WRITE,
                                    MAP_ANONYMOUS | MAP_PRIVATE, -1, 0));
    io_uring_buf_ring_init(buffers_);
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<uint64_t>(buffers_);
    reg.ring_entries = kBufCount;
    reg.bgid = kGroup;
    if (int e = io_uring_register_buf_ring(&ring_, &reg, 0); e != 0) {
      std::fprintf(stderr, "io_uring_register_buf_ring: %s\n", std::strerror(-e));
      std::exit(1);
    }
    for (unsigned i = 0; i < kBufCount; ++i) {
      io_uring_buf_ring_add(buffers_, data_ + size_t{i} * kBufSize, kBufSize, static_cast<uint16_t>(i),
                            io_uring_buf_ring_mask(kBufCount), static_cast<int>(i));
    }
    io_uring_buf_ring_advance(buffers_, kBufCount);
    timeout_.tv_sec = timeoutMs / 1000;
    timeout_.tv_nsec = (timeoutMs % 1000) * 1000000;
  }

  void run() {
    accept();
    io_uring_prep_poll_add(sqe(), stopFd, POLLIN);
    io_uring_sqe_set_data64(last_, kStopTag);
    for (;;) {
      int e = io_uring_submit_and_wait(&ring_, 1);
      if (e < 0 && e != -EINTR) {
        std::fprintf(stderr, "io_uring_submit_and_wait: %s\n", std::strerror(-e));
        std::exit(1);
      }
      io_uring_cqe* cqe;
      unsigned head, seen = 0;
      bool stop = false;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        stop |= complete(cqe);
      }
      io_uring_cq_advance(&ring_, seen);
      if (stop) return;
      // Connections that found no free buffer try again now that some may be back.
      std::vector<Conn*> again;
      again.swap(starved_);
      for (Conn* c : again) recv(c);
    }
  }

 private:
  io_uring_sqe* sqe() {
    while ((last_ = io_uring_get_sqe(&ring_)) == nullptr) io_uring_submit(&ring_);
    return last_;
  }
  void tag(Conn* c, Op op) { io_uring_sqe_set_data64(last_, reinterpret_cast<uint64_t>(c) | op); }
  char* buffer(int bid) { return data_ + size_t(bid) * kBufSize; }
  void giveBack(int bid) {
    io_uring_buf_ring_add(buffers_, buffer(bid), kBufSize, static_cast<uint16_t>(bid),
                          io_uring_buf_ring_mask(kBufCount), 0);
    io_uring_buf_ring_advance(buffers_, 1);
  }

  void accept() {
    io_uring_prep_multishot_accept(sqe(), listener_, nullptr, nullptr, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(last_, kAcceptTag);
  }
  void recv(Conn* c) {
    io_uring_prep_recv(sqe(), c->fd, nullptr, kBufSize, 0);
    last_->flags |= IOSQE_BUFFER_SELECT;
    last_->buf_group = kGroup;
    tag(c, kRecv);
    if (timeoutMs > 0 && !isHttp) {
      last_->flags |= IOSQE_IO_LINK;
      io_uring_prep_link_timeout(sqe(), &timeout_, 0);
      tag(c, kTimeout);  // its completion is ignored: c may be gone by then
    }
  }
  void send(Conn* c) {
    const char* from = isHttp ? c->out.data() : buffer(c->bid);
    io_uring_prep_send(sqe(), c->fd, from + c->off, c->len - c->off, MSG_NOSIGNAL);
    tag(c, kSend);
  }
  void close(Conn* c) {
    if (c->bid >= 0) giveBack(c->bid);
    ::close(c->fd);
    delete c;
  }

  // Handles one completion; true when the loop is asked to stop.
  bool complete(io_uring_cqe* cqe) {
    uint64_t data = io_uring_cqe_get_data64(cqe);
    if (data == kStopTag) return true;
    if (data == kAcceptTag) {
      if (cqe->res >= 0) {
        int one = 1;
        setsockopt(cqe->res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        auto* c = new Conn{cqe->res, -1, 0, 0, {}, {}};
        if (multishot) {
          recvMultishot(c);
        } else {
          recv(c);
        }
      }
      if (!(cqe->flags & IORING_CQE_F_MORE)) accept();  // the multishot accept ended
      return false;
    }
    auto* c = reinterpret_cast<Conn*>(data & ~uint64_t{7});
    if (multishot) return completeMultishot(c, static_cast<Op>(data & 7), cqe);
    switch (static_cast<Op>(data & 7)) {
      case kTimeout:
        return false;
      case kRecv:
        if (cqe->res == -ENOBUFS) {
          starved_.push_back(c);
        } else if (cqe->res <= 0) {
          close(c);  // EOF, error, or cancelled by its timeout
        } else {
          int bid = static_cast<int>(cqe->flags >> IORING_CQE_BUFFER_SHIFT);
          auto n = static_cast<unsigned>(cqe->res);
          c->off = 0;
          if (!isHttp) {
            c->bid = bid;
            c->len = n;
            send(c);
            return false;
          }
          c->in.append(buffer(bid), n);
          giveBack(bid);
          size_t start = 0, end;
          while ((end = c->in.find("\r\n\r\n", start)) != std::string::npos) {
            c->out.append(kResponse);
            start = end + 4;
          }
          c->in.erase(0, start);
          c->len = static_cast<unsigned>(c->out.size());
          if (c->len > 0) {
            send(c);
          } else {
            recv(c);
          }
        }
        return false;
      case kSend:
        if (cqe->res < 0) {
          close(c);
          return false;
        }
        c->off += static_cast<unsigned>(cqe->res);
        if (c->off < c->len) {
          send(c);  // a short send: the rest
          return false;
        }
        if (isHttp) {
          c->out.clear();
        } else {
          giveBack(c->bid);
          c->bid = -1;
        }
        recv(c);
        return false;
    }
    return false;
  }

  // --- BENCH_RECV=multishot (echo) ---
  void recvMultishot(Conn* c) {
    io_uring_prep_recv_multishot(sqe(), c->fd, nullptr, 0, 0);
    last_->flags |= IOSQE_BUFFER_SELECT;
    last_->buf_group = kGroup;
    tag(c, kRecv);
  }
  // Sends the next queued buffer, or closes a connection whose recv has ended.
  void sendNext(Conn* c) {
    if (c->pendingHead < c->pending.size()) {
      auto [bid, n] = c->pending[c->pendingHead++];
      if (c->pendingHead == c->pending.size()) {
        c->pending.clear();
        c->pendingHead = 0;
      }
      c->bid = bid;
      c->len = n;
      c->off = 0;
      c->sending = true;
      send(c);
    } else if (c->ended) {
      for (size_t i = c->pendingHead; i < c->pending.size(); ++i) giveBack(c->pending[i].first);
      close(c);
    }
  }
  bool completeMultishot(Conn* c, Op op, io_uring_cqe* cqe) {
    if (op == kRecv) {
      if (cqe->res > 0) {
        c->pending.emplace_back(static_cast<int>(cqe->flags >> IORING_CQE_BUFFER_SHIFT),
                                static_cast<unsigned>(cqe->res));
      }
      if (!(cqe->flags & IORING_CQE_F_MORE)) {
        if (cqe->res == -ENOBUFS || cqe->res > 0) {
          recvMultishot(c);  // ended for want of buffers: armed again (they come back as sends end)
        } else {
          c->ended = true;  // EOF or error: close once what is queued is sent
        }
      }
      if (!c->sending) sendNext(c);
      return false;
    }
    // kSend
    if (cqe->res < 0) {
      giveBack(c->bid);
      c->bid = -1;
      c->sending = false;
      c->pending.erase(c->pending.begin(), c->pending.begin() + static_cast<long>(c->pendingHead));
      c->pendingHead = 0;
      for (auto& [bid, n] : c->pending) giveBack(bid);
      c->pending.clear();
      if (c->ended) {
        close(c);
      } else {
        ::shutdown(c->fd, SHUT_RDWR);  // the recv ends (res <= 0) and closes it
      }
      return false;
    }
    c->off += static_cast<unsigned>(cqe->res);
    if (c->off < c->len) {
      send(c);
      return false;
    }
    giveBack(c->bid);
    c->bid = -1;
    c->sending = false;
    sendNext(c);
    return false;
  }

  int listener_;
  io_uring ring_{};
  io_uring_sqe* last_ = nullptr;
  io_uring_buf_ring* buffers_ = nullptr;
  char* data_ = nullptr;
  __kernel_timespec timeout_{};
  std::vector<Conn*> starved_;
};

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
  if (const char* t = std::getenv("READ_TIMEOUT_MS")) timeoutMs = std::atol(t);
  const char* recvMode = std::getenv("BENCH_RECV");
  multishot = recvMode && std::string_view(recvMode) == "multishot" && !isHttp;

  stopFd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) {
    workers.emplace_back([port] { Loop(port).run(); });
  }
  Loop(port).run();
  for (auto& w : workers) w.join();
  return 0;
}
