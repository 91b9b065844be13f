#include "weft/io/socket_address.h"

#include <gtest/gtest.h>
#include <net/if.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace weft {
namespace {

constexpr socklen_t kSunPathOffset = offsetof(sockaddr_un, sun_path);

// The message of the std::invalid_argument that `parse` throws, or a failure.
template <typename Parse>
std::string invalidArgumentMessage(Parse parse) {
  try {
    parse();
  } catch (const std::invalid_argument& error) {
    return error.what();
  } catch (...) {
    ADD_FAILURE() << "threw something other than std::invalid_argument";
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

// A socket descriptor closed at the end of the scope.
struct Fd {
  int fd;
  explicit Fd(int fd) : fd(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

SocketAddress localAddressOf(int fd) {
  SocketAddress address;
  socklen_t length = SocketAddress::kNativeCapacity;
  if (::getsockname(fd, address.nativeBuffer(), &length) != 0) {
    ADD_FAILURE() << "getsockname: " << std::strerror(errno);
  }
  address.setNativeLength(length);
  return address;
}

// A fresh directory under /tmp (short, so socket paths fit), removed with what the test
// created in it.
struct TemporaryDirectory {
  std::string path;
  std::vector<std::string> files;
  TemporaryDirectory() {
    char name[] = "/tmp/weft_socket_address_XXXXXX";
    if (::mkdtemp(name) == nullptr) ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
    path = name;
  }
  std::string file(const std::string& name) {
    files.push_back(path + "/" + name);
    return files.back();
  }
  ~TemporaryDirectory() {
    for (const std::string& f : files) ::unlink(f.c_str());
    ::rmdir(path.c_str());
  }
};

TEST(SocketAddressTest, DefaultIsEmpty) {
  const SocketAddress empty;
  EXPECT_EQ(empty.family(), AF_UNSPEC);
  EXPECT_FALSE(empty.isIpv4() || empty.isIpv6() || empty.isUnix() || empty.isLoopback());
  EXPECT_EQ(empty.port(), 0);
  EXPECT_EQ(empty.host(), "");
  EXPECT_EQ(empty.toString(), "");
  EXPECT_EQ(empty.nativeLength(), 0u);
  EXPECT_EQ(empty, SocketAddress());
  EXPECT_EQ(SocketAddress::fromNative(empty.native(), empty.nativeLength()), empty);
  EXPECT_NE(empty, SocketAddress::anyV4(0));
}

struct RoundTrip {
  std::string text;
  int family;
  std::string host;
  std::uint16_t port;
  std::string printed;  // toString(): the canonical spelling of `text`
};

TEST(SocketAddressTest, ParsesAndPrintsEachFamily) {
  const std::vector<RoundTrip> cases = {
      {"1.2.3.4:80", AF_INET, "1.2.3.4", 80, "1.2.3.4:80"},
      {"0.0.0.0:0", AF_INET, "0.0.0.0", 0, "0.0.0.0:0"},
      {"255.255.255.255:65535", AF_INET, "255.255.255.255", 65535, "255.255.255.255:65535"},
      {"127.0.0.1:0080", AF_INET, "127.0.0.1", 80, "127.0.0.1:80"},
      {"[::1]:80", AF_INET6, "::1", 80, "[::1]:80"},
      {"[::]:0", AF_INET6, "::", 0, "[::]:0"},
      {"[2001:DB8:0:0::1]:443", AF_INET6, "2001:db8::1", 443, "[2001:db8::1]:443"},
      {"[::ffff:1.2.3.4]:5", AF_INET6, "::ffff:1.2.3.4", 5, "[::ffff:1.2.3.4]:5"},
      // A scope number that names no interface prints as that number.
      {"[fe80::1%4000000000]:65535", AF_INET6, "fe80::1%4000000000", 65535,
       "[fe80::1%4000000000]:65535"},
      {"unix:/tmp/weft.sock", AF_UNIX, "/tmp/weft.sock", 0, "unix:/tmp/weft.sock"},
      {"unix:relative/x", AF_UNIX, "relative/x", 0, "unix:relative/x"},
      {"unix:@weft-abstract", AF_UNIX, "@weft-abstract", 0, "unix:@weft-abstract"},
      {"unix:@", AF_UNIX, "@", 0, "unix:@"},  // the empty abstract name
      {"unix:@@x", AF_UNIX, "@@x", 0, "unix:@@x"},
  };
  for (const RoundTrip& c : cases) {
    SCOPED_TRACE(c.text);
    const SocketAddress address = SocketAddress::parse(c.text);
    EXPECT_EQ(address.family(), c.family);
    EXPECT_EQ(address.isIpv4(), c.family == AF_INET);
    EXPECT_EQ(address.isIpv6(), c.family == AF_INET6);
    EXPECT_EQ(address.isUnix(), c.family == AF_UNIX);
    EXPECT_EQ(address.host(), c.host);
    EXPECT_EQ(address.port(), c.port);
    EXPECT_EQ(address.toString(), c.printed);
    EXPECT_EQ(address.native()->sa_family, c.family);
    EXPECT_EQ(SocketAddress::parse(address.toString()), address);
    EXPECT_EQ(SocketAddress::tryParse(c.text), address);
    EXPECT_EQ(SocketAddress::fromNative(address.native(), address.nativeLength()), address);
    if (c.family != AF_UNIX) {
      EXPECT_EQ(SocketAddress::parse(c.host, c.port), address);
    }
  }
}

TEST(SocketAddressTest, NativeLengthsAreWhatLinuxExpects) {
  EXPECT_EQ(SocketAddress::parse("1.2.3.4:80").nativeLength(), sizeof(sockaddr_in));
  EXPECT_EQ(SocketAddress::parse("[::1]:80").nativeLength(), sizeof(sockaddr_in6));

  // A path counts its NUL.
  const SocketAddress path = SocketAddress::unixPath("/tmp/x");
  EXPECT_EQ(path.nativeLength(), kSunPathOffset + 6 + 1);
  const auto* un = reinterpret_cast<const sockaddr_un*>(path.native());
  EXPECT_STREQ(un->sun_path, "/tmp/x");

  // An abstract name starts with a NUL and has none after it.
  const SocketAddress abstract = SocketAddress::unixPath("@name");
  EXPECT_EQ(abstract.nativeLength(), kSunPathOffset + 1 + 4);
  un = reinterpret_cast<const sockaddr_un*>(abstract.native());
  EXPECT_EQ(un->sun_path[0], '\0');
  EXPECT_EQ(std::string_view(un->sun_path + 1, 4), "name");

  // NUL bytes inside an abstract name are part of it.
  const std::string withNul("@a\0b", 4);
  const SocketAddress nulName = SocketAddress::unixPath(withNul);
  EXPECT_EQ(nulName.nativeLength(), kSunPathOffset + 4);
  EXPECT_EQ(nulName.host(), withNul);
  EXPECT_EQ(SocketAddress::parse(nulName.toString()), nulName);
  EXPECT_NE(nulName, SocketAddress::unixPath("@a"));
}

TEST(SocketAddressTest, ScopeByNameRoundTrips) {
  const unsigned loopbackIndex = ::if_nametoindex("lo");
  if (loopbackIndex == 0) GTEST_SKIP() << "no interface named lo";
  const SocketAddress address = SocketAddress::parse("[fe80::1%lo]:80");
  const SocketAddress byNumber =
      SocketAddress::parse("[fe80::1%" + std::to_string(loopbackIndex) + "]:80");
  EXPECT_EQ(address, byNumber);
  EXPECT_EQ(address.host(), "fe80::1%lo");
  EXPECT_EQ(byNumber.toString(), "[fe80::1%lo]:80");
  EXPECT_EQ(reinterpret_cast<const sockaddr_in6*>(address.native())->sin6_scope_id,
            loopbackIndex);
  EXPECT_EQ(SocketAddress::parse("fe80::1%lo", 80), address);
  EXPECT_NE(address, SocketAddress::parse("[fe80::1]:80"));
}

struct Rejected {
  std::string text;
  std::string reason;  // a part of what() after the quoted input
};

TEST(SocketAddressTest, RejectsWhatIsNotAnAddress) {
  const std::vector<Rejected> cases = {
      {"", "empty text"},
      {":80", "empty host"},
      {"[]:80", "empty host"},
      {"1.2.3.4", "missing port"},
      {"1.2.3.4:", "missing port"},
      {"[::1]", "missing port"},
      {"[::1]:", "missing port"},
      {"1.2.3.4:65536", "port \"65536\" is out of range (0..65535)"},
      {"1.2.3.4:99999999999999999999999", "is out of range"},
      {"[::1]:70000", "port \"70000\" is out of range"},
      {"1.2.3.4:8a", "port \"8a\" is not a decimal number"},
      {"1.2.3.4:+80", "port \"+80\" is not a decimal number"},
      {"1.2.3.4:-80", "port \"-80\" is not a decimal number"},
      {"1.2.3.4: 80", "port \" 80\" is not a decimal number"},
      {"1.2.3.4:80 ", "port \"80 \" is not a decimal number"},
      {" 1.2.3.4:80", "\" 1.2.3.4\" is not a numeric IPv4 address"},
      {"1.2.3:80", "\"1.2.3\" is not a numeric IPv4 address"},
      {"1.2.3.4.5:80", "\"1.2.3.4.5\" is not a numeric IPv4 address"},
      {"1.2.3.256:80", "\"1.2.3.256\" is not a numeric IPv4 address"},
      {"localhost:80", "\"localhost\" is not a numeric IPv4 address (resolve() looks up names)"},
      {"::1:80", "an IPv6 address needs brackets"},
      {"::1", "an IPv6 address needs brackets"},
      {"fe80::1%1:80", "an IPv6 address needs brackets"},
      {"tcp://1.2.3.4:80", "\"tcp://1.2.3.4\" is not a numeric IPv4 address"},
      {"[::1", "missing ']'"},
      {"[::1]80", "unexpected \"80\" after ']'"},
      {"[::1]x:80", "unexpected \"x:80\" after ']'"},
      {"[::1]:80]", "port \"80]\" is not a decimal number"},
      {"[1.2.3.4]:80", "\"1.2.3.4\" is not a numeric IPv6 address"},
      {"[localhost]:80", "\"localhost\" is not a numeric IPv6 address"},
      {"[::1 ]:80", "\"::1 \" is not a numeric IPv6 address"},
      {"[fe80::1%]:80", "empty scope after '%'"},
      {"[fe80::1%weft_no_such_if]:80", "scope \"weft_no_such_if\" names no network interface"},
      {"[fe80::1%4294967296]:80", "scope id \"4294967296\" is out of range"},
      {"unix:", "the Unix socket path is empty"},
      {"unix:/" + std::string(107, 'x'), "the Unix socket path is longer than 107 bytes"},
      {"unix:@" + std::string(108, 'x'), "the abstract Unix socket name is longer than 107 bytes"},
      {"UNIX:/tmp/x", "\"UNIX\" is not a numeric IPv4 address"},  // the prefix is lower case
      {"localhost:http", "\"localhost\" is not a numeric IPv4 address"},  // host first
  };
  for (const Rejected& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_EQ(SocketAddress::tryParse(c.text), std::nullopt);
    const std::string message = invalidArgumentMessage([&] { SocketAddress::parse(c.text); });
    EXPECT_TRUE(message.starts_with("weft: invalid socket address \"" + c.text + "\": "))
        << message;
    EXPECT_NE(message.find(c.reason), std::string::npos) << message;
  }
}

TEST(SocketAddressTest, MessagesEscapeUnprintableBytes) {
  const std::string text("unix:/tmp/a\0b", 13);
  EXPECT_EQ(SocketAddress::tryParse(text), std::nullopt);
  const std::string message = invalidArgumentMessage([&] { SocketAddress::parse(text); });
  EXPECT_EQ(message,
            "weft: invalid socket address \"unix:/tmp/a\\x00b\": "
            "the Unix socket path contains a NUL byte");
  // A NUL inside an IP form must not cut the text short for inet_pton.
  EXPECT_EQ(SocketAddress::tryParse(std::string("1.2.3.4\0junk:80", 15)), std::nullopt);
  EXPECT_EQ(SocketAddress::tryParse(std::string("1.2.3.4:80\0", 11)), std::nullopt);
  // Quotes and backslashes in the input are escaped too.
  EXPECT_EQ(invalidArgumentMessage([] { SocketAddress::parse("\"\\\x7f:1"); }),
            "weft: invalid socket address \"\\\"\\\\\\x7f:1\": "
            "\"\\\"\\\\\\x7f\" is not a numeric IPv4 address (resolve() looks up names)");
}

TEST(SocketAddressTest, ParsesHostAndPortSeparately) {
  EXPECT_EQ(SocketAddress::parse("127.0.0.1", 80), SocketAddress::loopbackV4(80));
  EXPECT_EQ(SocketAddress::parse("::1", 80), SocketAddress::loopbackV6(80));
  EXPECT_EQ(SocketAddress::parse("[::1]", 80), SocketAddress::loopbackV6(80));
  EXPECT_EQ(SocketAddress::parse("0.0.0.0", 65535), SocketAddress::anyV4(65535));
  EXPECT_EQ(SocketAddress::parse("::", 0), SocketAddress::anyV6(0));

  const std::vector<Rejected> cases = {
      {"", "empty host"},
      {"[]", "empty host"},
      {"localhost", "\"localhost\" is not a numeric IPv4 address"},
      {"1.2.3.4:80", "is not a numeric IPv6 address"},
      {"1.2.3", "\"1.2.3\" is not a numeric IPv4 address"},
      {"[::1", "\"[::1\" is not a numeric IPv6 address"},
      {"unix:/tmp/x", "is not a numeric IPv6 address"},
      {"fe80::1%weft_no_such_if", "names no network interface"},
  };
  for (const Rejected& c : cases) {
    SCOPED_TRACE(c.text);
    const std::string message = invalidArgumentMessage([&] { SocketAddress::parse(c.text, 80); });
    EXPECT_TRUE(message.starts_with("weft: invalid host \"" + c.text + "\": ")) << message;
    EXPECT_NE(message.find(c.reason), std::string::npos) << message;
  }
}

TEST(SocketAddressTest, UnixPathChecksItsLength) {
  const std::string longest = "/" + std::string(106, 'p');  // 107 bytes + NUL = sun_path
  const SocketAddress address = SocketAddress::unixPath(longest);
  EXPECT_EQ(address.host(), longest);
  EXPECT_EQ(address.nativeLength(), sizeof(sockaddr_un));
  EXPECT_EQ(SocketAddress::unixPath("@" + std::string(107, 'a')).nativeLength(),
            sizeof(sockaddr_un));

  const std::vector<Rejected> cases = {
      {"", "the Unix socket path is empty"},
      {longest + "p", "the Unix socket path is longer than 107 bytes"},
      {"@" + std::string(108, 'a'), "the abstract Unix socket name is longer than 107 bytes"},
      {std::string("/a\0b", 4), "the Unix socket path contains a NUL byte"},
  };
  for (const Rejected& c : cases) {
    SCOPED_TRACE(c.text);
    const std::string message = invalidArgumentMessage([&] { SocketAddress::unixPath(c.text); });
    EXPECT_TRUE(message.starts_with("weft: invalid Unix socket path \"")) << message;
    EXPECT_NE(message.find(c.reason), std::string::npos) << message;
  }
  EXPECT_NE(invalidArgumentMessage([] { SocketAddress::unixPath(std::string("/a\0b", 4)); })
                .find("\"/a\\x00b\""),
            std::string::npos);
}

TEST(SocketAddressTest, FactoriesBuildTheirAddresses) {
  EXPECT_EQ(SocketAddress::ipv4({10, 0, 0, 1}, 8080).toString(), "10.0.0.1:8080");
  EXPECT_EQ(SocketAddress::ipv6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}, 53)
                .toString(),
            "[2001:db8::2]:53");
  const SocketAddress scoped =
      SocketAddress::ipv6({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 1, 4000000001u);
  EXPECT_EQ(scoped.toString(), "[fe80::1%4000000001]:1");
  EXPECT_EQ(SocketAddress::loopbackV4(1).toString(), "127.0.0.1:1");
  EXPECT_EQ(SocketAddress::loopbackV6(2).toString(), "[::1]:2");
  EXPECT_EQ(SocketAddress::anyV4(3).toString(), "0.0.0.0:3");
  EXPECT_EQ(SocketAddress::anyV6(4).toString(), "[::]:4");
  // Network byte order in the native address.
  const SocketAddress loopback = SocketAddress::loopbackV4(0x1234);
  const auto* in = reinterpret_cast<const sockaddr_in*>(loopback.native());
  EXPECT_EQ(in->sin_port, htons(0x1234));
  EXPECT_EQ(in->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
}

TEST(SocketAddressTest, FromNativeReadsABoundIpv4Socket) {
  Fd socket(::socket(AF_INET, SOCK_STREAM, 0));
  ASSERT_GE(socket.fd, 0) << std::strerror(errno);
  const SocketAddress wanted = SocketAddress::parse("127.0.0.1:0");
  ASSERT_EQ(::bind(socket.fd, wanted.native(), wanted.nativeLength()), 0) << std::strerror(errno);

  const SocketAddress bound = localAddressOf(socket.fd);
  EXPECT_TRUE(bound.isIpv4());
  EXPECT_TRUE(bound.isLoopback());
  EXPECT_NE(bound.port(), 0);  // the kernel chose one
  EXPECT_EQ(bound.host(), "127.0.0.1");
  EXPECT_EQ(bound.nativeLength(), sizeof(sockaddr_in));
  EXPECT_EQ(bound, wanted.withPort(bound.port()));
  EXPECT_EQ(bound.toString(), "127.0.0.1:" + std::to_string(bound.port()));

  sockaddr_storage storage{};
  socklen_t length = sizeof storage;
  ASSERT_EQ(::getsockname(socket.fd, reinterpret_cast<sockaddr*>(&storage), &length), 0);
  EXPECT_EQ(SocketAddress::fromNative(reinterpret_cast<sockaddr*>(&storage), length), bound);
  // A caller that passes the whole storage's size gets the same address.
  const SocketAddress whole =
      SocketAddress::fromNative(reinterpret_cast<sockaddr*>(&storage), sizeof storage);
  EXPECT_EQ(whole, bound);
  EXPECT_EQ(whole.nativeLength(), sizeof(sockaddr_in));
}

TEST(SocketAddressTest, FromNativeReadsABoundIpv6Socket) {
  Fd socket(::socket(AF_INET6, SOCK_STREAM, 0));
  if (socket.fd < 0) GTEST_SKIP() << "no IPv6 sockets: " << std::strerror(errno);
  const SocketAddress wanted = SocketAddress::loopbackV6(0);
  if (::bind(socket.fd, wanted.native(), wanted.nativeLength()) != 0) {
    GTEST_SKIP() << "no IPv6 loopback: " << std::strerror(errno);
  }
  const SocketAddress bound = localAddressOf(socket.fd);
  EXPECT_TRUE(bound.isIpv6());
  EXPECT_TRUE(bound.isLoopback());
  EXPECT_NE(bound.port(), 0);
  EXPECT_EQ(bound.host(), "::1");
  EXPECT_EQ(bound.nativeLength(), sizeof(sockaddr_in6));
  EXPECT_EQ(bound, SocketAddress::parse("[::1]:" + std::to_string(bound.port())));
  EXPECT_EQ(SocketAddress::parse(bound.toString()), bound);
}

TEST(SocketAddressTest, FromNativeReadsBoundUnixSockets) {
  TemporaryDirectory directory;
  const std::string path = directory.file("s");
  const SocketAddress wanted = SocketAddress::unixPath(path);

  Fd listener(::socket(AF_UNIX, SOCK_STREAM, 0));
  ASSERT_GE(listener.fd, 0) << std::strerror(errno);
  ASSERT_EQ(::bind(listener.fd, wanted.native(), wanted.nativeLength()), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(listener.fd, 1), 0);
  const SocketAddress bound = localAddressOf(listener.fd);
  EXPECT_TRUE(bound.isUnix());
  EXPECT_FALSE(bound.isLoopback());
  EXPECT_EQ(bound.port(), 0);
  EXPECT_EQ(bound, wanted);
  EXPECT_EQ(bound.host(), path);
  EXPECT_EQ(bound.toString(), "unix:" + path);
  EXPECT_EQ(bound.nativeLength(), kSunPathOffset + path.size() + 1);

  // A client that never bound is unnamed: what accept() reports for it.
  Fd client(::socket(AF_UNIX, SOCK_STREAM, 0));
  ASSERT_EQ(::connect(client.fd, bound.native(), bound.nativeLength()), 0) << std::strerror(errno);
  SocketAddress peer;
  socklen_t length = SocketAddress::kNativeCapacity;
  Fd accepted(::accept(listener.fd, peer.nativeBuffer(), &length));
  ASSERT_GE(accepted.fd, 0) << std::strerror(errno);
  peer.setNativeLength(length);
  EXPECT_TRUE(peer.isUnix());
  EXPECT_EQ(peer.host(), "");
  EXPECT_EQ(peer.toString(), "unix:");
  EXPECT_EQ(peer.nativeLength(), kSunPathOffset);
  EXPECT_NE(peer, bound);
  EXPECT_EQ(SocketAddress::tryParse(peer.toString()), std::nullopt);  // as documented

  // The client's view of its peer is the listener's path.
  length = SocketAddress::kNativeCapacity;
  SocketAddress server;
  ASSERT_EQ(::getpeername(client.fd, server.nativeBuffer(), &length), 0);
  server.setNativeLength(length);
  EXPECT_EQ(server, wanted);
}

TEST(SocketAddressTest, FromNativeReadsAnAbstractUnixSocket) {
  const SocketAddress wanted =
      SocketAddress::unixPath("@weft_socket_address_test_" + std::to_string(::getpid()));
  Fd socket(::socket(AF_UNIX, SOCK_DGRAM, 0));
  ASSERT_GE(socket.fd, 0);
  ASSERT_EQ(::bind(socket.fd, wanted.native(), wanted.nativeLength()), 0) << std::strerror(errno);
  const SocketAddress bound = localAddressOf(socket.fd);
  EXPECT_EQ(bound, wanted);
  EXPECT_EQ(bound.nativeLength(), wanted.nativeLength());
  EXPECT_EQ(bound.toString(), "unix:@weft_socket_address_test_" + std::to_string(::getpid()));
}

TEST(SocketAddressTest, FromNativeRejectsLengthsThatDoNotFit) {
  sockaddr_storage storage{};
  auto* native = reinterpret_cast<sockaddr*>(&storage);
  const auto messageFor = [&](socklen_t length) {
    return invalidArgumentMessage([&] { SocketAddress::fromNative(native, length); });
  };
  storage.ss_family = AF_INET;
  EXPECT_EQ(messageFor(8),
            "weft: SocketAddress::fromNative: length 8 is too short for an AF_INET address "
            "(needs 16)");
  EXPECT_NE(messageFor(1).find("length 1 is too short to hold an address family"),
            std::string::npos);
  EXPECT_NE(messageFor(SocketAddress::kNativeCapacity + 1).find("above kNativeCapacity"),
            std::string::npos);
  storage.ss_family = AF_INET6;
  EXPECT_NE(messageFor(sizeof(sockaddr_in)).find("too short for an AF_INET6 address"),
            std::string::npos);
  storage.ss_family = AF_UNIX;
  EXPECT_NE(messageFor(sizeof(sockaddr_un) + 1).find("too long for an AF_UNIX address"),
            std::string::npos);
  storage.ss_family = AF_APPLETALK;
  EXPECT_NE(messageFor(sizeof storage).find("unsupported address family"), std::string::npos);
  storage.ss_family = AF_UNSPEC;
  EXPECT_NE(messageFor(sizeof storage).find("unsupported address family 0"), std::string::npos);
  EXPECT_NE(invalidArgumentMessage([] { SocketAddress::fromNative(nullptr, 16); })
                .find("a null address with length 16"),
            std::string::npos);
  EXPECT_EQ(SocketAddress::fromNative(nullptr, 0), SocketAddress());

  // setNativeLength() checks the same way and leaves the address empty.
  SocketAddress address = SocketAddress::loopbackV4(80);
  sockaddr_in in{};
  in.sin_family = AF_INET;
  std::memcpy(address.nativeBuffer(), &in, sizeof in);
  EXPECT_THROW(address.setNativeLength(sizeof in - 1), std::invalid_argument);
  EXPECT_EQ(address.family(), AF_UNSPEC);
  EXPECT_EQ(address.nativeLength(), 0u);
}

TEST(SocketAddressTest, FromNativeTakesAUnixPathUpToItsNul) {
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  std::memcpy(un.sun_path, "/tmp/y", 6);
  // Whole struct, exact length without the NUL, exact length with it: the same address.
  for (socklen_t length : {static_cast<socklen_t>(sizeof un), kSunPathOffset + 6,
                           kSunPathOffset + 7}) {
    SCOPED_TRACE(length);
    const SocketAddress address =
        SocketAddress::fromNative(reinterpret_cast<const sockaddr*>(&un), length);
    EXPECT_EQ(address, SocketAddress::unixPath("/tmp/y"));
    EXPECT_EQ(address.nativeLength(), kSunPathOffset + 7);
  }
  // A path that fills sun_path has no NUL; the kernel may report one.
  std::memset(un.sun_path, 'z', sizeof un.sun_path);
  const SocketAddress full =
      SocketAddress::fromNative(reinterpret_cast<const sockaddr*>(&un), sizeof un);
  EXPECT_EQ(full.host(), std::string(sizeof un.sun_path, 'z'));
  EXPECT_EQ(full.nativeLength(), sizeof un);
}

TEST(SocketAddressTest, EqualityAndHashCompareWhatMatters) {
  const std::vector<SocketAddress> distinct = {
      SocketAddress(),
      SocketAddress::parse("1.2.3.4:80"),
      SocketAddress::parse("1.2.3.4:81"),
      SocketAddress::parse("1.2.3.5:80"),
      SocketAddress::parse("[::ffff:1.2.3.4]:80"),
      SocketAddress::parse("[::1]:80"),
      SocketAddress::parse("[::1]:81"),
      SocketAddress::parse("[fe80::1]:80"),
      SocketAddress::parse("[fe80::1%4000000000]:80"),
      SocketAddress::parse("[fe80::1%4000000001]:80"),
      SocketAddress::parse("unix:/a"),
      SocketAddress::parse("unix:/a/"),
      SocketAddress::parse("unix:@/a"),
      SocketAddress::parse("unix:@a"),
      SocketAddress::parse("unix:a"),
  };
  std::unordered_set<SocketAddress> set;
  const std::hash<SocketAddress> hash;
  for (std::size_t i = 0; i < distinct.size(); ++i) {
    SCOPED_TRACE(distinct[i]);
    for (std::size_t j = 0; j < distinct.size(); ++j) {
      EXPECT_EQ(distinct[i] == distinct[j], i == j) << distinct[j];
    }
    const SocketAddress copy = distinct[i];  // equal objects hash equally
    EXPECT_EQ(hash(copy), hash(distinct[i]));
    if (!distinct[i].toString().empty()) {
      const SocketAddress reparsed = SocketAddress::parse(distinct[i].toString());
      EXPECT_EQ(reparsed, distinct[i]);
      EXPECT_EQ(hash(reparsed), hash(distinct[i]));
    }
    EXPECT_TRUE(set.insert(distinct[i]).second);
  }
  EXPECT_EQ(set.size(), distinct.size());
  // Everything operator== compares feeds the hash (a 64-bit collision here would be news).
  std::unordered_set<std::size_t> hashes;
  for (const SocketAddress& address : distinct) hashes.insert(hash(address));
  EXPECT_EQ(hashes.size(), distinct.size());
  EXPECT_EQ(set.count(SocketAddress::parse("[::1]:80")), 1u);

  // The IPv6 flow label is not part of the address.
  sockaddr_in6 in6;
  std::memcpy(&in6, SocketAddress::loopbackV6(80).native(), sizeof in6);
  in6.sin6_flowinfo = htonl(0x12345);
  const SocketAddress labelled =
      SocketAddress::fromNative(reinterpret_cast<const sockaddr*>(&in6), sizeof in6);
  EXPECT_EQ(labelled, SocketAddress::loopbackV6(80));
  EXPECT_EQ(hash(labelled), hash(SocketAddress::loopbackV6(80)));
}

TEST(SocketAddressTest, WithPortChangesOnlyThePort) {
  const SocketAddress v4 = SocketAddress::parse("10.1.2.3:80");
  EXPECT_EQ(v4.withPort(443), SocketAddress::parse("10.1.2.3:443"));
  EXPECT_EQ(v4.port(), 80);  // unchanged
  const SocketAddress v6 = SocketAddress::parse("[fe80::1%4000000000]:80");
  EXPECT_EQ(v6.withPort(0).toString(), "[fe80::1%4000000000]:0");

  for (const SocketAddress& notIp : {SocketAddress::unixPath("/tmp/x"), SocketAddress()}) {
    SCOPED_TRACE(notIp);
    try {
      (void)notIp.withPort(1);
      ADD_FAILURE() << "did not throw";
    } catch (const std::invalid_argument&) {
      ADD_FAILURE() << "std::invalid_argument is not a misuse";
    } catch (const std::logic_error& error) {
      EXPECT_TRUE(std::string_view(error.what()).starts_with("weft: SocketAddress::withPort()"))
          << error.what();
      if (notIp.isUnix()) {
        EXPECT_NE(std::string_view(error.what()).find("unix:/tmp/x"), std::string_view::npos);
      }
    }
  }
}

TEST(SocketAddressTest, IsLoopbackKnowsTheLoopbackRanges) {
  const std::vector<std::pair<std::string, bool>> cases = {
      {"127.0.0.1:1", true},         {"127.255.255.254:1", true},  {"126.255.255.255:1", false},
      {"128.0.0.1:1", false},        {"0.0.0.0:1", false},         {"[::1]:1", true},
      {"[::]:1", false},             {"[::2]:1", false},           {"[::ffff:127.0.0.1]:1", true},
      {"[::ffff:127.9.8.7]:1", true}, {"[::ffff:10.0.0.1]:1", false}, {"[::127.0.0.1]:1", false},
      {"[1::1]:1", false},           {"unix:/tmp/x", false},
  };
  for (const auto& [text, loopback] : cases) {
    EXPECT_EQ(SocketAddress::parse(text).isLoopback(), loopback) << text;
  }
}

TEST(SocketAddressTest, StreamsItsText) {
  std::ostringstream out;
  out << SocketAddress::parse("[::1]:8080") << " " << SocketAddress::unixPath("@x") << " "
      << SocketAddress::loopbackV4(1) << "|" << SocketAddress() << "|";
  EXPECT_EQ(out.str(), "[::1]:8080 unix:@x 127.0.0.1:1||");
}

}  // namespace
}  // namespace weft
