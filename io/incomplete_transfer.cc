#include "weft/io/incomplete_transfer.h"

#include <exception>
#include <stdexcept>
#include <string>

namespace weft {

namespace {

// The message of an IncompleteTransfer whose cause is the exception being handled.
// Errors: std::logic_error when none is (see the constructor's precondition).
std::string describe(std::string_view operation, std::size_t transferred, std::size_t requested) {
  std::string message = "weft: ";
  message.append(operation);
  message += " stopped after " + std::to_string(transferred) + " of " +
             std::to_string(requested) + " bytes: ";
  const std::exception_ptr cause = std::current_exception();
  if (!cause) {
    throw std::logic_error(
        "weft: IncompleteTransfer was constructed outside a catch block: it takes the "
        "exception being handled as its cause (" +
        message + "no cause)");
  }
  try {
    std::rethrow_exception(cause);
  } catch (const std::exception& e) {
    message += e.what();
  } catch (...) {
    message += "an exception of a type not derived from std::exception";
  }
  // Leaving the handler above makes `cause` the exception being handled again, for the
  // std::nested_exception base that the constructor builds next.
  return message;
}

}  // namespace

IncompleteTransfer::IncompleteTransfer(std::string_view operation, std::size_t bytesTransferred,
                                       std::size_t bytesRequested)
    : std::runtime_error(describe(operation, bytesTransferred, bytesRequested)),
      std::nested_exception(),
      bytesTransferred_(bytesTransferred),
      bytesRequested_(bytesRequested) {}

}  // namespace weft
