#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>

namespace weft {

namespace detail {
struct SocketAddressAccess;
}  // namespace detail

// SocketAddress: a value holding any address weft's sockets use: IPv4, IPv6 (with a
// scope id), or a Unix domain socket (a filesystem path, or a Linux abstract name).
//
// Semantics:
//  - Storage is a sockaddr_storage and its length, so native()/nativeLength() go straight
//    to bind/connect/sendto, and nativeBuffer()/setNativeLength() take what
//    accept/recvfrom/getsockname return. A default-constructed address is empty:
//    family() == AF_UNSPEC, nativeLength() == 0, toString() == "".
//  - Text forms: "1.2.3.4:80", "[::1]:80", "[fe80::1%eth0]:80" (scope by interface name
//    or number), "unix:/run/app.sock", "unix:@name" (abstract). Hosts are numeric only;
//    resolve() does names. parse(toString()) gives back an equal address, except for an
//    unnamed Unix address (what accept() reports for a client that never bound), which
//    prints as "unix:" and which parse() rejects.
//  - Unix addresses: a path's native length counts its terminating NUL
//    (offsetof(sun_path) + size + 1); an abstract name's does not
//    (offsetof(sun_path) + 1 + size), as Linux expects. An abstract name is any bytes
//    (NULs included); host() and toString() show it after an '@'.
//  - Equality (and std::hash) compare the family, the address bytes, the port and the
//    IPv6 scope id (Unix: the path or abstract name). The IPv6 flow label is ignored.
//
// Preconditions: none.
// Errors: malformed text, a bad Unix path or a native address whose length does not fit
// its family throws std::invalid_argument; its what() starts with "weft: " and quotes the
// input (bytes that are not printable appear as \xNN). withPort() on a non-IP address
// throws std::logic_error. tryParse() returns std::nullopt instead of throwing.
// Thread safety: a plain value: const members may be called concurrently; a non-const
// member needs exclusive access to that one object.
//
// Example:
//   auto address = weft::SocketAddress::parse("[::1]:8080");
//   ::bind(fd, address.native(), address.nativeLength());
//   std::cout << address.withPort(9090) << "\n";  // [::1]:9090
class SocketAddress {
 public:
  // The capacity of nativeBuffer().
  static constexpr socklen_t kNativeCapacity = sizeof(sockaddr_storage);

  // The empty address: family() == AF_UNSPEC.
  SocketAddress() noexcept : storage_{}, length_(0) {}

  // Parses "1.2.3.4:80", "[::1]:80", "[fe80::1%eth0]:80", "unix:/path" or "unix:@name".
  // IP forms need a port 0..65535 in decimal digits; IPv6 hosts need brackets. A scope
  // given by name must name an existing interface (if_nametoindex).
  // Errors: std::invalid_argument naming the input and what is wrong with it.
  static SocketAddress parse(std::string_view text);

  // As parse(text), but returns std::nullopt for text that is not an address.
  // noexcept: a rejection builds no message, so nothing here allocates.
  static std::optional<SocketAddress> tryParse(std::string_view text) noexcept;

  // A numeric host ("127.0.0.1", "::1", "fe80::1%eth0"; brackets are optional) and a port.
  // Errors: std::invalid_argument naming the host when it is not a numeric IP address.
  static SocketAddress parse(std::string_view host, std::uint16_t port);

  // From address bytes in network order (ipv4({127, 0, 0, 1}, 80) is 127.0.0.1:80).
  static SocketAddress ipv4(std::array<std::uint8_t, 4> bytes, std::uint16_t port) noexcept;
  static SocketAddress ipv6(std::array<std::uint8_t, 16> bytes, std::uint16_t port,
                            std::uint32_t scopeId = 0) noexcept;
  static SocketAddress loopbackV4(std::uint16_t port) noexcept;  // 127.0.0.1
  static SocketAddress loopbackV6(std::uint16_t port) noexcept;  // ::1
  static SocketAddress anyV4(std::uint16_t port) noexcept;       // 0.0.0.0
  static SocketAddress anyV6(std::uint16_t port) noexcept;       // ::

