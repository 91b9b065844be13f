#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <utility>

#include "weft/stackful/detail/fiber_local_storage.h"

namespace weft {

namespace detail {
// The FiberLocal values of the running fiber, or of the calling thread outside fibers.
// Not inline (fiber_local.cc): it reads a thread_local, and a fiber may have moved to
// another thread since its caller last looked.
FiberLocalStorage& currentFiberLocalStorage();
// A key no other FiberLocal ever had. Thread-safe.
std::uint64_t newFiberLocalKey() noexcept;
}  // namespace detail

// FiberLocal<T>: a variable with one instance per fiber, which follows the fiber from
// thread to thread (where a thread_local would not: a fiber started by spawnFiber may
// continue on another worker after each await).
//
// Semantics: get() returns the running fiber's instance, created on its first use in that
// fiber (a copy of the initial value given to the constructor, or a value-initialized T)
// and destroyed when the fiber ends (finishes, or is destroyed). Outside fibers, get()
// returns the calling thread's instance (destroyed at thread exit), so code that runs
// both on plain threads and in fibers can use it.
//
// Preconditions: the FiberLocal object outlives its uses (instances already created stay
// owned by their fibers until those end).
// Errors: get() throws std::bad_alloc, and whatever T's construction throws.
// Thread safety: each instance belongs to one fiber (or thread); the FiberLocal object may
// be shared by all.
//
// Example:
//   weft::FiberLocal<std::string> requestId;
//   weft::spawnFiber(&pool, [&] {
//     *requestId = "req-17";
//     weft::await(handle());       // may come back on another thread
//     log(*requestId);             // still "req-17"
//   });
template <class T>
class FiberLocal {
 public:
  FiberLocal()
    requires std::default_initializable<T>
      : key_(detail::newFiberLocalKey()) {}
  explicit FiberLocal(T initial)
    requires std::copy_constructible<T>
      : key_(detail::newFiberLocalKey()), initial_(std::move(initial)) {}
  FiberLocal(const FiberLocal&) = delete;
  FiberLocal& operator=(const FiberLocal&) = delete;

  T& get() {
    detail::FiberLocalStorage& storage = detail::currentFiberLocalStorage();
    if (void* value = storage.find(key_)) return *static_cast<T*>(value);
    T* value = initial_.has_value() ? new T(*initial_) : new T();
    storage.add(key_, value, [](void* p) { delete static_cast<T*>(p); });
    return *value;
  }
  T& operator*() { return get(); }
  T* operator->() { return &get(); }

 private:
  const std::uint64_t key_;
  std::optional<T> initial_;
};

}  // namespace weft
