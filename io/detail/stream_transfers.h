#pragma once

#include <cstddef>
#include <span>

#include "weft/coro/lazy.h"
#include "weft/io/incomplete_transfer.h"
#include "weft/io/tcp_stream.h"

namespace weft::detail {

// readExactly and writeAll of a stream as loops over its `read(span)` / `write(span)`
// (anything a Lazy can await that yields the bytes moved): TlsStream's. (TcpStream's are
// one operation each: detail::WholeTransferAwaitable.) They keep IncompleteTransfer's rule
// as that does: a failure after n >= 1 bytes throws IncompleteTransfer(operation, n, size)
// with the failure as its cause; with nothing moved the failure propagates unchanged.
// readExactly throws EndOfStream(n) when `read` returns 0 first.

template <class Read>
Lazy<void> readExactlyWith(std::span<std::byte> buffer, const char* operation, Read read) {
  std::size_t done = 0;
  while (done < buffer.size()) {
    std::size_t n;
    try {
      n = co_await read(buffer.subspan(done));
    } catch (...) {
      // The bytes already read are gone from the stream: say how many. The EndOfStream
      // below is thrown outside this block: it has its own count.
      if (done == 0) throw;
      throw IncompleteTransfer(operation, done, buffer.size());
    }
    if (n == 0) throw EndOfStream(done);
    done += n;
  }
}

template <class Write>
Lazy<void> writeAllWith(std::span<const std::byte> buffer, const char* operation, Write write) {
  std::size_t done = 0;
  while (done < buffer.size()) {
    try {
      done += co_await write(buffer.subspan(done));
    } catch (...) {
      // The bytes already sent cannot be taken back: say how many, so that a retry sends
      // only the rest.
      if (done == 0) throw;
      throw IncompleteTransfer(operation, done, buffer.size());
    }
  }
}

}  // namespace weft::detail
