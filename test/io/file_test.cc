// File over both event loops (every test runs once per backend): io_uring performs the
// reads, writes and syncs in the ring; epoll sends them to the blocking pool.
#include "weft/io/file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/collect.h"
#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/thread_pool.h"
#include "weft/io/blocking.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/io_backends.h"
#include "test/support/io_support.h"
#include "test/support/one_worker.h"
#include "test/support/watchdog.h"

namespace weft {
namespace {

// A directory under TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "weft-file-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::system_error(errno, std::system_category(), "mkdtemp");
    }
    path_ = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const char* name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

std::span<const std::byte> bytes(const std::string& text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

std::span<std::byte> writable(std::string& text) {
  return std::as_writable_bytes(std::span<char>(text.data(), text.size()));
}

// Bytes that differ with their position (and with `seed`), so a misplaced chunk shows.
std::vector<std::byte> pattern(std::size_t size, std::uint64_t seed) {
  std::vector<std::byte> data(size);
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (std::byte& b : data) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = std::byte(static_cast<unsigned char>(x));
  }
  return data;
}

constexpr FileMode kNew = FileMode::kReadWrite | FileMode::kCreate | FileMode::kTruncate;

class FileTest : public ::testing::TestWithParam<IoBackendChoice> {
 protected:
  // io_uring is skipped where the kernel (or the build) does not offer it.
  void SetUp() override { WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam()); }
  ThreadPool& pool(std::size_t threads = 1) {
    if (!pool_) pool_.emplace(ThreadPoolOptions{threads, "file-test", GetParam()});
    return *pool_;
  }
  template <class F>
  auto run(F body) {
    return syncAwait(body().via(&pool()));
  }

  TempDir dir_;
  std::optional<ThreadPool> pool_;
};

TEST_P(FileTest, WritesThenReadsBackAtOffsets) {
  const std::string path = dir_.file("offsets");
  run([&]() -> Lazy<void> {
    File file = co_await File::open(path, kNew);
    EXPECT_TRUE(file.isOpen());
    EXPECT_EQ(file.path(), path);
    EXPECT_EQ(co_await file.writeAt(bytes("hello"), 0), 5u);
    EXPECT_EQ(co_await file.writeAt(bytes("world"), 100), 5u);
    EXPECT_EQ(co_await file.writeAt(bytes("HE"), 0), 2u);  // overwrites in place
    EXPECT_EQ(co_await file.size(), 105u);
    std::string all(105, '?');
    co_await file.readExactlyAt(writable(all), 0);
    EXPECT_EQ(all.substr(0, 5), "HEllo");
    EXPECT_EQ(all.substr(5, 95), std::string(95, '\0'));  // the hole reads as zeros
    EXPECT_EQ(all.substr(100), "world");
    std::string middle(3, '?');
    EXPECT_EQ(co_await file.readAt(writable(middle), 101), 3u);
    EXPECT_EQ(middle, "orl");
  });
  std::ifstream in(path, std::ios::binary);  // what the kernel has, read another way
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(contents.size(), 105u);
  EXPECT_EQ(contents.substr(100), "world");
}

// 8 MB in 64 KB chunks, written by four coroutines at once in interleaved order, read
// back in 1 MB pieces and compared.
TEST_P(FileTest, WritesAndReadsALargeFileInChunks) {
  pool(2);
  const std::string path = dir_.file("large");
  constexpr std::size_t kChunk = 64 * 1024;
  constexpr std::size_t kChunks = 128;
  const std::vector<std::byte> expected = pattern(kChunk * kChunks, 7);
  run([&]() -> Lazy<void> {
    File file = co_await File::open(path, kNew);
    auto writer = [&](std::size_t first) -> Lazy<void> {
      for (std::size_t i = first; i < kChunks; i += 4) {
        co_await file.writeAllAt(std::span(expected).subspan(i * kChunk, kChunk), i * kChunk);
      }
    };
    auto [a, b, c, d] = co_await collectAll(writer(0), writer(1), writer(2), writer(3));
    a.value();
    b.value();
    c.value();
    d.value();
    co_await file.syncData();
    EXPECT_EQ(co_await file.size(), expected.size());
    std::vector<std::byte> back(1 << 20);
    std::size_t mismatches = 0;
    for (std::size_t offset = 0; offset < expected.size(); offset += back.size()) {
      co_await file.readExactlyAt(back, offset);
      if (std::memcmp(back.data(), expected.data() + offset, back.size()) != 0) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0u);
    // One read of everything (the kernel may return it in parts: readExactlyAt loops).
    std::vector<std::byte> whole(expected.size());
    co_await file.readExactlyAt(whole, 0);
    EXPECT_TRUE(whole == expected);
  });
}

