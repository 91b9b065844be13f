#include "weft/io/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <coroutine>
#include <cerrno>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/executors/executor.h"
#include "weft/executors/io_loop.h"
#include "weft/io/blocking.h"
#include "weft/io/detail/fd_waits.h"
#include "weft/io/detail/io_request.h"
#include "weft/io/io_awaiter.h"

namespace weft {

namespace {

// Linux transfers at most this much in one read or write (MAX_RW_COUNT). Capping here
// also keeps a length within the 32 bits an io_uring read or write takes.
constexpr std::size_t kMaxTransfer = 0x7ffff000;

// One IoOperation on the calling thread's loop (io_uring here), as an awaitable whose
// co_await returns the raw result: >= 0, or -errno (File names the failure with its
// path). The IoOperation lives in the awaiter, in the awaiting coroutine's frame; the
// awaitable holds only the fields a file operation sets (it too is in the frame).
class RingOperation {
 public:
  RingOperation(const char* what, IoOpcode opcode, int fd) noexcept
      : what_(what), opcode_(opcode), fd_(fd) {}
  RingOperation& buffer(const void* data, std::size_t length, std::uint64_t offset) noexcept {
    buffer_ = const_cast<void*>(data);
    length_ = length;
    offset_ = offset;
    return *this;
  }
  RingOperation& flags(int flags) noexcept {
    flags_ = flags;
    return *this;
  }

  class Awaiter : public IoAwaiter {
   public:
    Awaiter(const RingOperation& a, Executor* executor, const CancellationToken& token) noexcept
        : IoAwaiter(a.what_, executor, token) {
      detail::describe(operation(),
                       {.opcode = a.opcode_,
                        .fd = a.fd_,
                        .flags = a.flags_,
                        .buffer = a.buffer_,
                        .length = a.length_,
                        .offset = a.offset_});
    }
    // IoAwaiter::await_resume: the result, OperationCancelled, ExecutorShutDown.
  };

  Awaiter coAwait(Executor* executor, const CancellationToken& token) const noexcept {
    return Awaiter(*this, executor, token);
  }

 private:
  const char* what_;
  IoOpcode opcode_;
  int fd_;
  int flags_ = 0;
  void* buffer_ = nullptr;
  std::size_t length_ = 0;
  std::uint64_t offset_ = 0;
};

// How the calling thread performs a file operation: its io_uring loop submits it; its
// epoll loop (to which a regular file is always "ready": the loop would make the call
// itself, blocking the worker) first tries the call with RWF_NOWAIT and hands it to the
// blocking pool when that would wait; a thread without a loop hands it to the blocking
// pool. Errors: std::system_error if a ThreadPool worker's loop cannot be created.
enum class FileRoute { kRing, kQuickThenPool, kPool };

FileRoute routeOnThisThread() {
  IoLoop* loop = IoLoop::current();
  if (loop == nullptr) return FileRoute::kPool;
  return loop->backend() == IoBackend::kIoUring ? FileRoute::kRing : FileRoute::kQuickThenPool;
}

bool ringOnThisThread() { return routeOnThisThread() == FileRoute::kRing; }

// A system call's result as the loops report it: >= 0, or -errno. EINTR is retried.
template <class Call>
std::int64_t retryInterrupted(Call call) noexcept {
  for (;;) {
    const auto r = call();
    if (r >= 0) return static_cast<std::int64_t>(r);
    if (errno != EINTR) return -errno;
  }
}

// The epoll loop's (and a thread without a loop's) first try: preadv2/pwritev2 with
// RWF_NOWAIT, which the kernel performs only if it need not wait for the disk (the data in
// the page cache; a write over blocks the file already has), made at once on the calling
// thread. Returns the result, or -EAGAIN when the call would have waited or the file does
// not take RWF_NOWAIT for this direction (EOPNOTSUPP: a device, ext4's buffered writes;
// `refuses` then gets the direction's bit and later calls skip the try): the caller then
// goes to the blocking pool. A page-cache hit so costs a system call, not two thread
// hand-offs (docs/io.md, "Files").
constexpr std::uint8_t kQuickReads = 1;
constexpr std::uint8_t kQuickWrites = 2;

std::int64_t transferWithoutWaiting(bool write, int fd, void* data, std::size_t length,
                                    std::uint64_t offset,
                                    std::atomic<std::uint8_t>& refuses) noexcept {
  const std::uint8_t direction = write ? kQuickWrites : kQuickReads;
  if ((refuses.load(std::memory_order_relaxed) & direction) != 0) return -EAGAIN;
  iovec part{data, length};
  const std::int64_t r = retryInterrupted([&] {
    return write ? ::pwritev2(fd, &part, 1, static_cast<off_t>(offset), RWF_NOWAIT)
                 : ::preadv2(fd, &part, 1, static_cast<off_t>(offset), RWF_NOWAIT);
  });
  if (r != -EOPNOTSUPP) return r;
  refuses.fetch_or(direction, std::memory_order_relaxed);
  return -EAGAIN;
}

// transferWithoutWaiting as an await that never suspends, made only when the coroutine's
// token is not cancelled (answering -EAGAIN otherwise, so that the blocking pool's await
// throws OperationCancelled as it would have: a loop of reads stops when cancelled even if
// every read would hit the page cache).
class QuickTransfer {
 public:
  QuickTransfer(bool write, int fd, void* data, std::size_t length, std::uint64_t offset,
                std::atomic<std::uint8_t>& refuses) noexcept
      : write_(write), fd_(fd), data_(data), length_(length), offset_(offset), refuses_(refuses) {}

