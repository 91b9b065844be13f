#include "weft/io/socket_address.h"

#include <arpa/inet.h>
#include <net/if.h>

#include <cstring>
#include <limits>
#include <ostream>
#include <stdexcept>

namespace weft {

namespace detail {

// What the parsing helpers below use to build addresses without going through the
// checks of fromNative (their input is already valid) and without throwing.
struct SocketAddressAccess {
  static SocketAddress make(const void* native, socklen_t length) noexcept {
    SocketAddress address;
    std::memcpy(&address.storage_, native, length);
    address.length_ = length;
    return address;
  }
  static const sockaddr_storage& storage(const SocketAddress& address) noexcept {
    return address.storage_;
  }
};

}  // namespace detail

namespace {

using detail::SocketAddressAccess;

constexpr socklen_t kSunPathOffset = offsetof(sockaddr_un, sun_path);
// The longest path (its NUL must fit) or abstract name (after its leading NUL).
constexpr std::size_t kMaxUnixName = sizeof(sockaddr_un::sun_path) - 1;
static_assert(kMaxUnixName == 107, "the comments in socket_address.h say 107");

sockaddr_in asIn(const SocketAddress& address) noexcept {
  sockaddr_in in;
  std::memcpy(&in, &SocketAddressAccess::storage(address), sizeof in);
  return in;
}

sockaddr_in6 asIn6(const SocketAddress& address) noexcept {
  sockaddr_in6 in6;
  std::memcpy(&in6, &SocketAddressAccess::storage(address), sizeof in6);
  return in6;
}

// The bytes of a Unix address after sun_family: a path with its NUL, a NUL then an
// abstract name, or nothing (unnamed).
std::string_view unixBytes(const SocketAddress& address) noexcept {
  const auto* un = reinterpret_cast<const sockaddr_un*>(&SocketAddressAccess::storage(address));
  return {un->sun_path, address.nativeLength() - kSunPathOffset};
}

// Why a text is not an address: before + "detail" (quoted, escaped) + after. Parsing
// records this and builds no string, so tryParse() does not allocate.
struct Rejection {
  const char* before = "";
  std::optional<std::string_view> quoted;
  const char* after = "";
};

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

[[noreturn]] void reject(const std::string& prefix, const Rejection& why) {
  std::string message = prefix + why.before;
  if (why.quoted) message += quote(*why.quoted);
  message += why.after;
  throw std::invalid_argument(message);
}

bool hasNul(std::string_view text) noexcept {
  return text.find('\0') != std::string_view::npos;
}

bool isDigits(std::string_view text) noexcept {
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// A decimal number no larger than `max` (leading zeros allowed; no sign, no spaces).
std::optional<std::uint32_t> parseDecimal(std::string_view text, std::uint32_t max) noexcept {
  if (!isDigits(text)) return std::nullopt;
  std::uint64_t value = 0;
  for (char c : text) {
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
    if (value > max) return std::nullopt;
  }
  return static_cast<std::uint32_t>(value);
}

bool parsePort(std::string_view text, std::uint16_t& port, Rejection& why) noexcept {
  if (text.empty()) {
    why = {"missing port after ':'", {}, ""};
    return false;
  }
  if (!isDigits(text)) {
    why = {"port ", text, " is not a decimal number"};
    return false;
  }
  const auto value = parseDecimal(text, std::numeric_limits<std::uint16_t>::max());
  if (!value) {
    why = {"port ", text, " is out of range (0..65535)"};
    return false;
  }
  port = static_cast<std::uint16_t>(*value);
  return true;
}

// inet_pton on a string_view (which may hold a NUL or be of any length).
bool presentationToNetwork(int family, std::string_view text, void* out) noexcept {
  char buffer[INET6_ADDRSTRLEN];
  if (text.size() >= sizeof buffer || hasNul(text)) return false;
  std::memcpy(buffer, text.data(), text.size());
  buffer[text.size()] = '\0';
  return ::inet_pton(family, buffer, out) == 1;
}

bool parseIpv4(std::string_view host, std::uint16_t port, SocketAddress& out,
               Rejection& why) noexcept {
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(port);
  if (!presentationToNetwork(AF_INET, host, &in.sin_addr)) {
    why = {"", host, " is not a numeric IPv4 address (resolve() looks up names)"};
    return false;
  }
  out = SocketAddressAccess::make(&in, sizeof in);
  return true;
}

// "fe80::1", "fe80::1%eth0" or "fe80::1%2" (no brackets).
bool parseIpv6(std::string_view host, std::uint16_t port, SocketAddress& out,
               Rejection& why) noexcept {
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  in6.sin6_port = htons(port);
  const std::size_t percent = host.find('%');
  const std::string_view address = host.substr(0, percent);
  if (!presentationToNetwork(AF_INET6, address, &in6.sin6_addr)) {
    why = {"", address, " is not a numeric IPv6 address (resolve() looks up names)"};
    return false;
  }
  if (percent != std::string_view::npos) {
    const std::string_view scope = host.substr(percent + 1);
    if (scope.empty()) {
      why = {"empty scope after '%' in ", host, ""};
      return false;
    }
    if (isDigits(scope)) {
      const auto index = parseDecimal(scope, std::numeric_limits<std::uint32_t>::max());
      if (!index) {
        why = {"scope id ", scope, " is out of range"};
        return false;
      }
      in6.sin6_scope_id = *index;
    } else {
      char name[IF_NAMESIZE];
      unsigned index = 0;
      if (scope.size() < sizeof name && !hasNul(scope)) {
        std::memcpy(name, scope.data(), scope.size());
        name[scope.size()] = '\0';
        index = ::if_nametoindex(name);
      }
      if (index == 0) {
        why = {"scope ", scope, " names no network interface"};
        return false;
      }
      in6.sin6_scope_id = index;
    }
  }
  out = SocketAddressAccess::make(&in6, sizeof in6);
  return true;
}

// "/path" or "@abstract".
bool parseUnix(std::string_view path, SocketAddress& out, Rejection& why) noexcept {
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  if (path.empty()) {
    why = {"the Unix socket path is empty", {}, ""};
    return false;
  }
  if (path.front() == '@') {
    const std::string_view name = path.substr(1);
    if (name.size() > kMaxUnixName) {
      why = {"the abstract Unix socket name is longer than 107 bytes", {}, ""};
      return false;
    }
    // sun_path[0] stays NUL: that is what makes the name abstract. No trailing NUL.
    std::memcpy(un.sun_path + 1, name.data(), name.size());
    out = SocketAddressAccess::make(&un, static_cast<socklen_t>(kSunPathOffset + 1 + name.size()));
    return true;
  }
  if (hasNul(path)) {
    why = {"the Unix socket path contains a NUL byte", {}, ""};
    return false;
  }
  if (path.size() > kMaxUnixName) {
    why = {"the Unix socket path is longer than 107 bytes", {}, ""};
    return false;
  }
  std::memcpy(un.sun_path, path.data(), path.size());
  // Counts the NUL after the path (un is zeroed).
  out = SocketAddressAccess::make(&un, static_cast<socklen_t>(kSunPathOffset + path.size() + 1));
  return true;
}

// An IPv6 address, with or without a scope, for choosing an error message.
bool looksLikeIpv6(std::string_view text) noexcept {
  in6_addr ignored;
  return presentationToNetwork(AF_INET6, text.substr(0, text.find('%')), &ignored);
}

constexpr std::string_view kUnixPrefix = "unix:";

// A bad host is reported before a bad port.
bool parseHostAndPort(std::string_view host, std::string_view portText,
                      bool (*parseHost)(std::string_view, std::uint16_t, SocketAddress&,
                                        Rejection&) noexcept,
                      SocketAddress& out, Rejection& why) noexcept {
  std::uint16_t port = 0;
  Rejection portWhy;
  const bool portParsed = parsePort(portText, port, portWhy);
  if (!parseHost(host, port, out, why)) return false;
  if (!portParsed) {
    why = portWhy;
    return false;
  }
  return true;
}

bool parseText(std::string_view text, SocketAddress& out, Rejection& why) noexcept {
  if (text.starts_with(kUnixPrefix)) return parseUnix(text.substr(kUnixPrefix.size()), out, why);
  if (text.empty()) {
    why = {"empty text", {}, ""};
    return false;
  }
  if (text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) {
      why = {"missing ']' after the IPv6 address", {}, ""};
      return false;
    }
    const std::string_view host = text.substr(1, close - 1);
    const std::string_view rest = text.substr(close + 1);
    if (host.empty()) {
      why = {"empty host", {}, ""};
      return false;
    }
    if (rest.empty()) {
      why = {"missing port (write [host]:port)", {}, ""};
      return false;
    }
    if (rest.front() != ':') {
      why = {"unexpected ", rest, " after ']'"};
      return false;
    }
    return parseHostAndPort(host, rest.substr(1), parseIpv6, out, why);
  }
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    why = {"missing port (write host:port)", {}, ""};
    return false;
  }
  const std::string_view host = text.substr(0, colon);
  if (host.find(':') != std::string_view::npos) {
    if (looksLikeIpv6(text) || looksLikeIpv6(host)) {
      why = {"an IPv6 address needs brackets and a port, as in \"[::1]:80\"", {}, ""};
    } else {
      why = {"", host, " is not a numeric IPv4 address"};
    }
    return false;
  }
  if (host.empty()) {
    why = {"empty host", {}, ""};
    return false;
  }
  return parseHostAndPort(host, text.substr(colon + 1), parseIpv4, out, why);
}

[[noreturn]] void rejectNative(const std::string& what) {
  throw std::invalid_argument("weft: SocketAddress::fromNative: " + what);
}

}  // namespace

