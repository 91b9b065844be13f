#include "weft/io/tls_stream.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <atomic>
#include <coroutine>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/coro/mutex.h"
#include "weft/executors/executor.h"
#include "weft/executors/io_loop.h"
#include "weft/executors/lent_buffer.h"
#include "weft/io/io_awaiter.h"
#include "weft/io/detail/socket_ops.h"
#include "weft/io/detail/stream_transfers.h"
#include "weft/io/detail/tls_shared.h"
#include "weft/io/incomplete_transfer.h"

namespace weft {

namespace {

// One write() encrypts at most this much: its records are queued whole before they are
// sent, so this bounds the ciphertext a connection holds.
constexpr std::size_t kMaxWrite = 64 * 1024;
// What a record adds to its plaintext, at most (TLS 1.2 AES-GCM: header 5, explicit nonce
// 8, tag 16; TLS 1.3: 5, content type 1, tag 16), with room to spare.
constexpr std::size_t kRecordOverhead = 64;
// A send buffer grown beyond this by a large write is freed once sent.
constexpr std::size_t kKeptSendCapacity = 2 * kMaxWrite;
// Send buffers smaller than this leave a connection once everything queued was sent, so
// that a connection between requests holds none (a TLS 1.3 handshake leaves 1-2 KiB, a
// small response less): 0.75 KiB per idle HTTPS connection, measured. Larger ones (a
// stream of 64 KiB writes) stay, as freeing a chunk of 64 KiB or more can make glibc trim
// its heap and the next write fault the pages in again.
constexpr std::size_t kFreedSendCapacity = 60 * 1024;

// Ciphertext to send: bytes and the room for more. A std::string would do, but these
// move between the connection, its sender and the thread's spare (below) on every write,
// and three words swap in a few instructions where a std::string's swap takes dozens.
class SendBuffer {
 public:
  const char* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return capacity_; }
  bool empty() const noexcept { return size_ == 0; }
  void clear() noexcept { size_ = 0; }
  // Frees the buffer (the bytes too).
  void release() noexcept {
    data_.reset();
    size_ = 0;
    capacity_ = 0;
  }
  void swap(SendBuffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(capacity_, other.capacity_);
  }
  // Room for `n` bytes in all. Errors: std::bad_alloc (nothing changed).
  void reserve(std::size_t n) {
    if (n <= capacity_) return;
    std::unique_ptr<char[]> bigger(new char[n]);
    if (size_ != 0) std::memcpy(bigger.get(), data_.get(), size_);
    data_ = std::move(bigger);
    capacity_ = n;
  }
  // Errors: std::bad_alloc (nothing appended).
  void append(const char* bytes, std::size_t n) {
    if (n > capacity_ - size_) reserve(std::max(size_ + n, 2 * capacity_));
    std::memcpy(data_.get() + size_, bytes, n);
    size_ += n;
  }

 private:
  std::unique_ptr<char[]> data_;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

// The calling thread's spare send buffer (empty, with room): a connection whose sends are
// done leaves its buffer here (the larger one is kept, the other freed), and the next
// write on this thread takes it, so that a request/response server neither keeps a
// buffer per idle connection nor allocates one per response (a malloc and a free: 224
// instructions per response, measured with callgrind, against a few for the swaps).
// Not inlined, and only called from plain functions: a compiler may keep the address of a
// thread_local across a suspension after which a coroutine runs on another thread (see
// coro/detail/frame_allocator.h).
[[gnu::noinline]] SendBuffer& spareSendBuffer() noexcept {
  thread_local SendBuffer spare;
  return spare;
}

// `buffer` (empty) leaves its connection: to the thread's spare if it is larger than that,
// else freed. Buffers of kFreedSendCapacity or more stay.
void releaseSendBuffer(SendBuffer& buffer) noexcept {
  const std::size_t capacity = buffer.capacity();
  if (capacity == 0 || capacity >= kFreedSendCapacity) return;
  SendBuffer& spare = spareSendBuffer();
  if (capacity > spare.capacity()) spare.swap(buffer);
  buffer.release();  // the smaller one, if any
}

// Gives `output` (empty, without a buffer) the thread's spare, if there is one.
void takeSpareSendBuffer(SendBuffer& output) noexcept {
  if (output.capacity() == 0) output.swap(spareSendBuffer());
}

}  // namespace

// The connection's state. OpenSSL reads ciphertext from `input` and writes it to
// `output` through a BIO of ours (bio* below), always under `mutex`, which no one holds
// across an await; the awaits (receive into `input`, send `output`) happen between
// OpenSSL calls. Every connection keeps one (256 bytes): what only some need is behind a
// pointer, and the flags are together.
struct TlsStream::State {
  TcpStream tcp;
  TlsContext context;
  SSL* ssl = nullptr;
  // A client's session-cache key (SSL ex_data points to its characters); servers: none.
  std::unique_ptr<std::string> sessionKey;

