#pragma once

#include <sys/socket.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>

#include "weft/coro/cancellation.h"
#include "weft/executors/executor.h"
#include "weft/executors/io_loop.h"
#include "weft/io/io_awaiter.h"
#include "weft/io/io_operation_awaitable.h"

namespace weft::detail {

// IoOpcode::kReceiveLent as an awaitable: resumes with the bytes received in a buffer the
// loop lends (empty at the end of the stream). Failures as IoOperationAwaitable's.
class ReceiveLentAwaitable : public IoAwaitable<ReceiveLentAwaitable> {
 public:
  ReceiveLentAwaitable(const char* what, int fd, std::int64_t timeoutNs) noexcept
      : operation_(IoOperationAwaitable(what, IoOpcode::kReceiveLent, fd).timeout(timeoutNs)) {}

  class Awaiter : public IoOperationAwaitable::Awaiter {
   public:
    Awaiter(const ReceiveLentAwaitable& a, Executor* executor, const CancellationToken& token)
        : IoOperationAwaitable::Awaiter(a.operation_, executor, token) {}

    LentBuffer await_resume() {
      IoOperationAwaitable::Awaiter::await_resume();
      return std::move(operation().lent);
    }
  };

 private:
  IoOperationAwaitable operation_;
};

}  // namespace weft::detail