TEST_P(FileTest, ReadsAtTheEndReturnZeroAndReadExactlyThrowsEndOfFile) {
  const std::string path = dir_.file("eof");
  run([&]() -> Lazy<void> {
    File file = co_await File::open(path, kNew);
    co_await file.writeAllAt(bytes("0123456789"), 0);
    std::string buffer(8, '?');
    EXPECT_EQ(co_await file.readAt(writable(buffer), 10), 0u);
    EXPECT_EQ(co_await file.readAt(writable(buffer), 1000), 0u);
    EXPECT_EQ(co_await file.readAt(writable(buffer), 6), 4u);  // a short read at the end
    EXPECT_EQ(buffer.substr(0, 4), "6789");
    try {
      co_await file.readExactlyAt(writable(buffer), 5);
      ADD_FAILURE() << "no EndOfFile";
    } catch (const EndOfFile& e) {
      EXPECT_EQ(e.bytesRead(), 5u);
    }
    EXPECT_EQ(co_await file.readAt(std::span<std::byte>(), 0), 0u);  // an empty read
  });
}

TEST_P(FileTest, SyncsAndAnotherFileSeesTheData) {
  const std::string path = dir_.file("sync");
  run([&]() -> Lazy<void> {
    File writer = co_await File::open(path, FileMode::kWrite | FileMode::kCreate);
    co_await writer.writeAllAt(bytes("durable"), 0);
    co_await writer.sync();
    co_await writer.syncData();
    File reader = co_await File::open(path, FileMode::kRead);
    std::string back(7, '?');
    co_await reader.readExactlyAt(writable(back), 0);
    EXPECT_EQ(back, "durable");
    // A write to a read-only File fails (EBADF from the kernel) naming the path.
    try {
      co_await reader.writeAt(bytes("x"), 0);
      ADD_FAILURE() << "wrote through a read-only File";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code().value(), EBADF);
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  });
}

TEST_P(FileTest, AppendsAtTheEnd) {
  const std::string path = dir_.file("log");
  run([&]() -> Lazy<void> {
    {
      File log = co_await File::open(path, FileMode::kAppend | FileMode::kCreate);
      co_await log.writeAllAt(bytes("one,"), 0);
      co_await log.writeAllAt(bytes("two,"), 0);  // the offset is ignored
    }
    File log = co_await File::open(path, FileMode::kAppend | FileMode::kRead);
    co_await log.writeAllAt(bytes("three"), 0);
    std::string all(13, '?');
    co_await log.readExactlyAt(writable(all), 0);
    EXPECT_EQ(all, "one,two,three");
  });
}

void expectError(const std::function<void()>& f, int error, const std::string& inMessage) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), error) << e.what();
    EXPECT_NE(std::string(e.what()).find(inMessage), std::string::npos) << e.what();
  }
}