  std::mutex mutex;          // OpenSSL calls, input, inputEnded, output, queued, failure
  LentBuffer input;          // ciphertext received, not yet taken by OpenSSL
  SendBuffer output;         // ciphertext OpenSSL wrote, not yet taken to be sent
  std::uint64_t queued = 0;  // bytes ever appended to output
  std::unique_ptr<std::string> failure;  // why the stream is unusable (none while usable)

  Mutex sendMutex;                     // one sender at a time, in the order of `output`
  SendBuffer sending;                  // the bytes being sent (under sendMutex)
  std::atomic<std::uint64_t> sent{0};  // bytes of output sent (written under sendMutex)

  // A failure OpenSSL reported after a receive() had decrypted some bytes: that receive
  // returned them, the next read or receive throws this (the reader's only).
  std::exception_ptr readFailure;

  bool inputEnded = false;  // the TCP stream ended (under mutex)
  std::atomic<bool> unusable{false};
  bool sendCut = false;  // a send stopped part-way: send nothing more (under sendMutex)
  std::atomic<bool> reading{false};
  std::atomic<bool> writing{false};
  bool shutDown = false;  // shutdown() sent close_notify (under the writer's turn)

  State(TcpStream stream, TlsContext ctx) : tcp(std::move(stream)), context(std::move(ctx)) {}
  ~State() {
    if (ssl == nullptr) return;
    // OpenSSL forgets the session (no resumption) of a connection freed without
    // close_notify, an old rule (RFC 2246) that TLS 1.3 dropped. weft keeps it unless
    // the connection failed: a stream closed while idle is not a bad session.
    if (!unusable.load(std::memory_order_relaxed) && SSL_is_init_finished(ssl)) {
      SSL_set_shutdown(ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    }
    SSL_free(ssl);  // frees our BIO too
  }

  void markUnusable(std::string reason) {
    std::lock_guard lock(mutex);
    unusable.store(true, std::memory_order_release);
    if (failure) return;
    try {
      failure = std::make_unique<std::string>(std::move(reason));
    } catch (const std::bad_alloc&) {  // unusable all the same; the reason is lost
    }
  }
};

namespace {

using State = TlsStream::State;

// ---- the BIO between OpenSSL and State ------------------------------------------------

int bioWrite(BIO* bio, const char* data, std::size_t length, std::size_t* written) {
  auto* s = static_cast<State*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  try {
    s->output.append(data, length);
  } catch (const std::bad_alloc&) {
    return 0;  // OpenSSL reports a write failure
  }
  s->queued += length;
  *written = length;
  return 1;
}

int bioRead(BIO* bio, char* data, std::size_t length, std::size_t* read) {
  auto* s = static_cast<State*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  *read = 0;
  if (s->input.empty()) {
    // Nothing yet: "try again" (SSL_ERROR_WANT_READ) unless the stream ended (EOF).
    if (!s->inputEnded) BIO_set_retry_read(bio);
    return 0;
  }
  const std::size_t n = std::min(length, s->input.size());
  std::memcpy(data, s->input.data(), n);
  s->input.consume(n);
  if (s->input.empty()) s->input.reset();  // give the buffer back: an idle stream holds none
  *read = n;
  return 1;
}

long bioControl(BIO* bio, int command, long, void*) {
  auto* s = static_cast<State*>(BIO_get_data(bio));
  switch (command) {
    case BIO_CTRL_FLUSH:
      return 1;  // sent by the awaits after each call
    case BIO_CTRL_PENDING:
      return static_cast<long>(s->input.size());
    case BIO_CTRL_WPENDING:
      return static_cast<long>(s->output.size());
    case BIO_CTRL_EOF:
      return s->inputEnded && s->input.empty() ? 1 : 0;
    default:
      return 0;
  }
}

int bioCreate(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

int bioDestroy(BIO*) { return 1; }

BIO_METHOD* bioMethod() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "weft TlsStream");
    if (m == nullptr || BIO_meth_set_write_ex(m, bioWrite) != 1 ||
        BIO_meth_set_read_ex(m, bioRead) != 1 || BIO_meth_set_ctrl(m, bioControl) != 1 ||
        BIO_meth_set_create(m, bioCreate) != 1 || BIO_meth_set_destroy(m, bioDestroy) != 1) {
      throw std::bad_alloc();
    }
    return m;
  }();
  return method;
}

// ---- one OpenSSL call and what came of it ---------------------------------------------

struct Outcome {
  int error = SSL_ERROR_NONE;  // SSL_get_error's answer
  unsigned long code = 0;      // OpenSSL's error (SSL_ERROR_SSL, SSL_ERROR_SYSCALL)
  long verify = X509_V_OK;     // the peer's verification result
  bool inputEnded = false;
  bool inputLeft = false;    // OpenSSL stopped with ciphertext still to take
  // More plaintext may come without receiving: ciphertext left in `input` or inside
  // OpenSSL (SSL_has_pending), or the peer's close_notify came (SSL_read says so again).
  bool decryptable = false;
  bool queuedByCall = false;  // the call queued ciphertext
  std::uint64_t queued = 0;  // send everything up to here before going on
};

template <class Call>
Outcome callOpenSsl(State& s, Call call) {
  std::lock_guard lock(s.mutex);
  ERR_clear_error();
  const std::uint64_t before = s.queued;
  const int result = call(s.ssl);
  Outcome o;
  o.error = result > 0 ? SSL_ERROR_NONE : SSL_get_error(s.ssl, result);
  if (o.error == SSL_ERROR_SSL || o.error == SSL_ERROR_SYSCALL) {
    o.code = ERR_peek_last_error();
    o.verify = SSL_get_verify_result(s.ssl);
    ERR_clear_error();
  }
  o.inputEnded = s.inputEnded;
  o.inputLeft = !s.input.empty();
  o.decryptable = o.inputLeft || SSL_has_pending(s.ssl) == 1 ||
                  (SSL_get_shutdown(s.ssl) & SSL_RECEIVED_SHUTDOWN) != 0;
  o.queued = s.queued;
  o.queuedByCall = s.queued != before;
  return o;
}

// The TlsError for a failed call; marks the stream unusable (OpenSSL's state is then
// fatal anyway).
TlsError failure(State& s, const char* operation, const Outcome& o) {
  const std::string prefix = std::string("weft: TLS ") + operation + ": ";
  const int reason = ERR_GET_REASON(o.code);
  TlsError::Kind kind = TlsError::Kind::kProtocol;
  std::string text;
  std::string verifyText;
  if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED ||
      reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) {
    kind = TlsError::Kind::kVerification;
    verifyText = o.verify != X509_V_OK ? X509_verify_cert_error_string(o.verify)
                                       : "the peer sent no certificate";
    text = "the peer's certificate did not verify: " + verifyText;
  } else if (o.inputEnded && (o.error == SSL_ERROR_SYSCALL || reason == SSL_R_UNEXPECTED_EOF_WHILE_READING)) {
    kind = TlsError::Kind::kTruncated;
    text = "the peer ended the connection without close_notify (truncated)";
  } else {
    const char* r = o.code != 0 ? ERR_reason_error_string(o.code) : nullptr;
    text = r != nullptr ? r : "TLS failure (SSL_get_error " + std::to_string(o.error) + ")";
  }
  s.markUnusable(prefix + text);
  return TlsError(kind, prefix + text, kind == TlsError::Kind::kVerification ? o.verify : 0,
                  std::move(verifyText));
}

