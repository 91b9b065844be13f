#pragma once

#include <limits.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

#include "weft/coro/cancellation.h"
#include "weft/executors/executor.h"
#include "weft/executors/io_loop.h"
#include "weft/io/io_awaiter.h"
#include "weft/io/detail/io_request.h"
#include "weft/io/detail/socket_ops.h"
#include "weft/io/socket_address.h"

namespace weft::detail {

// The most iovecs one sendmsg(2) takes (IOV_MAX; more fail with EMSGSIZE).
inline constexpr std::size_t kMaxIovecs = IOV_MAX;

// A buffer a vectored write takes: bytes (anything that converts to
// std::span<const std::byte>: a std::vector<std::byte>, a std::array of them, a span) or
// text (anything that converts to std::string_view: a std::string, a string literal,
// which is written without its terminating NUL).
template <class T>
concept WriteBuffer = std::convertible_to<const T&, std::span<const std::byte>> ||
                      std::convertible_to<const T&, std::string_view>;

// The iovec of one buffer. noexcept: the conversions of the types it takes (standard
// containers, spans, strings) only read a pointer and a size.
inline iovec toIovec(const iovec& buffer) noexcept { return buffer; }
template <WriteBuffer T>
iovec toIovec(const T& buffer) noexcept {
  // sendmsg(2) only reads through iov_base: the const_cast never leads to a write.
  if constexpr (std::convertible_to<const T&, std::span<const std::byte>>) {
    const std::span<const std::byte> bytes = buffer;
    return iovec{const_cast<std::byte*>(bytes.data()), bytes.size()};
  } else {
    const std::string_view text = buffer;
    return iovec{const_cast<char*>(text.data()), text.size()};
  }
}

// The iovecs of a vectored write: the non-empty buffers of a list, in order, and what of
// them is still to be sent. Up to kInline iovecs are stored in the object (no
// allocation for the usual header-and-body writes), more on the heap. Moving it keeps the
// iovecs (they point at the caller's bytes, never into the list).
//
// Errors: the constructor throws std::bad_alloc when more than kInline buffers do not fit.
// Thread safety: none (one owner).
class IovecList {
 public:
  static constexpr std::size_t kInline = 8;

  IovecList() noexcept = default;

  // `Buffer`: std::span<const std::byte>, std::string_view or iovec.
  template <class Buffer>
  explicit IovecList(std::span<const Buffer> buffers) {
    const std::size_t count = nonEmptyCount(buffers);
    if (count > kInline) heap_ = std::make_unique<iovec[]>(count);
    iovec* out = data();
    for (const Buffer& buffer : buffers) {
      const iovec one = toIovec(buffer);
      if (one.iov_len == 0) continue;
      *out++ = one;
      total_ += one.iov_len;
    }
    size_ = count;
  }

  IovecList(IovecList&& other) noexcept
      : inline_(other.inline_),
        heap_(std::move(other.heap_)),
        size_(other.size_),
        first_(other.first_),
        total_(other.total_),
        sent_(other.sent_) {
    other.size_ = other.first_ = other.total_ = other.sent_ = 0;
  }
  IovecList& operator=(IovecList&&) = delete;
  IovecList(const IovecList&) = delete;

  // How many of `buffers` are not empty (the iovecs a list of them has). noexcept: a count.
  template <class Buffer>
  static std::size_t nonEmptyCount(std::span<const Buffer> buffers) noexcept {
    std::size_t count = 0;
    for (const Buffer& buffer : buffers) count += toIovec(buffer).iov_len == 0 ? 0 : 1;
    return count;
  }

  // The iovecs not yet sent in full (the first may be partly sent), and their count.
  iovec* pending() noexcept { return data() + first_; }
  std::size_t pendingCount() const noexcept { return size_ - first_; }
  // The non-empty buffers in the list, and their bytes in all.
  std::size_t size() const noexcept { return size_; }
  std::size_t totalBytes() const noexcept { return total_; }
  std::size_t bytesSent() const noexcept { return sent_; }

  // Records that the next `n` bytes were sent: whole iovecs are passed, a partly sent one
  // is advanced. Precondition: n <= totalBytes() - bytesSent(). noexcept: arithmetic.
  void consume(std::size_t n) noexcept {
    sent_ += n;
    iovec* const all = data();
    while (n > 0) {
      iovec& next = all[first_];
      if (n < next.iov_len) {
        next.iov_base = static_cast<char*>(next.iov_base) + n;
        next.iov_len -= n;
        return;
      }
      n -= next.iov_len;
      ++first_;
    }
  }

 private:
  iovec* data() noexcept { return heap_ ? heap_.get() : inline_.data(); }

