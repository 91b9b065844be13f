// A minimal HTTPS client: fetches one page with GET over weft::TlsStream, verifying the
// server (its certificate chain against the trusted roots, its name against the host
// asked for), and prints the body on standard output.
//   https_get https://HOST[:PORT][/PATH] [OPTIONS]
//   https_get HOST PORT PATH [OPTIONS]
// Options:
//   --ca FILE               trust the certificates in FILE (PEM) instead of the system's
//                           roots (a private CA, a test's self-signed certificate)
//   --cert FILE --key FILE  a client certificate and its key, sent to a server that asks
//                           for one (mutual TLS)
//   --verbose               on standard error: the address, the protocol version, the
//                           ALPN protocol and the server certificate's subject
// Verification is always on: there is no option to turn it off.
// It offers ALPN http/1.1, sends "Connection: close", reads the answer (a Content-Length
// body, a chunked one, or one that ends with the connection's close_notify), then sends
// close_notify. Reads, writes and the handshake have a 30 s time limit, connecting 10 s
// per address (HOST may resolve to several; the first that accepts is used).
// Exit status: 0 for a 2xx answer; 1 for another answer (its body is printed, the status
// goes to standard error) or a failure, with "https_get: " and the error's text on
// standard error, for a certificate that does not verify:
//   https_get: weft: TLS connect: the peer's certificate did not verify: hostname mismatch
// 2 for a usage error.
// Environment: WEFT_IO_BACKEND (io_uring or epoll).
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <weft/coro/lazy.h>
#include <weft/coro/sync_await.h>
#include <weft/coro/with_timeout.h>
#include <weft/executors/lent_buffer.h>
#include <weft/executors/thread_pool.h>
#include <weft/io/resolve.h>
#include <weft/io/tcp_stream.h>
#include <weft/io/tls_stream.h>

using namespace std::chrono_literals;

constexpr std::size_t kMaxHeader = 65536;  // a longer status line and headers: a failure

struct Options {
  std::string host;  // as in the URL; an IPv6 address without its brackets
  std::string port = "443";
  std::string path = "/";
  std::string ca;    // empty: the system's roots
  std::string cert;  // empty: no client certificate
  std::string key;
  bool verbose = false;
};

// Reads the command line into `options`; false (after a message) when it makes no sense.
bool parseArguments(int argc, char** argv, Options& options) {
  std::vector<std::string_view> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool hasValue = i + 1 < argc;
    if (arg == "--ca" && hasValue) {
      options.ca = argv[++i];
    } else if (arg == "--cert" && hasValue) {
      options.cert = argv[++i];
    } else if (arg == "--key" && hasValue) {
      options.key = argv[++i];
    } else if (arg == "--verbose") {
      options.verbose = true;
    } else if (arg.starts_with("--")) {
      std::fprintf(stderr, "https_get: unknown option or missing value: %s\n", argv[i]);
      return false;
    } else {
      positional.push_back(arg);
    }
  }
  if (options.cert.empty() != options.key.empty()) {
    std::fprintf(stderr, "https_get: --cert and --key go together\n");
    return false;
  }
  std::string_view authority;
  if (positional.size() == 1 && positional[0].starts_with("https://")) {
    std::string_view rest = positional[0].substr(8);
    const std::size_t slash = rest.find('/');
    authority = rest.substr(0, slash);
    if (slash != std::string_view::npos) options.path = rest.substr(slash);
    // "[::1]:8443", "[::1]", "example.com:8443", "example.com".
    const std::size_t bracket = authority.rfind(']');
    const std::size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket)) {
      options.port = authority.substr(colon + 1);
      authority = authority.substr(0, colon);
    }
  } else if (positional.size() == 3) {
    authority = positional[0];
    options.port = positional[1];
    options.path = positional[2];
  } else {
    return false;
  }
  if (authority.size() > 2 && authority.front() == '[' && authority.back() == ']') {
    authority = authority.substr(1, authority.size() - 2);
  }
  options.host = authority;
  if (options.host.empty() || options.port.empty() || !options.path.starts_with('/')) {
    std::fprintf(stderr, "https_get: a host, a port and a path starting with / are needed\n");
    return false;
  }
  return true;
}

// The answer's bytes received but not consumed yet, and more of them on demand.
class Input {
 public:
  explicit Input(weft::TlsStream& tls) : tls_(tls) {}