// Sends everything OpenSSL has queued, holding `turn` (the send lock), then releases it
// and looks again: bytes queued meanwhile by a reader that found the lock taken (see
// sendIfIdle) are sent by the holder that releases it, so none is left behind.
// A failure or cancellation part-way marks the stream unusable (a record may have been
// cut) and propagates; a transfer's IncompleteTransfer counts ciphertext, so its cause is
// thrown instead.
Lazy<void> sendAll(State& s, ScopedLock<Mutex> turn) {
  try {
    for (;;) {
      // After a send stopped part-way the peer has a cut record: whatever follows would
      // read as garbage (or resend bytes it has), so nothing more is sent.
      if (s.sendCut) co_return;
      for (;;) {
        {
          std::lock_guard lock(s.mutex);
          s.sending.swap(s.output);  // output gets the spare (empty) buffer back
        }
        if (s.sending.empty()) break;
        co_await s.tcp.writeAll(std::span<const std::byte>(
            reinterpret_cast<const std::byte*>(s.sending.data()), s.sending.size()));
        s.sent.fetch_add(s.sending.size(), std::memory_order_release);
        s.sending.clear();
        if (s.sending.capacity() > kKeptSendCapacity) s.sending.release();
      }
      releaseSendBuffer(s.sending);
      turn.unlock();
      {
        std::lock_guard lock(s.mutex);
        if (s.output.empty()) {
          releaseSendBuffer(s.output);
          co_return;
        }
      }
      turn = s.sendMutex.tryScopedLock();
      if (!turn) co_return;  // its holder sends them
    }
  } catch (const IncompleteTransfer& e) {
    s.sendCut = true;  // still the send turn's holder: only writeAll throws here
    s.markUnusable("a send was interrupted part-way");
    std::rethrow_exception(e.cause());
  } catch (...) {
    s.sendCut = true;
    s.markUnusable("a send was interrupted");
    throw;
  }
}

