#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "weft/coro/lazy.h"
#include "weft/executors/lent_buffer.h"
#include "weft/io/tcp_stream.h"
#include "weft/io/tls_context.h"
#include "weft/io/tls_error.h"

struct ssl_st;  // OpenSSL's SSL (<openssl/ssl.h>); weft's headers do not include it

namespace weft {

// TlsStream: TLS over a connected TcpStream (TCP or a Unix domain stream), on OpenSSL 3
// (library target weft::tls). The same verbs as TcpStream: receive (decrypted bytes in a
// buffer the event loop lends), read, readExactly, write, writeAll, and shutdown() for a
// clean end.
//
// Every wait is an await on the event loop: OpenSSL reads and writes records through
// weft's own buffers (received with the TcpStream's receive(), sent with its writeAll),
// never the socket, so nothing blocks and no thread is held per connection. While a
// connection waits for data it holds no receive buffer (weft's lent buffers, OpenSSL's
// SSL_MODE_RELEASE_BUFFERS), and with receive() no plaintext buffer either.
//
// Semantics:
//  - connect() and accept() run the handshake; the stream they return is established
//    (and, unless the context says otherwise, the peer verified).
//  - receive() and read() return the decrypted bytes that are there (at least 1), or
//    none (an empty LentBuffer, 0) once the peer sent close_notify (a clean end). The
//    TCP stream ending without close_notify throws TlsError kTruncated: the bytes read
//    until then are all real, but the peer did not say that it was done.
//  - write() encrypts and sends up to 64 KiB of the buffer and returns how much (all of
//    a smaller buffer); writeAll() loops over write().
//  - shutdown() sends close_notify and ends the TCP stream's writing side; reading still
//    works until the peer's close_notify. Destroying or close()-ing the stream without
//    shutdown() closes the socket without it: the peer reads a truncated stream.
//  - Time limits: the TcpStream's read and write time limits (set them on it before
//    connect/accept or through transport()) apply to every receive and send, the
//    handshake's included; withTimeout and cancellation work on every operation.
//  - After a cancelled or failed operation (cancellation, withTimeout, a time limit, an
//    I/O or TLS error), the stream is:
//      usable after a read or receive that was stopped while it waited for data
//      (nothing was consumed: the next one continues the stream);
//      unusable after a handshake (connect/accept return no stream), a write, a
//      writeAll or a shutdown that was stopped, and after any TLS error (TlsError): its
//      records may have been cut in the middle. Every later operation throws TlsError
//      kUnusable; close() or destroy it.
//  - One read (read, readExactly or receive) and one write may be in progress at the
//    same time (from any threads); two reads or two writes at once throw
//    std::logic_error.
//  - Renegotiation is refused (a TLS 1.2 peer asking for it gets an alert; the read
//    throws TlsError kProtocol). TLS 1.3 key updates and session tickets are handled.
//
// Errors: TlsError (kVerification, kTruncated, kProtocol, kUnusable); the TcpStream's own
// (std::system_error for ECONNRESET, ETIMEDOUT from a time limit; OperationCancelled;
// ExecutorShutDown); IncompleteTransfer from readExactly and writeAll after some bytes;
// EndOfStream from readExactly at a clean end; std::bad_alloc.
//
// Thread safety: a TlsStream object is used by one coroutine at a time except for the
// one-read-one-write rule above; its operations may run on any executor thread.
//
// Example (a client):
//   weft::TlsContext context = weft::TlsContext::client();
//   weft::TcpStream tcp = co_await weft::TcpStream::connect(address);
//   weft::TlsStream tls = co_await weft::TlsStream::connect(std::move(tcp), context,
//                                                           "example.com");
//   co_await tls.writeAll("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n");
//   weft::LentBuffer reply = co_await tls.receive();
//   co_await tls.shutdown();
class TlsStream {
 public:
  // An empty stream (isOpen() false): what a moved-from one is.
  TlsStream() noexcept;
  TlsStream(TlsStream&& other) noexcept;
  TlsStream& operator=(TlsStream&& other) noexcept;
  // Closes the socket (without close_notify: call shutdown() first for a clean end).
  ~TlsStream();

  // Client handshake over `stream` (connected). `serverName` is sent as SNI (unless it
  // is an IP address) and verified against the certificate's names (DNS names, or IP
  // addresses for an address) unless the context disabled verification.
  // Errors: TlsError (kVerification when the certificate does not verify, kProtocol when
  // the server refuses, kTruncated when the connection ends during the handshake); the
  // TcpStream's; std::invalid_argument for an empty serverName with verification on, or
  // a server context; std::logic_error for a closed stream.
  static Lazy<TlsStream> connect(TcpStream stream, TlsContext context, std::string serverName);
  // Server handshake over an accepted `stream`. Errors: as connect (kVerification when a
  // required client certificate is missing or does not verify); std::invalid_argument
  // for a client context.
  static Lazy<TlsStream> accept(TcpStream stream, TlsContext context);

