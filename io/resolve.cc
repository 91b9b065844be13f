#include "weft/io/resolve.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>
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

[[noreturn]] void throwResolveError(int code, int savedErrno, const std::string& host,
                                    const std::string& service) {
  const std::string what = "weft: resolve(\"" + host + "\", \"" + service + "\")";
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