// Sends the ciphertext queued up to `target` (and whatever else is queued), in order,
// whoever queued it; returns once it was handed to the kernel (writes, handshakes,
// shutdown).
Lazy<void> sendQueued(State& s, std::uint64_t target) {
  if (s.sent.load(std::memory_order_acquire) >= target) co_return;
  ScopedLock<Mutex> turn;
  try {
    turn = co_await s.sendMutex.scopedLock();
  } catch (...) {
    s.markUnusable("a send was interrupted");
    throw;
  }
  co_await sendAll(s, std::move(turn));
}

// Sends what a read queued (an alert; OpenSSL sends a key update's answer with the next
// write) if no send is in progress; else the sender in progress sends it when it
// finishes. A reader never waits for a writer's records to drain: a writer may wait for
// the peer to read, and the peer's writer for us to read. A failure to send marks the
// stream unusable (the next operation reports it) and is not thrown: the read's data is
// returned.
Lazy<void> sendIfIdle(State& s) {
  ScopedLock<Mutex> turn = s.sendMutex.tryScopedLock();
  if (!turn) co_return;
  try {
    co_await sendAll(s, std::move(turn));
  } catch (...) {
  }
}

bool pending(const State& s, const Outcome& o) {
  return o.queued > s.sent.load(std::memory_order_acquire);
}

// True when a read may get plaintext (or the end, or an error) without receiving more:
// see Outcome::decryptable; also once the TCP stream ended (OpenSSL then reports the end).
// `unsent`: records are queued that no send has taken yet.
bool decryptableNow(State& s, bool& unsent) {
  std::lock_guard lock(s.mutex);
  unsent = !s.output.empty();
  return s.inputEnded || !s.input.empty() || SSL_has_pending(s.ssl) == 1 ||
         (SSL_get_shutdown(s.ssl) & SSL_RECEIVED_SHUTDOWN) != 0;
}

// A whole buffer of the calling thread's event loop, to decrypt into (receive()).
// Errors: std::logic_error on a thread without a loop; std::system_error ENOBUFS when the
// loop lends none.
LentBuffer lendPlaintextBuffer() {
  LentBuffer buffer = detail::requireIoLoop("receive from a TlsStream").lendBuffer();
  if (buffer.empty()) {
    throw std::system_error(ENOBUFS, std::system_category(),
                            "weft: receive from a TlsStream: the event loop lent no buffer to "
                            "decrypt into");
  }
  return buffer;
}

// TlsError kUnusable if an earlier failure made the stream unusable.
void throwIfUnusable(State& s, const char* operation) {
  if (s.unusable.load(std::memory_order_acquire)) {
    std::lock_guard lock(s.mutex);
    throw TlsError(TlsError::Kind::kUnusable, std::string("weft: TLS ") + operation +
                                                  ": the stream is unusable: " +
                                                  (s.failure ? *s.failure : "(no memory for why)"));
  }
}

// The reader's checks once it has its turn: a failure a receive() met after the bytes it
// returned is thrown now (once), then the stream's unusability.
void throwIfUnreadable(State& s, const char* operation) {
  if (s.readFailure) std::rethrow_exception(std::exchange(s.readFailure, nullptr));
  throwIfUnusable(s, operation);
}