TEST_P(FileTest, OpenErrorsNameThePath) {
  const std::string missing = dir_.file("missing");
  expectError([&] { run([&] { return File::open(missing, FileMode::kRead); }); }, ENOENT, missing);
  expectError([&] { run([&] { return File::open(dir_.path(), FileMode::kWrite); }); }, EISDIR,
              dir_.path());
  const std::string existing = dir_.file("existing");
  run([&] { return File::open(existing, FileMode::kWrite | FileMode::kCreate); });
  expectError(
      [&] {
        run([&] {
          return File::open(existing, FileMode::kWrite | FileMode::kCreate | FileMode::kExclusive);
        });
      },
      EEXIST, existing);
  EXPECT_THROW(run([&] { return File::open(existing, FileMode::kRead | FileMode::kCreate); }),
               std::invalid_argument);
  EXPECT_THROW(run([&] { return File::open(existing, FileMode::kCreate); }), std::invalid_argument);
}

TEST_P(FileTest, OperationsOnAClosedFileFailWithEbadf) {
  const std::string path = dir_.file("closed");
  File file = run([&] { return File::open(path, kNew); });
  file.close();
  file.close();  // idempotent
  EXPECT_FALSE(file.isOpen());
  std::string buffer(4, '?');
  const std::string text = "data";
  expectError([&] { run([&] { return file.readAt(writable(buffer), 0); }); }, EBADF, "closed File");
  expectError([&] { run([&] { return file.writeAt(bytes(text), 0); }); }, EBADF, "closed File");
  expectError([&] { run([&] { return file.sync(); }); }, EBADF, "closed File");
  expectError([&] { run([&] { return file.size(); }); }, EBADF, "closed File");
  expectError(
      [&] { syncAwait(spawnFiber(&pool(), [&] { await(file.readAt(writable(buffer), 0)); })); },
      EBADF, "closed File");
}

TEST_P(FileTest, WorksFromAFiber) {
  const std::string path = dir_.file("fiber");
  auto fiber = spawnFiber(&pool(), [&] {
    File file = await(File::open(path, kNew));
    const std::vector<std::byte> data = pattern(300000, 3);
    await(file.writeAllAt(data, 12345));
    await(file.sync());
    std::vector<std::byte> back(data.size());
    await(file.readExactlyAt(back, 12345));
    EXPECT_TRUE(back == data);
    return await(file.size());
  });
  EXPECT_EQ(syncAwait(std::move(fiber)), 12345u + 300000u);
}

// Without an event loop (syncAwait on the test's thread) the blocking pool serves both.
TEST_P(FileTest, WorksOnAThreadWithoutAnEventLoop) {
  const std::string path = dir_.file("no-loop");
  syncAwait([&]() -> Lazy<void> {
    File file = co_await File::open(path, kNew);
    co_await file.writeAllAt(bytes("anywhere"), 0);
    std::string back(8, '?');
    co_await file.readExactlyAt(writable(back), 0);
    EXPECT_EQ(back, "anywhere");
  }());
}

TEST_P(FileTest, RefusesOffsetsAboveTheLargestFileOffset) {
  const std::string path = dir_.file("offset");
  run([&]() -> Lazy<void> {
    File file = co_await File::open(path, kNew);
    std::string buffer(4, '?');
    try {
      co_await file.readAt(writable(buffer), ~std::uint64_t{0});  // io_uring: "the position"
      ADD_FAILURE() << "read at offset 2^64 - 1";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code().value(), EINVAL) << e.what();
    }
  });
}

// A cancelled token stops each operation before it starts: nothing is read or written.
TEST_P(FileTest, HonoursACancelledToken) {
  const std::string path = dir_.file("cancelled");
  File file = run([&] { return File::open(path, kNew); });
  CancellationSource source;
  source.requestCancellation();
  const std::string data = "never";
  std::string buffer(4, '?');
  auto cancelled = [&](auto makeLazy) {
    return [&source, makeLazy] { return withCancellation(source.token(), makeLazy()); };
  };
  EXPECT_THROW(run(cancelled([&] { return file.writeAt(bytes(data), 0); })), OperationCancelled);
  EXPECT_THROW(run(cancelled([&] { return file.readAt(writable(buffer), 0); })),
               OperationCancelled);
  EXPECT_THROW(run(cancelled([&] { return file.sync(); })), OperationCancelled);
  EXPECT_THROW(run(cancelled([&] { return File::open(path, FileMode::kRead); })),
               OperationCancelled);
  EXPECT_EQ(run([&] { return file.size(); }), 0u);
}

