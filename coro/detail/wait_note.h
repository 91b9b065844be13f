#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace weft::detail {

// How a task dump (weft::dumpTasks, gdb's `weft tasks`) names what a suspended coroutine
// or fiber waits on: appends it to `out`, given the awaiter (alive while it waits). An
// awaiter describes itself with a member `void describeWait(std::string& out) const`
// ("Mutex::lock", "sleep, due in 1.200 s"); any other awaiter is named by its type. A
// dump calls it on its own thread while the wait cannot end (whoever resumes the waiter
// waits for the dump: coro/detail/dump_gate.h), so it may read the awaiter and what the
// awaiter points to, and must be quick: no lock, no blocking.
using DescribeWait = void (*)(const void* awaiter, std::string& out);

// The name of type T, from the compiler (no RTTI needed).
template <class T>
constexpr std::string_view typeNameOf() noexcept {
  std::string_view name = __PRETTY_FUNCTION__;  // "... [with T = X; ...]" / "... [T = X]"
  const std::size_t begin = name.find("T = ");
  if (begin == std::string_view::npos) return name;
  name.remove_prefix(begin + 4);
  return name.substr(0, name.find_first_of(";]"));
}

template <class Awaiter>
void describeAwaiter(const void* awaiter, std::string& out) {
  if constexpr (requires(const Awaiter& a, std::string& s) { a.describeWait(s); }) {
    static_cast<const Awaiter*>(awaiter)->describeWait(out);
  } else {
    out += typeNameOf<Awaiter>();
  }
}

// Appends `what` and the address of the object a wait is on: "Mutex::lock (0x5616f2a0)",
// the address gdb shows too.
inline void appendWait(std::string& out, const char* what, const void* object) {
  char address[32];
  std::snprintf(address, sizeof(address), " (%p)", object);
  out += what;
  out += address;
}

// What a suspended coroutine or fiber waits on: an awaiter and how to describe it. Lives
// beside the awaiter (in the coroutine's frame, on the fiber's stack), so that a note is
// published with one pointer store and read without tearing.
struct WaitNote {
  DescribeWait describe = nullptr;
  const void* awaiter = nullptr;
};

}  // namespace weft::detail
