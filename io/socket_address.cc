#include "weft/io/socket_address.h"

#include <arpa/inet.h>
#include <net/if.h>

#include <cstring>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "weft/io/detail/socket_address_access.h"

namespace weft {

namespace detail {

// `text` in double quotes, with quotes, backslashes and unprintable bytes escaped (a NUL
// would otherwise end what()).
std::string quote(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20 || byte > 0x7e) {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

}  // namespace detail

namespace {

using detail::asIn;
using detail::asIn6;
using detail::kSunPathOffset;
using detail::kUnixPrefix;
using detail::quote;
using detail::SocketAddressAccess;
using detail::unixBytes;

[[noreturn]] void rejectNative(const std::string& what) {
  throw std::invalid_argument("weft: SocketAddress::fromNative: " + what);
}

}  // namespace

SocketAddress SocketAddress::ipv4(std::array<std::uint8_t, 4> bytes, std::uint16_t port) noexcept {
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(port);
  std::memcpy(&in.sin_addr, bytes.data(), bytes.size());
  return SocketAddressAccess::make(&in, sizeof in);
}

SocketAddress SocketAddress::ipv6(std::array<std::uint8_t, 16> bytes, std::uint16_t port,
                                  std::uint32_t scopeId) noexcept {
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  in6.sin6_port = htons(port);
  in6.sin6_scope_id = scopeId;
  std::memcpy(&in6.sin6_addr, bytes.data(), bytes.size());
  return SocketAddressAccess::make(&in6, sizeof in6);
}

SocketAddress SocketAddress::loopbackV4(std::uint16_t port) noexcept {
  return ipv4({127, 0, 0, 1}, port);
}

SocketAddress SocketAddress::loopbackV6(std::uint16_t port) noexcept {
  return ipv6({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, port);
}

SocketAddress SocketAddress::anyV4(std::uint16_t port) noexcept {
  return ipv4({0, 0, 0, 0}, port);
}

SocketAddress SocketAddress::anyV6(std::uint16_t port) noexcept {
  return ipv6({}, port);
}

SocketAddress SocketAddress::fromNative(const sockaddr* address, socklen_t length) {
  if (length == 0) return SocketAddress();
  const std::string lengthText = "length " + std::to_string(length);
  if (address == nullptr) rejectNative("a null address with " + lengthText);
  if (length < sizeof(sa_family_t)) {
    rejectNative(lengthText + " is too short to hold an address family");
  }
  if (length > kNativeCapacity) {
    rejectNative(lengthText + " is above kNativeCapacity (" + std::to_string(kNativeCapacity) +
                 ")");
  }
  sa_family_t family;
  std::memcpy(&family, reinterpret_cast<const char*>(address) + offsetof(sockaddr, sa_family),
              sizeof family);
  const auto atLeast = [&](socklen_t needed, const char* name) {
    if (length < needed) {
      rejectNative(lengthText + " is too short for an " + name + " address (needs " +
                   std::to_string(needed) + ")");
    }
  };
  switch (family) {
    case AF_INET: {
      atLeast(sizeof(sockaddr_in), "AF_INET");
      sockaddr_in in;
      std::memcpy(&in, address, sizeof in);
      std::memset(in.sin_zero, 0, sizeof in.sin_zero);
      return SocketAddressAccess::make(&in, sizeof in);
    }
    case AF_INET6: {
      atLeast(sizeof(sockaddr_in6), "AF_INET6");
      sockaddr_in6 in6;
      std::memcpy(&in6, address, sizeof in6);
      return SocketAddressAccess::make(&in6, sizeof in6);
    }
    case AF_UNIX: {
      atLeast(kSunPathOffset, "AF_UNIX");
      if (length > sizeof(sockaddr_un)) {
        rejectNative(lengthText + " is too long for an AF_UNIX address (at most " +
                     std::to_string(sizeof(sockaddr_un)) + ")");
      }
      sockaddr_un un{};
      std::memcpy(&un, address, length);
      const std::size_t bytes = length - kSunPathOffset;
      if (bytes == 0 || un.sun_path[0] == '\0') {
        // Unnamed, or abstract: every byte counts, NULs included.
        return SocketAddressAccess::make(&un, length);
      }
      // A path ends at its first NUL; the length counts that NUL when there is room for it
      // (a 108-byte path fills sun_path with none).
      const std::size_t pathLength = ::strnlen(un.sun_path, bytes);
      const std::size_t withNul = pathLength + (pathLength < sizeof un.sun_path ? 1 : 0);
      return SocketAddressAccess::make(&un, static_cast<socklen_t>(kSunPathOffset + withNul));
    }
    default:
      rejectNative("unsupported address family " + std::to_string(family) +
                   " (weft supports AF_INET, AF_INET6 and AF_UNIX)");
  }
}

void SocketAddress::setNativeLength(socklen_t length) {
  try {
    *this = fromNative(native(), length);
  } catch (...) {
    *this = SocketAddress();
    throw;
  }
}

bool SocketAddress::isLoopback() const noexcept {
  switch (family()) {
    case AF_INET:
      return (ntohl(asIn(*this).sin_addr.s_addr) >> 24) == 127;
    case AF_INET6: {
      const sockaddr_in6 in6 = asIn6(*this);
      std::uint8_t bytes[16];
      std::memcpy(bytes, &in6.sin6_addr, sizeof bytes);
      static constexpr std::uint8_t kLoopback[16] = {0, 0, 0, 0, 0, 0, 0, 0,
                                                     0, 0, 0, 0, 0, 0, 0, 1};
      static constexpr std::uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0,
                                                         0, 0, 0, 0, 0xff, 0xff};
      if (std::memcmp(bytes, kLoopback, sizeof bytes) == 0) return true;
      return std::memcmp(bytes, kMappedPrefix, sizeof kMappedPrefix) == 0 && bytes[12] == 127;
    }
    default:
      return false;
  }
}

std::uint16_t SocketAddress::port() const noexcept {
  switch (family()) {
    case AF_INET:
      return ntohs(asIn(*this).sin_port);
    case AF_INET6:
      return ntohs(asIn6(*this).sin6_port);
    default:
      return 0;
  }
}

SocketAddress SocketAddress::withPort(std::uint16_t port) const {
  SocketAddress copy = *this;
  switch (family()) {
    case AF_INET: {
      sockaddr_in in = asIn(*this);
      in.sin_port = htons(port);
      std::memcpy(&copy.storage_, &in, sizeof in);
      return copy;
    }
    case AF_INET6: {
      sockaddr_in6 in6 = asIn6(*this);
      in6.sin6_port = htons(port);
      std::memcpy(&copy.storage_, &in6, sizeof in6);
      return copy;
    }
    default:
      throw std::logic_error(std::string("weft: SocketAddress::withPort() on ") +
                             (isUnix() ? "the Unix socket address " + quote(toString())
                                       : std::string("an empty address")) +
                             ": only IPv4 and IPv6 addresses have ports");
  }
}

std::string SocketAddress::host() const {
  switch (family()) {
    case AF_INET: {
      const sockaddr_in in = asIn(*this);
      char buffer[INET_ADDRSTRLEN];
      return ::inet_ntop(AF_INET, &in.sin_addr, buffer, sizeof buffer);
    }
    case AF_INET6: {
      const sockaddr_in6 in6 = asIn6(*this);
      char buffer[INET6_ADDRSTRLEN];
      std::string text = ::inet_ntop(AF_INET6, &in6.sin6_addr, buffer, sizeof buffer);
      if (in6.sin6_scope_id != 0) {
        char name[IF_NAMESIZE];
        text += '%';
        text += ::if_indextoname(in6.sin6_scope_id, name) != nullptr
                    ? std::string(name)
                    : std::to_string(in6.sin6_scope_id);
      }
      return text;
    }
    case AF_UNIX: {
      const std::string_view bytes = unixBytes(*this);
      if (bytes.empty()) return {};
      if (bytes.front() == '\0') return "@" + std::string(bytes.substr(1));
      return std::string(bytes.substr(0, bytes.find('\0')));
    }
    default:
      return {};
  }
}

std::string SocketAddress::toString() const {
  switch (family()) {
    case AF_INET:
      return host() + ":" + std::to_string(port());
    case AF_INET6:
      return "[" + host() + "]:" + std::to_string(port());
    case AF_UNIX:
      return std::string(kUnixPrefix) + host();
    default:
      return {};
  }
}

bool operator==(const SocketAddress& a, const SocketAddress& b) noexcept {
  if (a.family() != b.family()) return false;
  switch (a.family()) {
    case AF_INET: {
      const sockaddr_in x = asIn(a), y = asIn(b);
      return x.sin_addr.s_addr == y.sin_addr.s_addr && x.sin_port == y.sin_port;
    }
    case AF_INET6: {
      const sockaddr_in6 x = asIn6(a), y = asIn6(b);
      return std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0 &&
             x.sin6_port == y.sin6_port && x.sin6_scope_id == y.sin6_scope_id;
    }
    case AF_UNIX:
      return unixBytes(a) == unixBytes(b);
    default:
      return true;  // both empty
  }
}

std::ostream& operator<<(std::ostream& out, const SocketAddress& address) {
  return out << address.toString();
}

std::size_t detail::hashSocketAddress(const SocketAddress& address) noexcept {
  // The bytes operator== compares, after the family, hashed as one string.
  char key[1 + sizeof(sockaddr_un)];
  std::size_t size = 0;
  const auto append = [&](const void* data, std::size_t n) {
    std::memcpy(key + size, data, n);
    size += n;
  };
  key[size++] = static_cast<char>(address.family());
  switch (address.family()) {
    case AF_INET: {
      const sockaddr_in in = asIn(address);
      append(&in.sin_addr, sizeof in.sin_addr);
      append(&in.sin_port, sizeof in.sin_port);
      break;
    }
    case AF_INET6: {
      const sockaddr_in6 in6 = asIn6(address);
      append(&in6.sin6_addr, sizeof in6.sin6_addr);
      append(&in6.sin6_port, sizeof in6.sin6_port);
      append(&in6.sin6_scope_id, sizeof in6.sin6_scope_id);
      break;
    }
    case AF_UNIX: {
      const std::string_view bytes = unixBytes(address);
      append(bytes.data(), bytes.size());
      break;
    }
    default:
      break;
  }
  return std::hash<std::string_view>{}(std::string_view(key, size));
}

}  // namespace weft
