#include "weft/io/tcp_stream.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "weft/io/detail/fd_waits.h"
#include "weft/io/detail/socket_util.h"
#include "weft/io/detail/stream_reads.h"

namespace weft {

TcpStream& TcpStream::operator=(TcpStream&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    readTimeoutNs_ = other.readTimeoutNs_;
    writeTimeoutNs_ = other.writeTimeoutNs_;
  }
  return *this;
}

TcpStream::~TcpStream() { close(); }

void TcpStream::close() noexcept {
  // Operations still waiting on the descriptor end (see detail::closeDescriptor).
  detail::closeDescriptor(std::exchange(fd_, -1));
}

Lazy<TcpStream> TcpStream::connect(SocketAddress address) {
  TcpStream stream(detail::openSocket(address.family(), SOCK_STREAM, "connect"));
  if (address.isIpv4() || address.isIpv6()) stream.setNoDelay(true);
  const std::string what = "connect to " + address.toString();
  try {
    co_await IoOperationAwaitable("connect", IoOpcode::kConnect, stream.nativeHandle())
        .address(const_cast<sockaddr*>(address.native()), address.nativeLength());
  } catch (const std::system_error& e) {
    if (e.code().category() != std::system_category()) throw;
    throw std::system_error(e.code(), "weft: " + what);
  }
  co_return stream;
}

Lazy<void> TcpStream::writeAll(std::span<const std::span<const std::byte>> buffers) {
  return writeAllBuffers(detail::IovecList(buffers));
}

Lazy<void> TcpStream::writeAll(std::span<const std::string_view> texts) {
  return writeAllBuffers(detail::IovecList(texts));
}

Lazy<void> TcpStream::writeAllBuffers(detail::IovecList buffers) {
  const std::size_t total = buffers.totalBytes();
  msghdr message{};  // read by the kernel while each sendmsg is in flight
  while (buffers.bytesSent() < total) {
    message.msg_iov = buffers.pending();
    message.msg_iovlen = std::min(buffers.pendingCount(), detail::kMaxIovecs);
    std::size_t n;
    try {
      n = co_await IoOperationAwaitable("write to a TcpStream", IoOpcode::kSendMessage, fd_)
              .message(&message)
              .timeout(writeTimeoutNs_);
    } catch (...) {
      // As writeAll of one buffer: the bytes already sent cannot be taken back.
      if (buffers.bytesSent() == 0) throw;
      throw IncompleteTransfer("writeAll to a TcpStream", buffers.bytesSent(), total);
    }
    buffers.consume(n);
  }
}

Lazy<std::size_t> TcpStream::readSome(std::string& out, std::size_t max) {
  const std::size_t before = out.size();
  if (max > out.max_size() - before) {  // before + max would wrap around, or cannot be
    throw std::length_error("weft: readSome from a TcpStream: the string cannot grow by max");
  }
  out.resize(before + max);
  std::size_t n = 0;
  try {
    n = co_await read(std::span<char>(out).subspan(before));
  } catch (...) {
    out.resize(before);
    throw;
  }
  out.resize(before + n);
  co_return n;
}

namespace {

// One non-blocking transfer on `fd` (`transfer` makes the system call): the bytes moved,
// or std::nullopt when the socket would block. EINTR is retried; other errors throw.
template <class Transfer>
std::optional<std::size_t> transferNow(int fd, const char* what, Transfer transfer) {
  if (fd < 0) detail::throwClosed(what);
  for (;;) {
    const ssize_t n = transfer();
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EAGAIN || errno == EWOULDBLOCK) return std::nullopt;
    if (errno != EINTR) {
      throw std::system_error(errno, std::system_category(), std::string("weft: ") + what);
    }
  }
}

}  // namespace

std::optional<std::size_t> TcpStream::tryRead(std::span<std::byte> buffer) const {
  // An empty buffer: 0 at once, no system call (recv(2) of 0 bytes would return 0, the end
  // of the stream to the caller, when data is pending, and EAGAIN when none is).
  if (buffer.empty() && fd_ >= 0) return 0;
  if (fd_ >= 0 && detail::streamReadsActive(fd_)) [[unlikely]] {
    // What receive()'s armed request took comes first (io/detail/stream_reads.cc).
    std::size_t n = 0;
    int error = 0;
    switch (detail::readInbox(fd_, buffer, n, error)) {
      case detail::InboxRead::kBytes:
        return n;
      case detail::InboxRead::kFinal:
        if (error == 0) return 0;
        throw std::system_error(error, std::system_category(), "weft: read from a TcpStream");
      case detail::InboxRead::kNothing:
        return std::nullopt;
      case detail::InboxRead::kSocket:
        break;
    }
  }
  return transferNow(fd_, "read from a TcpStream",
                     [&] { return ::recv(fd_, buffer.data(), buffer.size(), MSG_DONTWAIT); });
}

std::optional<std::size_t> TcpStream::tryWrite(std::span<const std::byte> buffer) const {
  if (buffer.empty() && fd_ >= 0) return 0;  // as tryRead: 0 at once, no system call
  return transferNow(fd_, "write to a TcpStream", [&] {
    return ::send(fd_, buffer.data(), buffer.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  });
}

void TcpStream::shutdownWrite() {
  if (fd_ < 0) detail::throwClosed("shutdownWrite");
  if (::shutdown(fd_, SHUT_WR) != 0) {
    throw std::system_error(errno, std::system_category(), "weft: shutdownWrite");
  }
}

void TcpStream::setNoDelay(bool on) { detail::setSocketOption(fd_, IPPROTO_TCP, TCP_NODELAY, on, "TCP_NODELAY"); }

void TcpStream::setKeepAlive(bool on) { detail::setSocketOption(fd_, SOL_SOCKET, SO_KEEPALIVE, on, "SO_KEEPALIVE"); }

SocketAddress TcpStream::localAddress() const { return detail::socketName(fd_, false); }

SocketAddress TcpStream::peerAddress() const { return detail::socketName(fd_, true); }

}  // namespace weft
