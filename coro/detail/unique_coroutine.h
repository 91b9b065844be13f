#pragma once

#include <coroutine>
#include <memory>

namespace weft::detail {

// Destroys the frame of a coroutine whose promise is Promise: the deleter of
// UniqueCoroutine, whose pointer is the coroutine's handle.
template <class Promise>
struct DestroyCoroutine {
  using pointer = std::coroutine_handle<Promise>;
  void operator()(pointer handle) const noexcept { handle.destroy(); }
};

// The sole owner of a coroutine frame: destroys it when destroyed, reset or assigned over,
// unless release()d first; get() is the handle. Move-only, the size of a handle. What
// Generator and AsyncGenerator hold.
template <class Promise>
using UniqueCoroutine = std::unique_ptr<Promise, DestroyCoroutine<Promise>>;

}  // namespace weft::detail
