#include "weft/io/resolve.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "weft/coro/cancellation.h"

namespace weft {

namespace {

class GetaddrinfoCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "getaddrinfo"; }
  std::string message(int code) const override { return gai_strerror(code); }
};

struct FreeAddrinfo {
  void operator()(addrinfo* list) const noexcept { freeaddrinfo(list); }
};
using AddrinfoList = std::unique_ptr<addrinfo, FreeAddrinfo>;

addrinfo hintsFor(const ResolveOptions& options, int extraFlags) {
  addrinfo hints{};
  switch (options.family) {
    case ResolveOptions::Family::kAny: hints.ai_family = AF_UNSPEC; break;
    case ResolveOptions::Family::kIpv4: hints.ai_family = AF_INET; break;
    case ResolveOptions::Family::kIpv6: hints.ai_family = AF_INET6; break;
  }
  hints.ai_socktype =
      options.socketType == ResolveOptions::SocketType::kStream ? SOCK_STREAM : SOCK_DGRAM;
  hints.ai_flags = extraFlags | (options.passive ? AI_PASSIVE : 0);
  return hints;
}

// `text` for a message: a NUL shown as \0 (it would end what()) and a backslash as \\,
// other bytes as they are.
std::string shown(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\0') {
      out += "\\0";
    } else if (c == '\\') {
      out += "\\\\";
    } else {
      out += c;
    }
  }
  return out;
}

// "weft: resolve("host", "service")", the start of every error message.
std::string describe(const std::string& host, const std::string& service) {
  return "weft: resolve(\"" + shown(host) + "\", \"" + shown(service) + "\")";
}

[[noreturn]] void throwInvalid(const std::string& host, const std::string& service,
                               const std::string& why) {
  throw std::invalid_argument(describe(host, service) + ": " + why);
}

bool isDecimalDigit(char c) noexcept { return c >= '0' && c <= '9'; }

// White space as strtoul skips it (the "C" locale's isspace).
bool isSpace(char c) noexcept { return c == ' ' || (c >= '\t' && c <= '\r'); }

// Refuses what getaddrinfo would misread: a NUL (it takes C strings, so the rest would be
// cut off), and a numeric service that is not a port in 0..65535 written in decimal
// digits. glibc reads a service as a number when strtoul takes all of it (leading white
// space and a sign included) and keeps the low 16 bits: "65536" would be port 0, "-1"
// port 65535. A service with other characters after its digits ("3com-tsmux") is a name.
void checkInputs(const std::string& host, const std::string& service) {
  if (host.find('\0') != std::string::npos) {
    throwInvalid(host, service, "the host contains a NUL byte");
  }
  if (service.find('\0') != std::string::npos) {
    throwInvalid(host, service, "the service contains a NUL byte");
  }
  std::size_t digits = 0;  // where strtoul's digits would start
  while (digits < service.size() && isSpace(service[digits])) ++digits;
  if (digits < service.size() && (service[digits] == '+' || service[digits] == '-')) ++digits;
  if (digits == service.size()) return;  // empty (port 0), or no digits: a name
  for (std::size_t i = digits; i < service.size(); ++i) {
    if (!isDecimalDigit(service[i])) return;  // a name
  }
  const std::string port = "port \"" + service + "\"";
  if (digits != 0) throwInvalid(host, service, port + " is not a decimal number");
  std::uint32_t value = 0;
  for (char c : service) {
    value = value * 10 + static_cast<std::uint32_t>(c - '0');
    if (value > 65535) throwInvalid(host, service, port + " is out of range (0..65535)");
  }
}

[[noreturn]] void throwResolveError(int code, int savedErrno, const std::string& host,
                                    const std::string& service) {
  const std::string what = describe(host, service);
  if (code == EAI_SYSTEM) {
    throw std::system_error(savedErrno, std::system_category(), what);
  }
  throw std::system_error(code, getaddrinfoCategory(), what);
}

// getaddrinfo with `flags`: the addresses, or the EAI code (with errno for EAI_SYSTEM).
struct Lookup {
  AddrinfoList list;
  int code = 0;
  int savedErrno = 0;
};
Lookup lookUp(const std::string& host, const std::string& service,
              const ResolveOptions& options, int flags) {
  const addrinfo hints = hintsFor(options, flags);
  addrinfo* list = nullptr;
  errno = 0;
  Lookup lookup;
  lookup.code = getaddrinfo(host.empty() ? nullptr : host.c_str(),
                            service.empty() ? "0" : service.c_str(), &hints, &list);
  lookup.savedErrno = errno;
  lookup.list.reset(list);
  return lookup;
}

// In getaddrinfo's order, each address once (a name listed twice in /etc/hosts, say).
std::vector<SocketAddress> addressesOf(const addrinfo* list) {
  std::vector<SocketAddress> addresses;
  for (const addrinfo* entry = list; entry != nullptr; entry = entry->ai_next) {
    if (entry->ai_addr == nullptr) continue;
    if (entry->ai_family != AF_INET && entry->ai_family != AF_INET6) continue;
    SocketAddress address = SocketAddress::fromNative(entry->ai_addr, entry->ai_addrlen);
    if (std::find(addresses.begin(), addresses.end(), address) == addresses.end()) {
      addresses.push_back(std::move(address));
    }
  }
  return addresses;
}

std::vector<SocketAddress> resultOf(Lookup lookup, const std::string& host,
                                    const std::string& service) {
  if (lookup.code != 0) throwResolveError(lookup.code, lookup.savedErrno, host, service);
  std::vector<SocketAddress> addresses = addressesOf(lookup.list.get());
  // Only other families (none asked for): as getaddrinfo says when it finds none.
  if (addresses.empty()) throwResolveError(EAI_NONAME, 0, host, service);
  return addresses;
}

// The numeric fast path: the addresses when host and service are both numeric (or
// empty), nullopt when a lookup is needed.
std::optional<std::vector<SocketAddress>> resolveNumeric(const std::string& host,
                                                         const std::string& service,
                                                         const ResolveOptions& options) {
  Lookup lookup = lookUp(host, service, options, AI_NUMERICHOST | AI_NUMERICSERV);
  // EAI_NONAME: a name, not a number (host or service). Anything else is the answer (a
  // numeric host of the other family than asked for gives EAI_ADDRFAMILY or EAI_NONAME,
  // which the full lookup then reports as well).
  if (lookup.code == EAI_NONAME) return std::nullopt;
  return resultOf(std::move(lookup), host, service);
}

}  // namespace

const std::error_category& getaddrinfoCategory() noexcept {
  static const GetaddrinfoCategory category;
  return category;
}

Lazy<std::vector<SocketAddress>> resolve(std::string host, std::string service,
                                         ResolveOptions options) {
  checkInputs(host, service);
  // A cancelled caller gets OperationCancelled on both paths, as blocking() would throw.
  (co_await currentCancellationToken()).throwIfCancellationRequested();
  if (std::optional<std::vector<SocketAddress>> numeric = resolveNumeric(host, service, options)) {
    co_return std::move(*numeric);
  }
  BlockingPool& pool = options.pool != nullptr ? *options.pool : BlockingPool::defaultPool();
  co_return co_await blocking(pool, [&host, &service, &options] {
    return resultOf(lookUp(host, service, options, 0), host, service);
  });
}

}  // namespace weft
