#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

#include "weft/io/socket_address.h"

// What the two files of SocketAddress (io/socket_address.cc, io/socket_address_parse.cc)
// share.

namespace weft::detail {

// What the parsing helpers and the named constructors use to build addresses without
// going through the checks of fromNative (their input is already valid) and without
// throwing.
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

inline constexpr socklen_t kSunPathOffset = offsetof(sockaddr_un, sun_path);
// The longest path (its NUL must fit) or abstract name (after its leading NUL).
inline constexpr std::size_t kMaxUnixName = sizeof(sockaddr_un::sun_path) - 1;
static_assert(kMaxUnixName == 107, "the comments in socket_address.h say 107");

inline sockaddr_in asIn(const SocketAddress& address) noexcept {
  sockaddr_in in;
  std::memcpy(&in, &SocketAddressAccess::storage(address), sizeof in);
  return in;
}

inline sockaddr_in6 asIn6(const SocketAddress& address) noexcept {
  sockaddr_in6 in6;
  std::memcpy(&in6, &SocketAddressAccess::storage(address), sizeof in6);
  return in6;
}

// The bytes of a Unix address after sun_family: a path with its NUL, a NUL then an
// abstract name, or nothing (unnamed).
inline std::string_view unixBytes(const SocketAddress& address) noexcept {
  const auto* un = reinterpret_cast<const sockaddr_un*>(&SocketAddressAccess::storage(address));
  return {un->sun_path, address.nativeLength() - kSunPathOffset};
}

// How toString() begins a Unix address, and parse() recognises one.
inline constexpr std::string_view kUnixPrefix = "unix:";

// `text` in double quotes, with quotes, backslashes and unprintable bytes escaped (a NUL
// would otherwise end what()).
std::string quote(std::string_view text);

}  // namespace weft::detail