  std::string_view data() const { return std::string_view(buffer_).substr(start_); }
  void consume(std::size_t n) { start_ += n; }

  // Receives what the server sent next; false at its clean end (close_notify). A TCP end
  // without close_notify throws TlsError (kTruncated): the page may have been cut.
  weft::Lazy<bool> more() {
    weft::LentBuffer received = co_await tls_.receive();
    if (received.empty()) co_return false;
    buffer_.erase(0, start_);
    start_ = 0;
    buffer_.append(received.text());
    co_return true;
  }

  // The text before the next `delimiter`, consumed with the delimiter.
  // Errors: std::runtime_error naming `what` when the server ends first or sends more
  // than `limit` bytes without the delimiter.
  weft::Lazy<std::string> until(std::string_view delimiter, std::size_t limit, const char* what) {
    std::size_t end;
    while ((end = data().find(delimiter)) == std::string_view::npos) {
      if (data().size() > limit) {
        throw std::runtime_error(std::string("a malformed answer: ") + what + " is longer than " +
                                 std::to_string(limit) + " bytes");
      }
      if (!co_await more()) {
        throw std::runtime_error(std::string("the server ended the answer inside ") + what);
      }
    }
    std::string text(data().substr(0, end));
    consume(end + delimiter.size());
    co_return text;
  }

 private:
  weft::TlsStream& tls_;
  std::string buffer_;
  std::size_t start_ = 0;
};

void emit(std::string_view bytes) { std::fwrite(bytes.data(), 1, bytes.size(), stdout); }

// Copies exactly `length` bytes of the body to standard output.
weft::Lazy<void> copyBody(Input& input, std::size_t length) {
  while (length > 0) {
    if (input.data().empty() && !co_await input.more()) {
      throw std::runtime_error("the server ended the answer before the end of its body");
    }
    const std::string_view piece = input.data().substr(0, length);
    emit(piece);
    input.consume(piece.size());
    length -= piece.size();
  }
}

// "Transfer-Encoding: chunked" (RFC 9112 7.1): sizes in hex, each chunk followed by CRLF,
// a chunk of size 0, trailers, an empty line.
weft::Lazy<void> copyChunkedBody(Input& input) {
  for (;;) {
    const std::string line = co_await input.until("\r\n", kMaxHeader, "a chunk size");
    std::size_t used = 0;
    unsigned long long size = 0;
    try {
      size = std::stoull(line, &used, 16);
    } catch (const std::exception&) {
      throw std::runtime_error("a malformed chunk size: " + line.substr(0, 40));
    }
    if (used == 0 || (used < line.size() && line[used] != ';' && line[used] != ' ')) {
      throw std::runtime_error("a malformed chunk size: " + line.substr(0, 40));
    }
    if (size == 0) break;
    co_await copyBody(input, size);
    if (!(co_await input.until("\r\n", 2, "the CRLF after a chunk")).empty()) {
      throw std::runtime_error("a malformed answer: a chunk longer than its size");
    }
  }
  while (!(co_await input.until("\r\n", kMaxHeader, "the trailers")).empty()) {
  }
}

// The value of header `name` (ASCII case-insensitive) in `headers` ("Name: value" lines
// after the status line), trimmed; empty if absent.
std::string headerValue(std::string_view headers, std::string_view name) {
  std::size_t start = headers.find("\r\n");
  while (start != std::string_view::npos) {
    start += 2;
    const std::size_t end = headers.find("\r\n", start);
    const std::string_view line = headers.substr(start, end - start);
    const std::size_t colon = line.find(':');
    if (colon == name.size()) {
      bool same = true;
      for (std::size_t i = 0; i < name.size() && same; ++i) {
        same = std::tolower(static_cast<unsigned char>(line[i])) ==
               std::tolower(static_cast<unsigned char>(name[i]));
      }
      if (same) {
        std::string_view value = line.substr(colon + 1);
        while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
          value.remove_prefix(1);
        while (!value.empty() && (value.back() == ' ' || value.back() == '\t'))
          value.remove_suffix(1);
        return std::string(value);
      }
    }
    start = end;
  }
  return {};
}