// A read of data in the page cache needs no blocking thread: io_uring performs it in the
// ring, epoll at once with RWF_NOWAIT (docs/io.md, "Files"). Shown with the default
// blocking pool bound to one thread that is held busy: a read that went there would wait
// until the end of the test (the watchdog would fire).
TEST_P(FileTest, ReadsOfCachedDataNeedNoBlockingThread) {
  test::Watchdog watchdog(std::chrono::seconds(60), "ReadsOfCachedDataNeedNoBlockingThread");
  const std::string path = dir_.file("cached");
  {
    std::ofstream out(path, std::ios::binary);
    out << "in the page cache";
  }
  // Where the file system refuses RWF_NOWAIT or has already dropped the pages, epoll
  // rightly goes to the blocking pool: nothing to show.
  const int probe = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(probe, 0);
  char first[6];
  iovec part{first, sizeof first};
  const bool quick = ::preadv2(probe, &part, 1, 0, RWF_NOWAIT) == 6;
  ::close(probe);
  if (!quick) GTEST_SKIP() << "this file system does not read cached data with RWF_NOWAIT";

  BlockingPool& defaultPool = BlockingPool::defaultPool();
  const std::size_t bound = defaultPool.maxThreads();
  defaultPool.setMaxThreads(1);
  std::atomic<bool> started{false}, release{false};
  test::Outcome<void> held;
  // Named: the coroutine reads its captures through the closure, which must outlive it.
  auto hold = [&]() -> Lazy<void> {
    co_await blocking([&] {
      started = true;
      release.wait(false);
    });
  };
  test::startOn(pool(), hold(), held);
  test::waitUntil([&] { return started.load(); });
  const std::int64_t fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // File::open would queue
  ASSERT_GE(fd, 0);
  const File file(static_cast<int>(fd), path);
  const std::string back = run([&]() -> Lazy<std::string> {
    std::string text(17, '?');
    co_await file.readExactlyAt(writable(text), 0);
    co_return text;
  });
  EXPECT_EQ(back, "in the page cache");
  release = true;
  release.notify_all();
  held.wait();
  defaultPool.setMaxThreads(bound);
}

// A file that refuses RWF_NOWAIT (procfs: EOPNOTSUPP) is read through the blocking pool on
// epoll, and read all the same on both backends.
TEST_P(FileTest, AFileThatRefusesQuickReadsIsReadAllTheSame) {
  const int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const File file(fd, "/proc/self/stat");
  for (int round = 0; round < 2; ++round) {  // the second after the refusal was noted
    const std::string text = run([&]() -> Lazy<std::string> {
      std::string buffer(64, '\0');
      buffer.resize(co_await file.readAt(writable(buffer), 0));
      co_return buffer;
    });
    EXPECT_EQ(text.substr(0, text.find(' ')), std::to_string(::getpid())) << text;
  }
}

// A pipe (or FIFO) takes no offsets: readAt and writeAt fail with ESPIPE on both backends,
// as pread(2) does, and a write to a pipe whose reader is gone never raises SIGPIPE (on
// io_uring the kernel used to ignore the offset and write the stream). SIGPIPE is counted
// by a handler for the test's duration rather than left to kill the process.
std::atomic<int> gSigpipes{0};