// Takes what receive() returned: ciphertext, or the end of the TCP stream.
void takeInput(State& s, LentBuffer data) {
  std::lock_guard lock(s.mutex);
  if (data.empty()) {
    s.inputEnded = true;
  } else {
    s.input = std::move(data);
  }
}

// `co_await ReceiveCiphertext{s}`: the TcpStream's receive(), its bytes (or the end of
// the stream) taken into `input`. The TcpStream's own awaiter, reached through an
// awaitable of one pointer and with nothing beside it, because every byte here is kept
// in the frame of each read waiting for data, which is what an idle connection costs:
// co_await keeps its awaitable in the frame with the awaiter (a ReceiveLentAwaitable is
// 80 bytes), the LentBuffer it returns would take 40 more, and a State* of the awaiter's
// own 8 more, which is what puts receive()'s frame past the frame allocator's class of
// 632 bytes into that of 760. So the State* rides in the operation's `buffer`, which
// kReceiveLent leaves unused (IoOpcode's contract, executors/io_loop.h: "`buffer` and
// `length` are not used").
struct ReceiveCiphertext {
  State* s;

  class Awaiter {
   public:
    Awaiter(State& s, Executor* executor, const CancellationToken& token)
        : receive_(s.tcp.receive().coAwait(executor, token)) {
      receive_.operation().buffer = &s;
    }
    bool await_ready() { return receive_.await_ready(); }
    bool await_suspend(std::coroutine_handle<> waiter) { return receive_.await_suspend(waiter); }
    void await_resume() {
      State& s = *static_cast<State*>(receive_.operation().buffer);
      takeInput(s, receive_.await_resume());
    }

   private:
    detail::ReceiveLentAwaitable::Awaiter receive_;
  };

  Awaiter coAwait(Executor* executor, const CancellationToken& token) const {
    return Awaiter(*s, executor, token);
  }
};

// Runs SSL_do_handshake to its end.
Lazy<void> handshake(State& s, const char* operation) {
  for (;;) {
    const Outcome o = callOpenSsl(s, [](SSL* ssl) { return SSL_do_handshake(ssl); });
    if (o.error == SSL_ERROR_NONE || o.error == SSL_ERROR_WANT_READ) {
      if (pending(s, o)) co_await sendQueued(s, o.queued);
    } else {
      TlsError error = failure(s, operation, o);
      if (o.queuedByCall) co_await sendIfIdle(s);
      throw error;
    }
    if (o.error == SSL_ERROR_NONE) co_return;
    if (!o.inputLeft) co_await ReceiveCiphertext{&s};
  }
}

// What one attempt to read plaintext came to (readStep, decryptStep). The work is done
// outside the coroutines, so that their frames, which a connection waiting for data
// keeps, hold only this (8 bytes) and their awaits.
struct ReadStep {
  std::uint32_t bytes = 0;  // plaintext read (one record, or one lent buffer)
  bool done = false;        // return: the bytes (> 0), or the clean end (0)
  bool queued = false;      // records to send, queued by a read (an alert) or left unsent
  bool needInput = false;   // receive ciphertext first (else: call again at once)
  bool failed = false;      // throw State::readFailure (after sending what was queued)
};

// One SSL_read_ex into `buffer` (non-empty).
ReadStep readStep(State& s, std::span<std::byte> buffer) {
  std::size_t n = 0;
  const Outcome o =
      callOpenSsl(s, [&](SSL* ssl) { return SSL_read_ex(ssl, buffer.data(), buffer.size(), &n); });
  ReadStep r;
  r.queued = o.queuedByCall;
  switch (o.error) {
    case SSL_ERROR_NONE:
    case SSL_ERROR_ZERO_RETURN:  // the peer's close_notify: n == 0
      r.bytes = static_cast<std::uint32_t>(n);
      r.done = true;
      break;
    case SSL_ERROR_WANT_READ:
      // OpenSSL may stop after a record that carried no data (a session ticket, a key
      // update) with more to take: then it is called again at once.
      r.needInput = !o.inputLeft;
      break;
    default:
      s.readFailure = std::make_exception_ptr(failure(s, "read", o));
      r.failed = true;
  }
  return r;
}

