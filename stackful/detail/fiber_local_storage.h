#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace weft::detail {

// The FiberLocal values of one fiber (or, outside fibers, of one thread): a small vector
// of (key, value, destroyer), searched linearly (a program has few FiberLocals, and the
// most recently added is found first). Destroys its values when the fiber ends.
class FiberLocalStorage {
 public:
  FiberLocalStorage() = default;
  FiberLocalStorage(const FiberLocalStorage&) = delete;
  FiberLocalStorage& operator=(const FiberLocalStorage&) = delete;
  ~FiberLocalStorage() {
    // Newest first, like locals going out of scope.
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) it->destroy(it->value);
  }

  // The value stored under `key`, nullptr if none.
  void* find(std::uint64_t key) const noexcept {
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
      if (it->key == key) return it->value;
    }
    return nullptr;
  }
  // Stores `value` (owned from now on, freed with `destroy`) under a new `key`. On
  // failure (std::bad_alloc) the value is destroyed and the exception propagates.
  void add(std::uint64_t key, void* value, void (*destroy)(void*)) {
    try {
      entries_.push_back(Entry{key, value, destroy});
    } catch (...) {
      destroy(value);
      throw;
    }
  }

 private:
  struct Entry {
    std::uint64_t key;
    void* value;
    void (*destroy)(void*);
  };
  std::vector<Entry> entries_;
};

}  // namespace weft::detail