TEST_P(FileTest, PipesAndFifosTakeNoOffsetsOnEitherBackendAndNeverRaiseSigpipe) {
  struct sigaction counting {};
  counting.sa_handler = [](int) { gSigpipes.fetch_add(1); };
  sigemptyset(&counting.sa_mask);
  struct sigaction previous {};
  ASSERT_EQ(::sigaction(SIGPIPE, &counting, &previous), 0);
  gSigpipes.store(0);
  auto expectEspipe = [&](const std::function<Lazy<std::size_t>()>& operation, const char* what) {
    try {
      run(operation);
      ADD_FAILURE() << what << " succeeded";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code().value(), ESPIPE) << what << ": " << e.what();
    }
  };
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ::close(fds[0]);  // no reader: a write to the pipe itself would raise SIGPIPE
  File writeEnd(fds[1], "a pipe");
  const std::byte data[4]{};
  expectEspipe([&] { return writeEnd.writeAt(data, 0); }, "writeAt 0 on a pipe");
  expectEspipe([&] { return writeEnd.writeAt(data, 4096); }, "writeAt 4096 on a pipe");

  int withData[2];
  ASSERT_EQ(::pipe2(withData, O_CLOEXEC), 0);
  ASSERT_EQ(::write(withData[1], "abc", 3), 3);
  File readEnd(withData[0], "a pipe");
  std::byte buffer[8];
  expectEspipe([&] { return readEnd.readAt(buffer, 0); }, "readAt on a pipe");
  ::close(withData[1]);
  char left[8];
  EXPECT_EQ(::read(readEnd.nativeHandle(), left, sizeof left), 3) << "the readAt took bytes";

  const std::string fifoPath = dir_.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifoPath.c_str(), 0600), 0);
  File fifo = run([&] { return File::open(fifoPath, FileMode::kReadWrite); });
  expectEspipe([&] { return fifo.writeAt(data, 0); }, "writeAt on a FIFO");
  expectEspipe([&] { return fifo.readAt(buffer, 0); }, "readAt on a FIFO");

  EXPECT_EQ(gSigpipes.load(), 0) << "weft raised SIGPIPE";
  ::sigaction(SIGPIPE, &previous, nullptr);
}

INSTANTIATE_TEST_SUITE_P(Backends, FileTest, test::kIoBackends, test::ioBackendName);


// File::open's new tests: a fixture of its own (test::IoBackendTest), both backends.
class FileOpenTest : public test::IoBackendTest {
 protected:
  TempDir dir_;
};

// open(2) takes a C string: a NUL would cut the path short ("existing\0.txt" would open
// "existing", and kCreate would create the file named by the part before the NUL).
TEST_P(FileOpenTest, RejectsAPathWithANulByte) {
  using namespace std::string_literals;
  ThreadPool pool(options(1, "file-test"));
  const std::string existing = dir_.file("existing");
  syncAwait(File::open(existing, kNew).via(&pool));
  const std::string paths[] = {existing + "\0.txt"s, dir_.file("created") + "\0"s, "\0"s};
  for (const std::string& path : paths) {
    for (FileMode mode : {FileMode::kRead, kNew}) {
      try {
        File file = syncAwait(File::open(path, mode).via(&pool));
        ADD_FAILURE() << "opened " << file.path().c_str();
      } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("NUL byte"), std::string::npos) << what;
        EXPECT_NE(what.find("\\0"), std::string::npos) << what;  // the path, NUL shown
      }
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.file("created")));
}

// An empty buffer transfers nothing: readAt returns 0 (which then does not mean the end
// of the file) and writeAt 0, at any offset, and the file is unchanged.
TEST_P(FileOpenTest, EmptyBuffersTransferNothing) {
  ThreadPool pool(options(1, "file-test"));
  const std::string path = dir_.file("empty-buffers");
  syncAwait([&]() -> Lazy<void> {
    File file = co_await File::open(path, kNew);
    co_await file.writeAllAt(bytes("0123456789"), 0);
    EXPECT_EQ(co_await file.readAt(std::span<std::byte>(), 3), 0u);  // in the middle
    EXPECT_EQ(co_await file.writeAt(std::span<const std::byte>(), 20), 0u);
    EXPECT_EQ(co_await file.size(), 10u);
    std::string rest(7, '?');
    EXPECT_EQ(co_await file.readAt(writable(rest), 3), 7u);
    EXPECT_EQ(rest, "3456789");
  }().via(&pool));
}

INSTANTIATE_TEST_SUITE_P(Backends, FileOpenTest, test::kIoBackends, test::ioBackendName);

}  // namespace
}  // namespace weft
