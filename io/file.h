#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "weft/coro/lazy.h"
#include "weft/executors/io_loop.h"
#include "weft/io/incomplete_transfer.h"

namespace weft {

// FileMode: how File::open opens a file, as flags combined with | (like std::ios's
// openmode, or Rust's OpenOptions).
//   kRead                          an existing file, for reading (O_RDONLY)
//   kWrite | kCreate | kTruncate   a file written from scratch (what "w" means to fopen)
//   kReadWrite | kCreate           read and written in place, created if missing
//   kAppend | kCreate              a log: every write goes to the end
enum class FileMode : std::uint32_t {
  kRead = 1u << 0,       // O_RDONLY; with kWrite, O_RDWR
  kWrite = 1u << 1,      // O_WRONLY
  kReadWrite = kRead | kWrite,
  kCreate = 1u << 2,     // O_CREAT: create the file if it does not exist (needs writing)
  kExclusive = 1u << 3,  // O_EXCL, with kCreate: fail with EEXIST if it exists
  kTruncate = 1u << 4,   // O_TRUNC: empty it first (needs writing)
  kAppend = 1u << 5,     // O_APPEND (implies kWrite): writes go to the end, whatever offset
};

constexpr FileMode operator|(FileMode a, FileMode b) noexcept {
  return static_cast<FileMode>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
constexpr FileMode operator&(FileMode a, FileMode b) noexcept {
  return static_cast<FileMode>(static_cast<std::uint32_t>(a) & static_cast<std::uint32_t>(b));
}
// True when every flag of `flags` is in `mode`.
constexpr bool hasFlags(FileMode mode, FileMode flags) noexcept { return (mode & flags) == flags; }

// Thrown by File::readExactlyAt when the file ends before the buffer is full.
// bytesRead() says how much of the buffer was filled. Not an IncompleteTransfer (which
// reports a failure part-way; see io/incomplete_transfer.h for why).
class EndOfFile : public std::runtime_error {
 public:
  explicit EndOfFile(std::size_t bytesRead)
      : std::runtime_error("weft: the file ended before the read was complete"),
        bytesRead_(bytesRead) {}
  std::size_t bytesRead() const noexcept { return bytesRead_; }

 private:
  std::size_t bytesRead_;
};

// File: a regular file read and written at explicit offsets (pread/pwrite), with
// awaitables that never block the executor's threads.
//
// Semantics:
//  - How each operation runs depends on the event loop of the thread that awaits it:
//    with io_uring (IoLoop::current()->backend() == IoBackend::kIoUring) readAt, writeAt,
//    sync and syncData are submitted to the ring, and the coroutine resumes on that
//    thread when the kernel is done. With epoll (to which a regular file is always
//    "ready": its loop would make the call itself, blocking the worker), readAt and
//    writeAt are first tried at once with RWF_NOWAIT, which the kernel performs only if
//    it need not wait for the disk (cached data: no suspension, no thread hop); when it
//    would wait, or the file refuses RWF_NOWAIT (procfs, ext4's buffered writes: noted
//    once per File), they run on BlockingPool::defaultPool() through weft::blocking and
//    resume as blocking() says (on the coroutine's executor, or its ThreadPool), as do
//    sync and syncData, and every operation on a thread without a loop.
//  - open() and size() always run on BlockingPool::defaultPool(): the event loops have
//    no open or stat operation, and opening can block for long (a path lookup on NFS, a
//    FIFO waiting for its writer). close() is synchronous (close(2) of a local file does
//    not wait for the disk; call sync() first to learn of write errors).
//  - readAt returns the bytes read, possibly fewer than asked (0 at or past the end of
//    the file, or for an empty buffer, wherever the offset: as pread(2) does, that 0
//    does not mean the end of the file); writeAt the bytes written, possibly fewer (0
//    for an empty buffer, which writes nothing). readExactlyAt and writeAllAt
//    loop until the whole buffer is done. One call transfers at most 0x7ffff000 bytes
//    (Linux's limit), so a larger buffer always takes several.
//  - There is no file position: operations at distinct offsets may be in flight together
//    (from several coroutines, on several threads). With kAppend, Linux writes at the
//    end whatever the offset (pwrite(2), BUGS).
//  - Cancellation: every await honours the coroutine's token. An operation in the ring is
//    cancelled there (a read or write the kernel already started finishes and is
//    returned); one queued on the blocking pool is withdrawn before it starts, and once
//    started it finishes. The await throws OperationCancelled only when nothing was done
//    (readExactlyAt and writeAllAt: IncompleteTransfer when part of the buffer was).
//  - Shutdown of the ThreadPool the coroutine runs on: the same rule, with
//    ExecutorShutDown. In the ring the pool's loop cancels the operation; on the blocking
//    pool (epoll) an operation still queued is withdrawn and the await throws
//    ExecutorShutDown on a worker while the pool drains, and one that has started is
//    waited for by the shutdown and returns its result on the pool (blocking()'s rule).
//  - A descriptor that takes no offsets (a pipe, a FIFO, a socket: lseek(2) fails with
//    ESPIPE) makes readAt, writeAt and what loops over them fail with ESPIPE on both
//    backends, as pread(2) does: io_uring would ignore the offset and read or write the
//    stream (and a write to a pipe without a reader would raise SIGPIPE, which weft never
//    does). Character devices that accept offsets (/dev/zero) work as files.
//  - Destroying the File closes it.
//
// Preconditions: the File and the buffer of an operation stay valid and unmoved until
// its await returns; close() (and the destructor, and move-assignment) only when no
// operation is in flight. A coroutine awaiting an operation must not be destroyed while
// the blocking pool runs it (blocking()'s rule: weft aborts with a message).
//
// Errors: std::system_error with the errno and a message naming the operation and the
// path: open's ENOENT, EACCES, EISDIR, EEXIST...; EBADF for an operation on a closed File
// (or a write to a File opened for reading only); EIO, ENOSPC, EDQUOT from writes and
// syncs; EINVAL for an offset above 2^63 - 1. std::invalid_argument from open for a mode
// that cannot be opened (neither kRead nor kWrite; kCreate or kTruncate without writing;
// kExclusive without kCreate), or for a path that contains a NUL byte (open(2) would take
// the path up to it: "data\0.tmp" would open "data"). EndOfFile from readExactlyAt.
// OperationCancelled; ExecutorShutDown when the pool or the event loop stops with the
// operation in flight. readExactlyAt and writeAllAt throw IncompleteTransfer instead (its
// cause() one of the above) when they fail after transferring some of the buffer.
//
// Thread safety: distinct Files are independent. Operations on one File may be awaited
// from several threads at once; open/close/move are not synchronised with them.
//
// Example:
//   weft::File file = co_await weft::File::open("data.bin", weft::FileMode::kRead);
//   std::size_t n = co_await file.readAt(buffer, 4096);
//   co_await file.readExactlyAt(header, 0);  // throws EndOfFile if shorter
class File {
 public:
  // Not open: isOpen() is false.
  File() noexcept = default;
  // Adopts `fd`, an open file descriptor; `path` names it in error messages. Asks the
  // kernel once whether `fd` takes offsets (lseek), for the rule on pipes above.
  File(int fd, std::string path) noexcept;
  File(File&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)),
        path_(std::move(other.path_)),
        positional_(other.positional_),
        refusesQuick_(other.refusesQuick_.load(std::memory_order_relaxed)) {}
  File& operator=(File&& other) noexcept;
  ~File();

  // Opens `path` (O_CLOEXEC always); `permissions` (less the umask) for a file created.
  // Errors: as above.
  static Lazy<File> open(std::string path, FileMode mode, mode_t permissions = 0644);

  // Reads at most buffer.size() bytes at `offset`; 0 at or past the end of the file.
  Lazy<std::size_t> readAt(std::span<std::byte> buffer, std::uint64_t offset) const;
  // Writes at most buffer.size() bytes at `offset`; returns how many were written.
  Lazy<std::size_t> writeAt(std::span<const std::byte> buffer, std::uint64_t offset) const;
  // Fills `buffer` from `offset`. Errors: EndOfFile if the file ends first. Any other
  // failure after some bytes were read (cancellation, withTimeout, EIO, ExecutorShutDown...)
  // throws IncompleteTransfer: buffer[0, bytesTransferred()) holds the file's bytes from
  // `offset`, and cause() is the failure. With nothing read, the failure propagates
  // unchanged.
  Lazy<void> readExactlyAt(std::span<std::byte> buffer, std::uint64_t offset) const;
  // Writes all of `buffer` at `offset`, however many partial writes it takes. Errors: a
  // failure after some bytes were written (cancellation, ENOSPC, EFBIG, EIO,
  // ExecutorShutDown...) throws IncompleteTransfer: buffer[0, bytesTransferred()) was
  // written (from `offset`) and the rest was not; cause() is the failure. With nothing
  // written, the failure propagates unchanged.
  Lazy<void> writeAllAt(std::span<const std::byte> buffer, std::uint64_t offset) const;

  // fsync(2): data and metadata reach stable storage. syncData(): fdatasync(2), the data
  // and only the metadata needed to read it back (the size, not the times).
  Lazy<void> sync() const;
  Lazy<void> syncData() const;

  // The file's size in bytes now (fstat(2)).
  Lazy<std::uint64_t> size() const;

  // Closes the file now; errors are ignored (see sync()). Idempotent.
  // Precondition: no operation in flight.
  void close() noexcept;
  bool isOpen() const noexcept { return fd_ >= 0; }
  int nativeHandle() const noexcept { return fd_; }
  // The path given to open() (or to the adopting constructor).
  const std::string& path() const noexcept { return path_; }
  // Gives up ownership of the descriptor (the File is closed, the fd is not): the caller
  // closes it. The event loops forget what they knew of it (IoLoop::retireDescriptor).
  // Precondition: no operation in flight. noexcept.
  int release() noexcept {
    const int fd = std::exchange(fd_, -1);
    IoLoop::retireDescriptor(fd);
    return fd;
  }

 private:
  Lazy<void> syncImpl(bool dataOnly) const;

  int fd_ = -1;
  std::string path_;
  bool positional_ = true;  // false for a pipe, a FIFO or a socket (lseek: ESPIPE)
  // Bits kQuickReads/kQuickWrites (file.cc): the file refused RWF_NOWAIT for reads or
  // writes once (EOPNOTSUPP, as ext4 does for buffered writes), so that direction goes
  // straight to the blocking pool. Relaxed: a hint, set by any thread awaiting on the File.
  mutable std::atomic<std::uint8_t> refusesQuick_{0};
};

}  // namespace weft
