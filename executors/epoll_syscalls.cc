// The system calls the epoll loop (executors/detail/epoll_loop.h) makes for one operation:
// its transfer, tried without blocking (attempt); whether its descriptor is ready now
// (readyNow, for a readiness wait); and the registration of the descriptor with the
// loop's epoll (registerFd). How the loop uses them: executors/epoll_loop.cc.
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "weft/executors/detail/epoll_loop.h"
#include "weft/executors/detail/io_loop_base.h"

namespace weft::detail::epoll {

int EpollLoop::registerFd(int number, Fd& fd, const IoOperation& op) noexcept {
  const std::uint64_t generation = op.ownerRetiresFd ? descriptorGeneration(number) : kUntrusted;
  epoll_event event{};
  event.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  event.data.u64 = eventData(number, generation);
  // A retired number is most likely a new file: ADD, and MOD on EEXIST (the same file,
  // released and adopted again). A raw fd is most likely the file registered last time:
  // MOD, and ADD on ENOENT (closed and reused behind the loop's back).
  const bool modifyFirst = !op.ownerRetiresFd && fd.everRegistered;
  int r = ::epoll_ctl(epollFd_, modifyFirst ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, number, &event);
  if (r != 0 && errno == (modifyFirst ? ENOENT : EEXIST)) {
    r = ::epoll_ctl(epollFd_, modifyFirst ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, number, &event);
  }
  if (r != 0) return -errno;
  fd.registered = fd.everRegistered = true;
  fd.generation = generation;
  fd.readable = fd.writable = true;  // the registration reports the state as an event
  fd.hungUp = false;
  return 0;
}

int EpollLoop::readyNow(int fd, bool write) noexcept {
  pollfd p{};
  p.fd = fd;
  p.events = static_cast<short>(write ? POLLOUT : (POLLIN | POLLRDHUP));
  int r;
  do {
    r = ::poll(&p, 1, 0);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return -errno;
  if (r == 0) return 0;
  return (p.revents & POLLNVAL) != 0 ? -EBADF : 1;
}

std::int64_t EpollLoop::attempt(IoOperation& op) noexcept {
  switch (op.opcode) {
    case IoOpcode::kReceiveLent: {
      const std::uint32_t id = pool_->take();
      if (id == BufferPool::kNone) return -ENOBUFS;
      const ssize_t r =
          ::recv(op.fd, pool_->address(id), pool_->bufferSize(), op.flags | MSG_DONTWAIT);
      if (r > 0) {
        op.lent = pool_->lend(id, static_cast<std::size_t>(r));
        return r;
      }
      pool_->recycle(id);  // nothing received: the next attempt takes it again
      return result(r);
    }
    case IoOpcode::kReceiveMessageLent: {
      const std::uint32_t id = pool_->take();
      if (id == BufferPool::kNone) return -ENOBUFS;
      op.message->msg_iov[0].iov_base = pool_->address(id);
      op.message->msg_iov[0].iov_len = kLentDatagramSize;
      const ssize_t r = ::recvmsg(op.fd, op.message, op.flags | MSG_DONTWAIT);
      if (r > 0) {
        op.lent = pool_->lend(id, static_cast<std::size_t>(r));
        return r;
      }
      pool_->recycle(id);  // an empty datagram, or none yet: the buffer goes back
      return result(r);
    }
    case IoOpcode::kReceive:
      return result(::recv(op.fd, op.buffer, op.length, op.flags | MSG_DONTWAIT));
    case IoOpcode::kSend:
      return result(::send(op.fd, op.buffer, op.length, op.flags | MSG_DONTWAIT | MSG_NOSIGNAL));
    case IoOpcode::kAccept:
      return result(::accept4(op.fd, op.address, op.address != nullptr ? &op.addressLength : nullptr,
                              SOCK_NONBLOCK | SOCK_CLOEXEC));
    case IoOpcode::kConnect: {
      if ((op.loopKey & kConnecting) != 0) {
        int error = 0;
        socklen_t length = sizeof error;
        if (::getsockopt(op.fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) return -errno;
        if (error == 0) {
          // Writable without an error can still mean "not yet" for a spurious wake-up.
          sockaddr_storage peer;
          socklen_t peerLength = sizeof peer;
          if (::getpeername(op.fd, reinterpret_cast<sockaddr*>(&peer), &peerLength) != 0) {
            return errno == ENOTCONN ? -EAGAIN : -errno;
          }
          return 0;
        }
        return -error;
      }
      return ::connect(op.fd, op.address, op.addressLength) == 0 ? 0 : -errno;
    }
    case IoOpcode::kReceiveMessage:
      return result(::recvmsg(op.fd, op.message, op.flags | MSG_DONTWAIT));
    case IoOpcode::kSendMessage:
      return result(::sendmsg(op.fd, op.message, op.flags | MSG_DONTWAIT | MSG_NOSIGNAL));
    case IoOpcode::kReadAt:
      return result(::pread(op.fd, op.buffer, op.length, static_cast<off_t>(op.offset)));
    case IoOpcode::kWriteAt:
      return result(::pwrite(op.fd, op.buffer, op.length, static_cast<off_t>(op.offset)));
    case IoOpcode::kSync:
      return (op.flags == IoOperation::kSyncDataOnly ? ::fdatasync(op.fd) : ::fsync(op.fd)) == 0
                 ? 0
                 : -errno;
    case IoOpcode::kPollReadable:
    case IoOpcode::kPollWritable:
      break;  // never attempted: readiness waits complete from their epoll event
    case IoOpcode::kReceiveMultishot:
    case IoOpcode::kWait:
      return -EOPNOTSUPP;  // refused by submit
  }
  return -EINVAL;
}

}  // namespace weft::detail::epoll