  // A Unix domain socket: a filesystem path, or a Linux abstract name when `path` starts
  // with '@' ("@name" is the abstract name "name").
  // Errors: std::invalid_argument if `path` is empty, longer than 107 bytes (what
  // sun_path holds with its NUL, or after the abstract name's leading NUL), or, for a
  // filesystem path, contains a NUL byte.
  static SocketAddress unixPath(std::string_view path);

  // A copy of a native address (what accept, recvfrom or getsockname return). A length of
  // 0 gives the empty address (recvfrom reports that for an unbound Unix sender). IP
  // lengths may exceed the family's struct (a whole sockaddr_storage, say); a Unix path
  // is taken up to its first NUL. Unused bytes of the copy are zero.
  // Errors: std::invalid_argument if `address` is null with a non-zero length, the length
  // is too short for the family or above kNativeCapacity (above sizeof(sockaddr_un) for
  // AF_UNIX), or the family is not AF_INET, AF_INET6 or AF_UNIX.
  static SocketAddress fromNative(const sockaddr* address, socklen_t length);

  // AF_INET, AF_INET6, AF_UNIX, or AF_UNSPEC for the empty address.
  int family() const noexcept {
    return length_ == 0 ? AF_UNSPEC : storage_.ss_family;
  }
  bool isIpv4() const noexcept {
    return family() == AF_INET;
  }
  bool isIpv6() const noexcept {
    return family() == AF_INET6;
  }
  bool isUnix() const noexcept {
    return family() == AF_UNIX;
  }

  // 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104. False for Unix and empty addresses.
  bool isLoopback() const noexcept;

  // The port in host byte order; 0 for Unix and empty addresses.
  std::uint16_t port() const noexcept;

  // The same address with another port.
  // Errors: std::logic_error("weft: ...") if this is not an IPv4 or IPv6 address.
  SocketAddress withPort(std::uint16_t port) const;

  // "127.0.0.1", "::1", "fe80::1%eth0" (a scope id that names no interface prints as its
  // number); Unix: the path, "@name" for an abstract name, "" when unnamed; "" if empty.
  std::string host() const;

  // "127.0.0.1:80", "[::1]:80", "[fe80::1%eth0]:80", "unix:/tmp/x", "unix:@name";
  // "" for the empty address.
  std::string toString() const;

  // The native address for bind/connect/sendto, and its length (0 when empty).
  const sockaddr* native() const noexcept {
    return reinterpret_cast<const sockaddr*>(&storage_);
  }
  socklen_t nativeLength() const noexcept {
    return length_;
  }

  // For receiving into: clears this address and returns storage of kNativeCapacity bytes.
  // After the call has filled it, setNativeLength(length) validates what it wrote.
  //   socklen_t length = SocketAddress::kNativeCapacity;
  //   int client = ::accept(fd, peer.nativeBuffer(), &length);
  //   peer.setNativeLength(length);
  sockaddr* nativeBuffer() noexcept {
    storage_ = {};
    length_ = 0;
    return reinterpret_cast<sockaddr*>(&storage_);
  }

  // Records the length of what was written into nativeBuffer(), checked as fromNative
  // checks it. Errors: std::invalid_argument as fromNative; this address is empty then.
  void setNativeLength(socklen_t length);

  friend bool operator==(const SocketAddress& a, const SocketAddress& b) noexcept;

 private:
  friend struct detail::SocketAddressAccess;

  sockaddr_storage storage_;
  socklen_t length_;  // 0 when empty
};

// Writes address.toString().
std::ostream& operator<<(std::ostream& out, const SocketAddress& address);

namespace detail {
std::size_t hashSocketAddress(const SocketAddress& address) noexcept;
}  // namespace detail

}  // namespace weft

// Hashes what operator== compares, so equal addresses hash equally.
template <>
struct std::hash<weft::SocketAddress> {
  std::size_t operator()(const weft::SocketAddress& address) const noexcept {
    return weft::detail::hashSocketAddress(address);
  }
};