  class Awaiter {
   public:
    Awaiter(const QuickTransfer& transfer, bool cancelled) noexcept
        : transfer_(transfer), cancelled_(cancelled) {}
    bool await_ready() const noexcept { return true; }
    void await_suspend(std::coroutine_handle<>) const noexcept {}
    std::int64_t await_resume() const noexcept {
      if (cancelled_) return -EAGAIN;
      return transferWithoutWaiting(transfer_.write_, transfer_.fd_, transfer_.data_,
                                    transfer_.length_, transfer_.offset_, transfer_.refuses_);
    }

   private:
    const QuickTransfer& transfer_;
    bool cancelled_;
  };

  Awaiter coAwait(Executor*, const CancellationToken& token) const noexcept {
    return Awaiter(*this, token.isCancellationRequested());
  }

 private:
  bool write_;
  int fd_;
  void* data_;
  std::size_t length_;
  std::uint64_t offset_;
  std::atomic<std::uint8_t>& refuses_;
};

[[noreturn]] void throwFileError(std::int64_t result, const char* what, const std::string& path) {
  throw std::system_error(static_cast<int>(-result), std::system_category(),
                          std::string("weft: ") + what + " " + path);
}

void requireOpen(int fd, const char* what) {
  if (fd < 0) {
    throw std::system_error(EBADF, std::system_category(),
                            std::string("weft: ") + what + " on a closed File");
  }
}

void requireOffset(std::uint64_t offset, const char* what, const std::string& path) {
  // Above 2^63 - 1 the offset is negative to the kernel, and io_uring reads -1 as "the
  // file position": refused for both.
  if (offset > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max())) {
    throwFileError(-EINVAL, what, path + ": offset above 2^63 - 1");
  }
}

int openFlags(FileMode mode) {
  const bool write = hasFlags(mode, FileMode::kWrite) || hasFlags(mode, FileMode::kAppend);
  const bool read = hasFlags(mode, FileMode::kRead);
  if (!read && !write) {
    throw std::invalid_argument("weft: File::open: the mode has neither kRead nor kWrite");
  }
  if (!write && (hasFlags(mode, FileMode::kCreate) || hasFlags(mode, FileMode::kTruncate))) {
    throw std::invalid_argument("weft: File::open: kCreate and kTruncate need kWrite");
  }
  if (hasFlags(mode, FileMode::kExclusive) && !hasFlags(mode, FileMode::kCreate)) {
    throw std::invalid_argument("weft: File::open: kExclusive needs kCreate");
  }
  int flags = O_CLOEXEC | (read && write ? O_RDWR : write ? O_WRONLY : O_RDONLY);
  if (hasFlags(mode, FileMode::kCreate)) flags |= O_CREAT;
  if (hasFlags(mode, FileMode::kExclusive)) flags |= O_EXCL;
  if (hasFlags(mode, FileMode::kTruncate)) flags |= O_TRUNC;
  if (hasFlags(mode, FileMode::kAppend)) flags |= O_APPEND;
  return flags;
}

// open(2) takes a C string: a path with a NUL would name the file before the NUL.
void requireNoNul(const std::string& path) {
  if (path.find('\0') == std::string::npos) return;
  std::string shown;  // the path, its NULs as \0 (one would end what())
  for (char c : path) {
    if (c == '\0') {
      shown += "\\0";
    } else {
      shown += c;
    }
  }
  throw std::invalid_argument("weft: File::open: the path contains a NUL byte: " + shown);
}

}  // namespace

File::File(int fd, std::string path) noexcept
    : fd_(fd),
      path_(std::move(path)),
      positional_(fd < 0 || ::lseek(fd, 0, SEEK_CUR) >= 0 || errno != ESPIPE) {}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    positional_ = other.positional_;
    refusesQuick_.store(other.refusesQuick_.load(std::memory_order_relaxed),
                        std::memory_order_relaxed);
  }
  return *this;
}

File::~File() { close(); }

void File::close() noexcept {
  // Operations still waiting on the descriptor end (see detail::closeDescriptor).
  detail::closeDescriptor(std::exchange(fd_, -1));
}

Lazy<File> File::open(std::string path, FileMode mode, mode_t permissions) {
  requireNoNul(path);
  const int flags = openFlags(mode);
  // On the blocking pool whatever the loop: neither loop has an open operation, and a
  // path lookup can block (NFS, a FIFO without its other end).
  const std::int64_t fd = co_await blocking([&path, flags, permissions] {
    return retryInterrupted([&] { return ::open(path.c_str(), flags, permissions); });
  });
  if (fd < 0) throwFileError(fd, "open", path);
  co_return File(static_cast<int>(fd), std::move(path));
}

