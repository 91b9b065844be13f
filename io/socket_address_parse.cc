// SocketAddress from text: parse(), tryParse(), parse(host, port) and unixPath(), and the
// messages that say why a text is not an address (the rest of SocketAddress:
// socket_address.cc).
#include <arpa/inet.h>
#include <net/if.h>

#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "weft/io/detail/socket_address_access.h"
#include "weft/io/socket_address.h"

namespace weft {

namespace {

using detail::kMaxUnixName;
using detail::kSunPathOffset;
using detail::kUnixPrefix;
using detail::quote;
using detail::SocketAddressAccess;

// Why a text is not an address: before + "detail" (quoted, escaped) + after. Parsing
// records this and builds no string, so tryParse() does not allocate.
struct Rejection {
  const char* before = "";
  std::optional<std::string_view> quoted;
  const char* after = "";
};

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

using Parser = bool (*)(std::string_view, SocketAddress&, Rejection&) noexcept;

// The address `parse` makes of `text`, or std::invalid_argument naming `what` ("socket
// address") and the text, and why it was rejected.
SocketAddress parsedOrRejected(Parser parse, std::string_view text, const char* what) {
  SocketAddress address;
  Rejection why;
  if (!parse(text, address, why)) {
    reject(std::string("weft: invalid ") + what + " " + quote(text) + ": ", why);
  }
  return address;
}

}  // namespace

SocketAddress SocketAddress::parse(std::string_view text) {
  return parsedOrRejected(parseText, text, "socket address");
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

SocketAddress SocketAddress::unixPath(std::string_view path) {
  return parsedOrRejected(parseUnix, path, "Unix socket path");
}

}  // namespace weft