  // Receives the decrypted bytes that are there (at least 1, at most the loop's buffer
  // size, 64 KiB: the whole records that have arrived, up to that) in a buffer the event
  // loop of the calling thread lends; an empty LentBuffer at a clean end (close_notify).
  // The buffer is taken only once OpenSSL has a record to decrypt and given back before
  // any wait, so a receive waiting for the peer holds no buffer, and nor does OpenSSL
  // (SSL_MODE_RELEASE_BUFFERS) unless half a record came. The LentBuffer gives it back
  // when destroyed (any thread, any time). The plain way to write a server:
  //   for (;;) {
  //     weft::LentBuffer data = co_await tls.receive();
  //     if (data.empty()) break;  // close_notify
  //     co_await tls.writeAll(data);
  //   }
  // A read like read(): one at a time with the others, the stream's read time limit,
  // cancellation and withTimeout as for read() (stopped while it waits, nothing was
  // consumed and the stream stays usable; bytes that arrived are returned even when a
  // cancellation raced them). When OpenSSL fails after some records were decrypted
  // (a bad record, truncation after data), receive returns those bytes and the next read
  // or receive throws the failure. Records OpenSSL queues while decrypting (an alert) go
  // out with the next write, or before the next receive waits or throws.
  // Errors: as read(); std::system_error ENOBUFS when the loop lends no buffer (memory
  // short, or an executor's own IoLoop that lends none: IoLoop::lendBuffer);
  // std::logic_error on a thread without an event loop.
  Lazy<LentBuffer> receive();

  // Reads the decrypted bytes that are there, at least 1, at most buffer.size(); 0 at
  // a clean end (close_notify). An empty buffer returns 0 at once.
  Lazy<std::size_t> read(std::span<std::byte> buffer);
  Lazy<std::size_t> read(std::span<char> buffer) { return read(std::as_writable_bytes(buffer)); }
  // Reads until `buffer` is full. Errors: EndOfStream at a clean end first;
  // IncompleteTransfer after some bytes (its cause is the failure); else as read().
  Lazy<void> readExactly(std::span<std::byte> buffer);
  Lazy<void> readExactly(std::span<char> buffer) {
    return readExactly(std::as_writable_bytes(buffer));
  }

  // Encrypts and sends up to 64 KiB of `buffer`; returns how many bytes (>= 1 for a
  // non-empty buffer) once their records were handed to the kernel.
  Lazy<std::size_t> write(std::span<const std::byte> buffer);
  Lazy<std::size_t> write(std::string_view text) { return write(std::as_bytes(std::span(text))); }
  // Writes all of `buffer`. Errors: IncompleteTransfer after some bytes; else as write().
  Lazy<void> writeAll(std::span<const std::byte> buffer);
  Lazy<void> writeAll(std::string_view text) { return writeAll(std::as_bytes(std::span(text))); }

  // Sends close_notify, then ends the TCP stream's writing side. Idempotent.
  Lazy<void> shutdown();
  // Closes the socket (no close_notify). Idempotent; noexcept.
  void close() noexcept;
  bool isOpen() const noexcept;

  // What the handshake agreed: "TLSv1.3" or "TLSv1.2"; the ALPN protocol ("" if none);
  // the peer certificate's subject ("CN=example.com,O=..."; "" without one); whether
  // this connection resumed an earlier session; the SNI name the client sent ("" if
  // none; on either side). Errors: std::logic_error on an empty stream.
  std::string_view protocolVersion() const;
  std::string_view alpnProtocol() const;
  std::string peerSubject() const;
  bool sessionReused() const;
  std::string_view serverName() const;

  // The TCP stream underneath (time limits, addresses, options). Reading or writing it
  // directly corrupts the TLS stream.
  TcpStream& transport();
  // OpenSSL's SSL, for queries weft has no accessor for. Do not read, write or change
  // its BIOs through it.
  ssl_st* nativeHandle() const noexcept;

  // The per-connection state (defined in io/detail/tls_state.h).
  struct State;

 private:
  explicit TlsStream(std::unique_ptr<State> state) noexcept;
  State& usable(const char* operation) const;
  std::unique_ptr<State> state_;
};

}  // namespace weft
