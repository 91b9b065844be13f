#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "weft/coro/channel.h"
#include "weft/coro/detail/channel_core.h"
#include "weft/coro/detail/channel_waiter.h"
#include "weft/coro/sleep.h"

// The cases of weft::select() (coro/select.h): what each kind of case is, and how the
// select awaiter (coro/detail/select_awaiter.h) tries it, links it and unlinks it.

namespace weft::detail {

// The `default:` of a Go select: chosen when no other case is ready.
struct SelectDefaultCase {};

// The `case <-time.After(d):` of a Go select: chosen once `after` has passed since the
// select found no case ready (clampedDuration: zero is at once, duration::max() never).
struct SelectTimeoutCase {
  SleepClock::duration after;
};

// One case of a select while it runs: how to try it under its channel's lock, how to
// link and unlink its node, and what it produces. Specialised per case kind.
template <class Case>
class SelectCaseOp;

template <class T, bool kSwitchable>
class SelectCaseOp<ChannelReceiveCase<T, kSwitchable>> {
 public:
  using Result = std::optional<T>;  // empty: the channel is closed and drained
  static constexpr bool kHasChannel = true;
  static constexpr bool kCanBeDisabled = kSwitchable;

  explicit SelectCaseOp(ChannelReceiveCase<T, kSwitchable>&& c) noexcept
      : channel_(c.channel), enabled_(c.enabled) {}

  bool enabled() const noexcept { return enabled_.on; }
  ChannelLock* lock() const noexcept { return &channel_->lock(); }
  ChannelOpResult tryLocked(ChannelWaiter*& wake) noexcept {
    return channel_->tryReceiveLocked(value_, wake);
  }
  void enqueueLocked(SelectState* select, std::uint32_t index) noexcept {
    node_.slot = &value_;
    node_.select = select;
    node_.caseIndex = index;
    node_.handle = select->handle;  // whom a claim through this node resumes
    node_.executor = select->executor;
    channel_->enqueueReceiverLocked(&node_);
  }
  void removeLocked() noexcept { channel_->removeReceiverLocked(&node_); }
  void setClosed() noexcept {}
  Result result() noexcept { return std::move(value_); }

 private:
  ChannelCore<T>* channel_;
  [[no_unique_address]] CaseSwitch<kSwitchable> enabled_;
  ChannelWaiter node_;
  std::optional<T> value_;
};

template <class T, bool kSwitchable>
class SelectCaseOp<ChannelSendCase<T, kSwitchable>> {
 public:
  using Result = std::monostate;
  static constexpr bool kHasChannel = true;
  static constexpr bool kCanBeDisabled = kSwitchable;

  explicit SelectCaseOp(ChannelSendCase<T, kSwitchable>&& c) noexcept(
      std::is_nothrow_move_constructible_v<T>)
      : case_(std::move(c)) {}

  bool enabled() const noexcept { return case_.enabled.on; }
  ChannelLock* lock() const noexcept { return &case_.channel->lock(); }
  ChannelOpResult tryLocked(ChannelWaiter*& wake) {
    return case_.channel->trySendLocked(*case_.value(), wake);
  }
  void enqueueLocked(SelectState* select, std::uint32_t index) noexcept {
    node_.slot = case_.value();
    node_.select = select;
    node_.caseIndex = index;
    node_.handle = select->handle;  // whom a claim through this node resumes
    node_.executor = select->executor;
    case_.channel->enqueueSenderLocked(&node_);
  }
  void removeLocked() noexcept { case_.channel->removeSenderLocked(&node_); }
  void setClosed() noexcept { node_.status = WaiterStatus::kClosed; }
  // Go panics when a select sends on a closed channel; weft throws.
  Result result() const {
    if (node_.status == WaiterStatus::kClosed) throwSendOnClosed();
    return {};
  }

 private:
  ChannelSendCase<T, kSwitchable> case_;
  ChannelWaiter node_;
};

// What the cases without a channel (default, timeout) have in common: the awaiter never
// tries, links or disables them, and they produce nothing.
struct SelectCaseWithoutChannel {
  using Result = std::monostate;
  static constexpr bool kHasChannel = false;
  static constexpr bool kCanBeDisabled = false;
  Result result() const noexcept { return {}; }
};

template <>
class SelectCaseOp<SelectDefaultCase> : public SelectCaseWithoutChannel {
 public:
  explicit SelectCaseOp(SelectDefaultCase) noexcept {}
};

template <>
class SelectCaseOp<SelectTimeoutCase> : public SelectCaseWithoutChannel {
 public:
  explicit SelectCaseOp(SelectTimeoutCase c) noexcept : after(c.after) {}

  SleepClock::duration after;
};

// The state of the calling thread's generator below; 0 until its first use, which seeds
// it from its address and the clock. exchangeSelectRandomState (coro/select.h) sets it.
inline constinit thread_local std::uint64_t tlSelectRandomState = 0;

// A per-thread xorshift64* generator: select's fair choice among ready cases needs
// cheap randomness, not quality.
inline std::uint64_t selectRandom() noexcept {
  std::uint64_t& state = tlSelectRandomState;
  if (state == 0) [[unlikely]] {
    state = (reinterpret_cast<std::uintptr_t>(&state) * 0x9E3779B97F4A7C15ull) ^
            static_cast<std::uint64_t>(
                std::chrono::steady_clock::now().time_since_epoch().count()) ^
            1u;
  }
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return state * 0x2545F4914F6CDD1Dull;
}

template <class Case>
inline constexpr bool kIsSelectCase = false;
template <class T, bool kSwitchable>
inline constexpr bool kIsSelectCase<ChannelReceiveCase<T, kSwitchable>> = true;
template <class T, bool kSwitchable>
inline constexpr bool kIsSelectCase<ChannelSendCase<T, kSwitchable>> = true;
template <>
inline constexpr bool kIsSelectCase<SelectDefaultCase> = true;
template <>
inline constexpr bool kIsSelectCase<SelectTimeoutCase> = true;

}  // namespace weft::detail