// receive()'s step: decrypts into `plain` (empty on entry) a buffer of the calling
// thread's loop, taken only once OpenSSL may have plaintext for it and given back unless
// it got some, so that a receive waiting for the peer holds none. Record after record
// while OpenSSL has them whole (SSL_read_ex returns one at a time) and the buffer has
// room; it stops at a record that is not all here. A failure met after the bytes an
// earlier receive returned comes first (failed), and records a read queued that no send
// took yet are reported (queued) whenever no bytes are returned, so that they go out
// before the receive waits or throws.
ReadStep decryptStep(State& s, LentBuffer& plain) {
  ReadStep r;
  const bool decryptable = decryptableNow(s, r.queued);
  if (s.readFailure) {
    r.failed = true;
    return r;
  }
  throwIfUnusable(s, "receive");
  if (!decryptable) {
    r.needInput = true;
    return r;
  }
  plain = lendPlaintextBuffer();
  std::size_t filled = 0;
  Outcome o;
  for (;;) {
    std::size_t n = 0;
    o = callOpenSsl(s, [&](SSL* ssl) {
      return SSL_read_ex(ssl, plain.data() + filled, plain.size() - filled, &n);
    });
    filled += n;
    r.queued = r.queued || o.queuedByCall;
    if (o.error != SSL_ERROR_NONE || filled == plain.size() || !o.decryptable) break;
  }
  switch (o.error) {
    case SSL_ERROR_NONE:
    case SSL_ERROR_ZERO_RETURN:  // the peer's close_notify
    case SSL_ERROR_WANT_READ:
      break;
    default:
      if (filled == 0) {
        plain.reset();
        s.readFailure = std::make_exception_ptr(failure(s, "receive", o));
        r.failed = true;
        return r;
      }
      // The bytes before the failure are real: they are returned, the failure is the
      // next read's.
      s.readFailure = std::make_exception_ptr(failure(s, "receive", o));
  }
  if (filled > 0) {
    plain.truncate(filled);
    r.bytes = static_cast<std::uint32_t>(filled);
    r.done = true;
    return r;
  }
  plain.reset();
  r.done = o.error == SSL_ERROR_ZERO_RETURN;
  r.needInput = !r.done && !o.inputLeft;
  return r;
}

// One operation of a kind at a time (one reader, one writer).
class Turn {
 public:
  Turn(std::atomic<bool>& flag, const char* what) : flag_(flag) {
    if (flag_.exchange(true, std::memory_order_acquire)) {
      throw std::logic_error(std::string("weft: TlsStream: two ") + what +
                             " at the same time (one read and one write may overlap)");
    }
  }
  Turn(const Turn&) = delete;
  Turn& operator=(const Turn&) = delete;
  ~Turn() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool>& flag_;
};

bool isIpAddress(const std::string& name) {
  unsigned char address[16];
  return inet_pton(AF_INET, name.c_str(), address) == 1 ||
         inet_pton(AF_INET6, name.c_str(), address) == 1;
}

std::unique_ptr<State> newState(TcpStream stream, TlsContext context, bool server) {
  auto state = std::make_unique<State>(std::move(stream), std::move(context));
  state->ssl = SSL_new(state->context.nativeHandle());
  if (state->ssl == nullptr) throw std::bad_alloc();
  BIO* bio = BIO_new(bioMethod());
  if (bio == nullptr) throw std::bad_alloc();
  BIO_set_data(bio, state.get());
  SSL_set_bio(state->ssl, bio, bio);  // one reference, owned by the SSL
  if (server) {
    SSL_set_accept_state(state->ssl);
  } else {
    SSL_set_connect_state(state->ssl);
  }
  return state;
}

}  // namespace

TlsStream::TlsStream() noexcept = default;
TlsStream::TlsStream(std::unique_ptr<State> state) noexcept : state_(std::move(state)) {}
TlsStream::TlsStream(TlsStream&& other) noexcept = default;
TlsStream& TlsStream::operator=(TlsStream&& other) noexcept = default;
TlsStream::~TlsStream() = default;

