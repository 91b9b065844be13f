// detail::IoRequest and describe(): the one place that turns the description of an I/O
// operation into the IoOperation an awaiter submits. What it sets, what it leaves at
// IoOperation's defaults, the closed-socket check, and that the awaiters built on it
// hold nothing more than the fields they had before it.

#include "weft/io/detail/io_request.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <system_error>

#include "weft/io/detail/datagram_ops.h"
#include "weft/io/detail/whole_transfer.h"
#include "weft/io/io_awaiter.h"
#include "weft/io/io_operation_awaitable.h"
#include "weft/io/socket_address.h"

namespace weft::detail {
namespace {

// The four small fields share the first words: no holes before the pointers.
static_assert(offsetof(IoRequest, buffer) == 4 * sizeof(int));
static_assert(sizeof(IoRequest) == offsetof(IoRequest, timeoutNs) + sizeof(std::int64_t));

// The awaitables and awaiters that describe through it hold only their own fields.
static_assert(sizeof(IoOperationAwaitable) == sizeof(const char*) + sizeof(IoRequest));
static_assert(sizeof(IoOperationAwaitable::Awaiter) == sizeof(IoAwaiter) + sizeof(const char*));
static_assert(sizeof(WholeTransferAwaitable::Awaiter) ==
              sizeof(IoAwaiter) + 3 * sizeof(const char*) + sizeof(std::size_t));
static_assert(sizeof(OneBufferMessage) == sizeof(iovec) + sizeof(msghdr));
static_assert(sizeof(SendMessageAwaitable::Awaiter) ==
              sizeof(IoAwaiter) + sizeof(const char*) + sizeof(SocketAddress) +
                  sizeof(OneBufferMessage));

TEST(IoRequestTest, DescribeSetsEveryField) {
  char data[4];
  sockaddr address{};
  msghdr message{};
  IoOperation op;
  describe(op, {.opcode = IoOpcode::kWriteAt,
                .fd = 7,
                .flags = 3,
                .addressLength = 16,
                .buffer = data,
                .length = sizeof data,
                .offset = 4096,
                .address = &address,
                .message = &message,
                .timeoutNs = 1000});
  EXPECT_EQ(op.opcode, IoOpcode::kWriteAt);
  EXPECT_EQ(op.fd, 7);
  EXPECT_EQ(op.flags, 3);
  EXPECT_EQ(op.addressLength, 16u);
  EXPECT_EQ(op.buffer, data);
  EXPECT_EQ(op.length, sizeof data);
  EXPECT_EQ(op.offset, 4096u);
  EXPECT_EQ(op.address, &address);
  EXPECT_EQ(op.message, &message);
  EXPECT_EQ(op.timeoutNs, 1000);
}

TEST(IoRequestTest, FieldsLeftOutAreIoOperationsDefaults) {
  char data[4];
  IoOperation op;
  op.flags = 9;  // from an earlier description: a new one sets every field
  op.timeoutNs = 5;
  describe(op, {.opcode = IoOpcode::kSend, .fd = 3, .buffer = data, .length = 2});
  const IoOperation fresh;
  EXPECT_EQ(op.flags, fresh.flags);
  EXPECT_EQ(op.addressLength, fresh.addressLength);
  EXPECT_EQ(op.offset, fresh.offset);
  EXPECT_EQ(op.address, fresh.address);
  EXPECT_EQ(op.message, fresh.message);
  EXPECT_EQ(op.timeoutNs, fresh.timeoutNs);
  EXPECT_EQ(op.buffer, data);
  EXPECT_EQ(op.length, 2u);
}

TEST(IoRequestTest, DescribeOpenRefusesAClosedSocketAndLeavesTheOperation) {
  IoOperation op;
  try {
    describeOpen(op, {.opcode = IoOpcode::kSend, .fd = -1, .timeoutNs = 10}, "write to a test");
    FAIL() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), EBADF);
    EXPECT_NE(std::strstr(e.what(), "write to a test"), nullptr) << e.what();
  }
  const IoOperation fresh;
  EXPECT_EQ(op.opcode, fresh.opcode);
  EXPECT_EQ(op.fd, fresh.fd);
  EXPECT_EQ(op.timeoutNs, fresh.timeoutNs);
}

TEST(IoRequestTest, DescribeOpenDescribesAnOpenOne) {
  IoOperation op;
  describeOpen(op, {.opcode = IoOpcode::kPollReadable, .fd = 0}, "wait");
  EXPECT_EQ(op.opcode, IoOpcode::kPollReadable);
  EXPECT_EQ(op.fd, 0);
}

TEST(IoRequestTest, OneBufferMessagePointsAtTheBufferAndTheName) {
  char data[8];
  sockaddr_storage name{};
  OneBufferMessage message;
  msghdr* header =
      message.point(data, sizeof data, reinterpret_cast<sockaddr*>(&name), sizeof name);
  ASSERT_EQ(header, &message.header);
  EXPECT_EQ(header->msg_name, &name);
  EXPECT_EQ(header->msg_namelen, sizeof name);
  ASSERT_EQ(header->msg_iovlen, 1u);
  EXPECT_EQ(header->msg_iov, &message.part);
  EXPECT_EQ(message.part.iov_base, data);
  EXPECT_EQ(message.part.iov_len, sizeof data);
  EXPECT_EQ(header->msg_control, nullptr);
  EXPECT_EQ(header->msg_flags, 0);
}

}  // namespace
}  // namespace weft::detail
