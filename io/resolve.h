#pragma once

#include <string>
#include <system_error>
#include <vector>

#include "weft/coro/lazy.h"
#include "weft/io/blocking.h"
#include "weft/io/socket_address.h"

namespace weft {

// The std::error_category of getaddrinfo's EAI_* codes: name() is "getaddrinfo",
// message(code) is gai_strerror(code). A resolve() error carries
// std::error_code(eai, getaddrinfoCategory()), except EAI_SYSTEM, which carries the errno
// it stands for in std::system_category().
// noexcept: returns a reference to a static object.
//
// Example:
//   catch (const std::system_error& e) {
//     if (e.code() == std::error_code(EAI_NONAME, weft::getaddrinfoCategory())) ...
//   }
const std::error_category& getaddrinfoCategory() noexcept;

// Options of resolve().
struct ResolveOptions {
  enum class Family { kAny, kIpv4, kIpv6 };
  enum class SocketType { kStream, kDatagram };

  // kAny: both IPv4 and IPv6 addresses, in getaddrinfo's order (RFC 6724 on glibc).
  Family family = Family::kAny;
  // What the addresses are for (getaddrinfo's ai_socktype): a service name resolves to
  // the port of that protocol ("domain" is 53 for both; some names exist for one only).
  SocketType socketType = SocketType::kStream;
  // AI_PASSIVE: an empty host gives the wildcard address (0.0.0.0, ::), for bind().
  // Without it an empty host gives the loopback address.
  bool passive = false;
  // The pool the lookup blocks on; nullptr: BlockingPool::defaultPool(). Must outlive the
  // await.
  BlockingPool* pool = nullptr;
};

// `co_await resolve(host, service, options)`: the socket addresses of `host` (a name or
// a numeric address) and `service` (a port number or a service name such as "http"),
// through getaddrinfo. From a fiber: `weft::await(weft::resolve(...))`.
//
// Semantics:
//  - A numeric host ("127.0.0.1", "::1", "fe80::1%eth0") with a numeric or empty service
//    resolves at once, on the calling thread (getaddrinfo with AI_NUMERICHOST |
//    AI_NUMERICSERV consults nothing). Anything else runs getaddrinfo on the blocking
//    pool (`co_await blocking(...)`, see io/blocking.h): DNS, /etc/hosts, NSS modules and
//    /etc/services may all block.
//  - An empty host is getaddrinfo's null host (see ResolveOptions::passive); an empty
//    service is port 0. AI_ADDRCONFIG is not used: "localhost" and "::1" resolve on a
//    machine with loopback only.
//  - A service of decimal digits is a port number in 0..65535 (leading zeros allowed), as
//    for SocketAddress::parse; out of range ("65536") it is refused, never wrapped to
//    another port as getaddrinfo would. What getaddrinfo would also read as a number (a
//    sign or leading white space: "-1", "+80", " 80") is refused too. A service with
//    other characters ("http", "3com-tsmux") is a service name.
//  - The result is never empty, in getaddrinfo's order, each address once.
//  - Being a Lazy, it runs on its awaiter's executor and carries its cancellation token:
//    a lookup still waiting for a pool thread is cancelled (OperationCancelled), one
//    already in getaddrinfo finishes and its addresses are returned, as for blocking().
//
// Preconditions: none beyond blocking()'s (the pool outlives the await).
// Errors: std::invalid_argument naming host and service (a NUL shown as \0) when the
// host or the service contains a NUL byte (getaddrinfo takes C strings and would cut it
// there: "127.0.0.1\0.evil.example" is not 127.0.0.1), or for a numeric service that is
// not a port as above; thrown at the co_await, before any lookup.
// std::system_error with std::error_code(EAI_*, getaddrinfoCategory()) (EAI_NONAME: no
// such host; EAI_SERVICE: no such service for the socket type; EAI_AGAIN: try later;
// ...), or the errno of EAI_SYSTEM in std::system_category(); its what() names the host
// and the service. OperationCancelled. ExecutorShutDown if the pool is shut down.
// std::bad_alloc.
// Thread safety: any thread; getaddrinfo is thread-safe.
//
// Example (the addresses printed depend on the machine):
//   std::vector<weft::SocketAddress> addresses = co_await weft::resolve("localhost", "8080");
//   for (const auto& a : addresses) std::cout << a << "\n";  // 127.0.0.1:8080, [::1]:8080
//   auto v4 = co_await weft::resolve("example.com", "https",
//                                    {.family = weft::ResolveOptions::Family::kIpv4});
Lazy<std::vector<SocketAddress>> resolve(std::string host, std::string service,
                                         ResolveOptions options = {});

}  // namespace weft