SocketAddress SocketAddress::parse(std::string_view text) {
  SocketAddress address;
  Rejection why;
  if (!parseText(text, address, why)) {
    reject("weft: invalid socket address " + quote(text) + ": ", why);
  }
  return address;
}

std::optional<SocketAddress> SocketAddress::tryParse(std::string_view text) noexcept {
  SocketAddress address;
  Rejection why;
  if (!parseText(text, address, why)) return std::nullopt;
  return address;
}

SocketAddress SocketAddress::parse(std::string_view host, std::uint16_t port) {
  SocketAddress address;
  Rejection why;
  std::string_view bare = host;
  if (bare.size() >= 2 && bare.front() == '[' && bare.back() == ']') {
    bare = bare.substr(1, bare.size() - 2);
  }
  bool parsed = false;
  if (bare.empty()) {
    why = {"empty host", {}, ""};
  } else if (bare.find(':') != std::string_view::npos) {
    parsed = parseIpv6(bare, port, address, why);
  } else {
    parsed = parseIpv4(bare, port, address, why);
  }
  if (!parsed) reject("weft: invalid host " + quote(host) + ": ", why);
  return address;
}

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

SocketAddress SocketAddress::unixPath(std::string_view path) {
  SocketAddress address;
  Rejection why;
  if (!parseUnix(path, address, why)) {
    reject("weft: invalid Unix socket path " + quote(path) + ": ", why);
  }
  return address;
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