  std::array<iovec, kInline> inline_{};
  std::unique_ptr<iovec[]> heap_;
  std::size_t size_ = 0;
  std::size_t first_ = 0;
  std::size_t total_ = 0;
  std::size_t sent_ = 0;
};

// No destination: a stream's write, or a connected datagram socket's send.
struct NoDestination {};

// sendmsg(fd, {destination, the iovecs of several buffers}) as one operation: a
// TcpStream's vectored write (Destination NoDestination, `emptyCompletesAtOnce`), a
// UdpSocket's datagram gathered from several buffers (SocketAddress for sendTo,
// NoDestination for a connected socket's send; an empty list sends an empty datagram).
// `Buffers` is the list: a std::span of the caller's buffers (std::span<const std::byte>
// or std::string_view), or a std::array of iovecs made when the awaitable was (the
// variadic forms: the awaitable holds them).
//
// The awaiter holds the msghdr, the iovecs and a copy of the destination: the kernel reads
// them while the operation is in flight (io_uring may read them after await_suspend
// returned), so they live in the awaiter, in the awaiting coroutine's frame (or on the
// fiber's stack), until the operation is complete. The list of buffers itself is read
// when the await begins.
//
// Errors (at co_await): std::system_error EBADF when the socket is closed, then
// std::invalid_argument for more than kMaxIovecs non-empty buffers (nothing is submitted
// in either case); std::bad_alloc for more than IovecList::kInline; as any operation
// after that (std::system_error naming the operation, and the destination for sendTo;
// OperationCancelled; ExecutorShutDown).
template <class Buffers, class Destination = NoDestination>
class VectoredSendAwaitable
    : public IoAwaitable<VectoredSendAwaitable<Buffers, Destination>> {
  using Buffer = typename Buffers::value_type;

 public:
  VectoredSendAwaitable(const char* what, int fd, const Buffers& buffers,
                        bool emptyCompletesAtOnce, std::int64_t timeoutNs,
                        const Destination& to = {}) noexcept
      : what_(what),
        fd_(fd),
        buffers_(buffers),
        emptyCompletesAtOnce_(emptyCompletesAtOnce),
        timeoutNs_(timeoutNs),
        to_(to) {}

  class Awaiter : public IoAwaiter {
   public:
    Awaiter(const VectoredSendAwaitable& a, Executor* executor, const CancellationToken& token)
        : IoAwaiter(a.what_, executor, token), what_(a.what_), to_(a.to_), buffers_(listOf(a)) {
      completesAtOnce_ = a.emptyCompletesAtOnce_ && buffers_.totalBytes() == 0;
      message_.msg_iov = buffers_.pending();
      message_.msg_iovlen = buffers_.size();
      if (message_.msg_iovlen == 0) {
        // An empty datagram as one empty buffer: the same to Linux, and qemu-user's
        // sendmsg returns 0 without sending anything for a message with no iovec at all.
        message_.msg_iov = &empty_;
        message_.msg_iovlen = 1;
      }
      if constexpr (std::is_same_v<Destination, SocketAddress>) {
        message_.msg_name = const_cast<sockaddr*>(to_.native());
        message_.msg_namelen = to_.nativeLength();
      }
      describeOpen(operation(),
                   {.opcode = IoOpcode::kSendMessage,
                    .fd = a.fd_,
                    .message = &message_,
                    .timeoutNs = a.timeoutNs_},
                   a.what_);
    }

    // An empty stream write completes at once (with 0), after the cancellation check.
    bool await_ready() const { return IoAwaiter::await_ready() || completesAtOnce_; }

    // The bytes sent (a datagram is sent whole).
    std::size_t await_resume() {
      if (completesAtOnce_) return 0;
      const std::int64_t r = IoAwaiter::await_resume();
      if (r < 0) [[unlikely]] {
        if constexpr (std::is_same_v<Destination, SocketAddress>) {
          throw std::system_error(static_cast<int>(-r), std::system_category(),
                                  std::string("weft: ") + what_ + " " + to_.toString());
        } else {
          throwIoError(r, what_);
        }
      }
      return static_cast<std::size_t>(r);
    }

   private:
    // The iovecs of `a`'s buffers, after the checks that submit nothing when they fail.
    static IovecList listOf(const VectoredSendAwaitable& a) {
      if (a.fd_ < 0) throwClosed(a.what_);
      const std::span<const Buffer> buffers(a.buffers_);
      const std::size_t count = IovecList::nonEmptyCount(buffers);
      if (count > kMaxIovecs) {
        throw std::invalid_argument(std::string("weft: ") + a.what_ + ": " +
                                    std::to_string(count) +
                                    " non-empty buffers, more than one sendmsg takes (IOV_MAX, " +
                                    std::to_string(kMaxIovecs) + ")");
      }
      return IovecList(buffers);
    }

    const char* what_;
    [[no_unique_address]] Destination to_;
    IovecList buffers_;
    msghdr message_{};
    iovec empty_{&empty_, 0};  // a valid address, no bytes
    bool completesAtOnce_ = false;
  };

 private:
  const char* what_;
  int fd_;
  Buffers buffers_;
  bool emptyCompletesAtOnce_;
  std::int64_t timeoutNs_;
  [[no_unique_address]] Destination to_;
};

}  // namespace weft::detail
