#include "weft/io/detail/whole_transfer.h"

#include <cerrno>
#include <string>
#include <system_error>

#include "weft/io/incomplete_transfer.h"
#include "weft/io/tcp_stream.h"

namespace weft::detail {

void throwStoppedWhole(const char* operation, std::size_t done, std::size_t size) {
  // The bytes already moved cannot be taken back: say how many, so that a writer sends
  // only the rest and a reader goes on from there.
  if (done == 0) throw;
  throw IncompleteTransfer(operation, done, size);
}

void throwEndedWhole(const char* operation, const char* what, IoOpcode opcode, std::size_t done,
                     std::size_t size) {
  if (opcode == IoOpcode::kReceive) throw EndOfStream(done);
  try {
    throw std::system_error(EIO, std::system_category(),
                            std::string("weft: ") + what + " sent nothing");
  } catch (...) {
    throwStoppedWhole(operation, done, size);
  }
}

}  // namespace weft::detail
