#pragma once

#include <type_traits>
#include <utility>

#include "weft/coro/detail/lazy_promise.h"

namespace weft::detail {

// What `co_await` of a finished Lazy or Task returns: the value the coroutine returned,
// moved out of its promise (nothing for void, the reference for T&), or what it threw,
// rethrown.
template <class T>
T takeResult(LazyPromise<T>& promise) {
  if constexpr (std::is_void_v<T>) {
    promise.result_.value();
  } else {
    return std::move(promise.result_).value();
  }
}

}  // namespace weft::detail