Lazy<TlsStream> TlsStream::connect(TcpStream stream, TlsContext context, std::string serverName) {
  if (!stream.isOpen()) throw std::logic_error("weft: TlsStream::connect on a closed TcpStream");
  if (context.isServer()) {
    throw std::invalid_argument("weft: TlsStream::connect with a server TlsContext");
  }
  const TlsContext::Shared& shared = *context.shared_;
  if (shared.verifyPeer && serverName.empty()) {
    throw std::invalid_argument(
        "weft: TlsStream::connect: an empty server name cannot be verified (give the name "
        "or address the certificate is for)");
  }
  std::unique_ptr<State> state = newState(std::move(stream), std::move(context), false);
  SSL* ssl = state->ssl;
  const bool address = isIpAddress(serverName);
  if (shared.verifyPeer) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    const int ok = address ? X509_VERIFY_PARAM_set1_ip_asc(param, serverName.c_str())
                           : (X509_VERIFY_PARAM_set_hostflags(
                                  param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS),
                              SSL_set1_host(ssl, serverName.c_str()));
    if (ok != 1) throw std::invalid_argument("weft: TlsStream::connect: bad server name");
  }
  if (!address && !serverName.empty() &&
      SSL_set_tlsext_host_name(ssl, serverName.c_str()) != 1) {
    throw std::invalid_argument("weft: TlsStream::connect: the server name is not a valid SNI");
  }
  if (shared.resumeSessions) {
    state->sessionKey =
        std::make_unique<std::string>(serverName + "|" + state->tcp.peerAddress().toString());
    SSL_set_ex_data(ssl, tlsSessionKeyIndex(), state->sessionKey->data());
    if (SSL_SESSION* session = state->context.shared_->takeSession(*state->sessionKey)) {
      SSL_set_session(ssl, session);  // takes a reference of its own
      SSL_SESSION_free(session);
    }
  }
  co_await handshake(*state, "connect");
  co_return TlsStream(std::move(state));
}

Lazy<TlsStream> TlsStream::accept(TcpStream stream, TlsContext context) {
  if (!stream.isOpen()) throw std::logic_error("weft: TlsStream::accept on a closed TcpStream");
  if (!context.isServer()) {
    throw std::invalid_argument("weft: TlsStream::accept with a client TlsContext");
  }
  std::unique_ptr<State> state = newState(std::move(stream), std::move(context), true);
  co_await handshake(*state, "accept");
  co_return TlsStream(std::move(state));
}

TlsStream::State& TlsStream::usable(const char* operation) const {
  if (!state_) {
    throw std::logic_error(std::string("weft: TlsStream::") + operation + " on an empty stream");
  }
  throwIfUnusable(*state_, operation);
  return *state_;
}

Lazy<std::size_t> TlsStream::read(std::span<std::byte> buffer) {
  if (!state_) throw std::logic_error("weft: TlsStream::read on an empty stream");
  State& s = *state_;
  Turn turn(s.reading, "reads");
  throwIfUnreadable(s, "read");
  if (buffer.empty()) co_return 0;
  for (;;) {
    const ReadStep r = readStep(s, buffer);
    if (r.queued) co_await sendIfIdle(s);
    if (r.failed) std::rethrow_exception(std::exchange(s.readFailure, nullptr));
    if (r.done) co_return r.bytes;
    // Cancelled here, the stream stays usable: OpenSSL keeps a partial record for the
    // next read, and receive() loses nothing.
    if (r.needInput) co_await ReceiveCiphertext{&s};
  }
}

Lazy<LentBuffer> TlsStream::receive() {
  // Every byte of this frame is kept by a connection waiting for data (624 bytes with
  // gcc 12, in the frame allocator's class of 632; past 632 it would take 760): the
  // plaintext buffer lives in a scope without an await, so not in the frame, which is why
  // records a read queued are sent before the receive waits rather than before it returns
  // bytes.
  if (!state_) throw std::logic_error("weft: TlsStream::receive on an empty stream");
  Turn turn(state_->reading, "reads");
  for (;;) {
    ReadStep r;
    {
      LentBuffer plain;
      r = decryptStep(*state_, plain);
      if (r.done) co_return std::move(plain);
    }
    if (r.queued) co_await sendIfIdle(*state_);
    if (r.failed) std::rethrow_exception(std::exchange(state_->readFailure, nullptr));
    // Cancelled here, the stream stays usable, as for read().
    if (r.needInput) co_await ReceiveCiphertext{state_.get()};
  }
}

Lazy<void> TlsStream::readExactly(std::span<std::byte> buffer) {
  return detail::readExactlyWith(buffer, "readExactly from a TlsStream",
                                 [this](std::span<std::byte> rest) { return read(rest); });
}