Lazy<std::size_t> File::readAt(std::span<std::byte> buffer, std::uint64_t offset) const {
  requireOpen(fd_, "readAt");
  requireOffset(offset, "readAt on", path_);
  if (!positional_) throwFileError(-ESPIPE, "readAt on", path_);
  const int fd = fd_;
  void* const data = buffer.data();
  const std::size_t length = std::min(buffer.size(), kMaxTransfer);
  const FileRoute route = routeOnThisThread();
  std::int64_t r = -EAGAIN;
  if (route == FileRoute::kRing) {
    r = co_await RingOperation("readAt on a File", IoOpcode::kReadAt, fd)
            .buffer(data, length, offset);
  } else if (route == FileRoute::kQuickThenPool) {
    r = co_await QuickTransfer(false, fd, data, length, offset, refusesQuick_);
  }
  if (r == -EAGAIN && route != FileRoute::kRing) {
    r = co_await blocking([fd, data, length, offset] {
      return retryInterrupted(
          [&] { return ::pread(fd, data, length, static_cast<off_t>(offset)); });
    });
  }
  if (r < 0) throwFileError(r, "readAt on", path_);
  co_return static_cast<std::size_t>(r);
}

Lazy<std::size_t> File::writeAt(std::span<const std::byte> buffer, std::uint64_t offset) const {
  requireOpen(fd_, "writeAt");
  requireOffset(offset, "writeAt on", path_);
  if (!positional_) throwFileError(-ESPIPE, "writeAt on", path_);
  const int fd = fd_;
  const void* const data = buffer.data();
  const std::size_t length = std::min(buffer.size(), kMaxTransfer);
  const FileRoute route = routeOnThisThread();
  std::int64_t r = -EAGAIN;
  if (route == FileRoute::kRing) {
    r = co_await RingOperation("writeAt on a File", IoOpcode::kWriteAt, fd)
            .buffer(data, length, offset);
  } else if (route == FileRoute::kQuickThenPool) {
    r = co_await QuickTransfer(true, fd, const_cast<void*>(data), length, offset, refusesQuick_);
  }
  if (r == -EAGAIN && route != FileRoute::kRing) {
    r = co_await blocking([fd, data, length, offset] {
      return retryInterrupted(
          [&] { return ::pwrite(fd, data, length, static_cast<off_t>(offset)); });
    });
  }
  if (r < 0) throwFileError(r, "writeAt on", path_);
  co_return static_cast<std::size_t>(r);
}

Lazy<void> File::readExactlyAt(std::span<std::byte> buffer, std::uint64_t offset) const {
  std::size_t done = 0;
  while (done < buffer.size()) {
    std::size_t n;
    try {
      n = co_await readAt(buffer.subspan(done), offset + done);
    } catch (...) {
      // Say how much of the buffer was filled (IncompleteTransfer's rule). The EndOfFile
      // below is thrown outside this block: it has its own count.
      if (done == 0) throw;
      throw IncompleteTransfer("readExactlyAt on " + path_, done, buffer.size());
    }
    if (n == 0) throw EndOfFile(done);
    done += n;
  }
}

Lazy<void> File::writeAllAt(std::span<const std::byte> buffer, std::uint64_t offset) const {
  std::size_t done = 0;
  while (done < buffer.size()) {
    try {
      const std::size_t n = co_await writeAt(buffer.subspan(done), offset + done);
      // pwrite(2) of a regular file writes something or fails; never spin on a 0.
      if (n == 0) throwFileError(-EIO, "writeAt wrote nothing to", path_);
      done += n;
    } catch (...) {
      // Say how much of the buffer was written (IncompleteTransfer's rule).
      if (done == 0) throw;
      throw IncompleteTransfer("writeAllAt on " + path_, done, buffer.size());
    }
  }
}

Lazy<void> File::sync() const { return syncImpl(false); }

Lazy<void> File::syncData() const { return syncImpl(true); }

Lazy<void> File::syncImpl(bool dataOnly) const {
  const char* what = dataOnly ? "syncData" : "sync";
  requireOpen(fd_, what);
  const int fd = fd_;
  std::int64_t r;
  if (ringOnThisThread()) {
    const char* awaiting = dataOnly ? "syncData on a File" : "sync on a File";
    r = co_await RingOperation(awaiting, IoOpcode::kSync, fd)
            .flags(dataOnly ? IoOperation::kSyncDataOnly : 0);
  } else {
    r = co_await blocking([fd, dataOnly] {
      return retryInterrupted([&] { return dataOnly ? ::fdatasync(fd) : ::fsync(fd); });
    });
  }
  if (r < 0) throwFileError(r, dataOnly ? "syncData on" : "sync on", path_);
}

Lazy<std::uint64_t> File::size() const {
  requireOpen(fd_, "size");
  const int fd = fd_;
  struct stat status {};
  const std::int64_t r = co_await blocking([fd, &status] {
    return retryInterrupted([&] { return ::fstat(fd, &status); });
  });
  if (r < 0) throwFileError(r, "size of", path_);
  co_return static_cast<std::uint64_t>(status.st_size);
}

}  // namespace weft
