#include "weft/io/signal_set.h"

#include "weft/io/signal.h"

namespace weft {

namespace {

// Every number checked before any handler is installed (signalBit throws for a bad one).
std::uint64_t maskOf(std::initializer_list<int> signals) {
  std::uint64_t mask = 0;
  for (int signal : signals) mask |= detail::signalBit(signal);
  return mask;
}

}  // namespace

SignalSet::SignalSet(std::initializer_list<int> signals) : mask_(maskOf(signals)) {
  detail::installSignalHandlers(mask_);
}

Lazy<int> SignalSet::wait() const { co_return co_await detail::SignalWait{mask_}; }

}  // namespace weft