Lazy<std::size_t> TlsStream::write(std::span<const std::byte> buffer) {
  State& s = usable("write");
  Turn turn(s.writing, "writes");
  if (buffer.empty()) co_return 0;
  if (s.shutDown) {
    throw TlsError(TlsError::Kind::kProtocol,
                   "weft: TLS write: the stream was shut down (shutdown() sent close_notify)");
  }
  const std::size_t size = std::min(buffer.size(), kMaxWrite);
  std::size_t written = 0;
  const Outcome o = callOpenSsl(s, [&](SSL* ssl) {
    // Room for the records at once (a freed buffer would otherwise grow record by record).
    takeSpareSendBuffer(s.output);
    s.output.reserve(s.output.size() + size + (size / 16384 + 1) * kRecordOverhead);
    return SSL_write_ex(ssl, buffer.data(), size, &written);
  });
  if (o.error != SSL_ERROR_NONE) {
    // Our BIO takes every byte, and renegotiation is refused: a write never has to wait
    // for the peer, so anything but success is a failure.
    TlsError error = failure(s, "write", o);
    if (o.queuedByCall) co_await sendIfIdle(s);
    throw error;
  }
  co_await sendQueued(s, o.queued);
  co_return written;
}

Lazy<void> TlsStream::writeAll(std::span<const std::byte> buffer) {
  return detail::writeAllWith(buffer, "writeAll to a TlsStream",
                              [this](std::span<const std::byte> rest) { return write(rest); });
}

Lazy<void> TlsStream::shutdown() {
  State& s = usable("shutdown");
  Turn turn(s.writing, "writes");
  if (s.shutDown) co_return;
  const Outcome o = callOpenSsl(s, [](SSL* ssl) {
    const int r = SSL_shutdown(ssl);
    return r >= 0 ? 1 : r;  // 0: close_notify sent, the peer's not read yet: fine
  });
  if (o.error != SSL_ERROR_NONE) throw failure(s, "shutdown", o);
  co_await sendQueued(s, o.queued);
  s.shutDown = true;
  try {
    s.tcp.shutdownWrite();
  } catch (const std::system_error& e) {
    // The peer is gone (it reset the connection after our close_notify): nothing is
    // left to end.
    if (e.code() != std::errc::not_connected) throw;
  }
}

void TlsStream::close() noexcept {
  if (state_) state_->tcp.close();
}

bool TlsStream::isOpen() const noexcept { return state_ && state_->tcp.isOpen(); }

namespace {
const TlsStream::State& established(const std::unique_ptr<TlsStream::State>& state,
                                    const char* what) {
  if (!state) throw std::logic_error(std::string("weft: TlsStream::") + what + " on an empty stream");
  return *state;
}
}  // namespace

std::string_view TlsStream::protocolVersion() const {
  return SSL_get_version(established(state_, "protocolVersion").ssl);
}

std::string_view TlsStream::alpnProtocol() const {
  const unsigned char* data = nullptr;
  unsigned int length = 0;
  SSL_get0_alpn_selected(established(state_, "alpnProtocol").ssl, &data, &length);
  return {reinterpret_cast<const char*>(data), data != nullptr ? length : 0};
}

std::string TlsStream::peerSubject() const {
  X509* certificate = SSL_get0_peer_certificate(established(state_, "peerSubject").ssl);
  if (certificate == nullptr) return {};
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) throw std::bad_alloc();
  X509_NAME_print_ex(bio, X509_get_subject_name(certificate), 0, XN_FLAG_RFC2253);
  char* text = nullptr;
  const long length = BIO_get_mem_data(bio, &text);
  std::string subject(text != nullptr ? text : "", length > 0 ? static_cast<std::size_t>(length) : 0);
  BIO_free(bio);
  return subject;
}

bool TlsStream::sessionReused() const {
  return SSL_session_reused(established(state_, "sessionReused").ssl) == 1;
}

std::string_view TlsStream::serverName() const {
  const char* name =
      SSL_get_servername(established(state_, "serverName").ssl, TLSEXT_NAMETYPE_host_name);
  return name != nullptr ? name : "";
}

TcpStream& TlsStream::transport() {
  if (!state_) throw std::logic_error("weft: TlsStream::transport on an empty stream");
  return state_->tcp;
}

ssl_st* TlsStream::nativeHandle() const noexcept { return state_ ? state_->ssl : nullptr; }

}  // namespace weft