// Connects to the first of `host`'s addresses that accepts.
weft::Lazy<weft::TcpStream> connectToHost(const Options& options) {
  const std::vector<weft::SocketAddress> addresses =
      co_await weft::resolve(options.host, options.port);
  std::exception_ptr failure;
  for (const weft::SocketAddress& address : addresses) {
    try {
      weft::TcpStream tcp = co_await weft::withTimeout(weft::TcpStream::connect(address), 10s);
      if (options.verbose)
        std::fprintf(stderr, "https_get: connected to %s\n", address.toString().c_str());
      co_return tcp;
    } catch (const std::exception&) {
      failure = std::current_exception();
    }
  }
  if (!failure) throw std::runtime_error("no address for " + options.host);
  std::rethrow_exception(failure);
}

// Fetches the page; returns the answer's status code (its body is on standard output).
weft::Lazy<int> get(const Options& options) {
  weft::TlsContext context = weft::TlsContext::client();  // verifies chain and name
  if (!options.ca.empty()) context.setTrustedRoots(weft::TlsPem::file(options.ca));
  if (!options.cert.empty()) {
    context.setCertificate(weft::TlsPem::file(options.cert), weft::TlsPem::file(options.key));
  }
  context.setAlpnProtocols({"http/1.1"});

  weft::TcpStream tcp = co_await connectToHost(options);
  tcp.setReadTimeout(30s);  // the handshake's reads too
  tcp.setWriteTimeout(30s);
  weft::TlsStream tls = co_await weft::TlsStream::connect(std::move(tcp), context, options.host);
  if (options.verbose) {
    std::fprintf(stderr, "https_get: %s, ALPN %s, server certificate %s\n",
                 std::string(tls.protocolVersion()).c_str(),
                 tls.alpnProtocol().empty() ? "none" : std::string(tls.alpnProtocol()).c_str(),
                 tls.peerSubject().c_str());
  }

  const bool ipv6 = options.host.find(':') != std::string::npos;
  std::string host = ipv6 ? "[" + options.host + "]" : options.host;
  if (options.port != "443") host += ":" + options.port;
  co_await tls.writeAll(
      "GET " + options.path + " HTTP/1.1\r\nHost: " + host +
      "\r\nUser-Agent: weft-https_get\r\nAccept: */*\r\nConnection: close\r\n\r\n");

  Input input(tls);
  std::string headers;
  int status = 0;
  do {  // 1xx answers (100 Continue, 103 Early Hints) come before the real one
    headers = co_await input.until("\r\n\r\n", kMaxHeader, "the header");
    if (!headers.starts_with("HTTP/1.") || headers.size() < 12 || headers[8] != ' ') {
      throw std::runtime_error("not an HTTP/1.x answer: " + headers.substr(0, 40));
    }
    status = std::atoi(headers.c_str() + 9);
  } while (status >= 100 && status < 200);

  const std::string length = headerValue(headers, "Content-Length");
  if (status == 204 || status == 304) {
    // No body.
  } else if (headerValue(headers, "Transfer-Encoding").ends_with("chunked")) {
    co_await copyChunkedBody(input);
  } else if (!length.empty()) {
    std::size_t used = 0;
    const unsigned long long size = std::stoull(length, &used);
    if (used != length.size()) throw std::runtime_error("a malformed Content-Length: " + length);
    co_await copyBody(input, size);
  } else {  // the body ends with the connection: only a clean end (close_notify) is whole
    do {
      emit(input.data());
      input.consume(input.data().size());
    } while (co_await input.more());
  }
  std::fflush(stdout);
  try {
    co_await tls.shutdown();  // close_notify
  } catch (const std::exception&) {
    // The page came whole: a server that has already closed may refuse our close_notify.
  }
  if (status < 200 || status > 299) {
    std::fprintf(stderr, "https_get: the server answered %s\n",
                 headers.substr(9, headers.find("\r\n") - 9).c_str());
  }
  co_return status;
}

int main(int argc, char** argv) {
  Options options;
  if (!parseArguments(argc, argv, options)) {
    std::fprintf(stderr,
                 "usage: %s https://HOST[:PORT][/PATH] [--ca FILE] [--cert FILE --key FILE] "
                 "[--verbose]\n"
                 "       %s HOST PORT PATH [options]\n",
                 argv[0], argv[0]);
    return 2;
  }
  try {
    weft::ThreadPool pool(1, "https-get");
    const int status = weft::syncAwait(get(options).via(&pool));
    return status >= 200 && status <= 299 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "https_get: %s\n", e.what());
    return 1;
  }
}
