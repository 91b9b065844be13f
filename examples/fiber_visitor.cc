// A fiber suspending deep inside a third-party library's own call stack.
//
// legacy::walk() is a synchronous, recursive tree walk that calls a visitor on every
// node; legacy::lookup() is an asynchronous service with a callback API, answering on a
// thread of its own. The visitor needs a lookup per node. A Lazy cannot help here: it can
// only suspend in its own body, and walk() is not a coroutine. A fiber can: weft::await()
// parks the whole stack, walk()'s frames included, until the lookup answers, while the
// pool's threads run other work.
#include <chrono>
#include <coroutine>
#include <cstdio>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include <weft/coro/sync_await.h>
#include <weft/executors/thread_pool.h>
#include <weft/stackful/await.h>
#include <weft/stackful/spawn_fiber.h>

namespace legacy {

struct Node {
  int key;
  std::vector<Node> children;
};

// Calls `visit` on every node, depth first, from inside its own recursion.
void walk(const Node& node, const std::function<void(const Node&)>& visit) {
  visit(node);
  for (const Node& child : node.children) walk(child, visit);
}

// Answers key * 10 on a thread of its own, a millisecond later.
void lookup(int key, std::function<void(int)> done) {
  std::thread([key, done = std::move(done)] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    done(key * 10);
  }).detach();
}

}  // namespace legacy

// The bridge from the callback API to C++20: an ordinary awaitable.
struct Lookup {
  int key;
  int value = 0;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> waiter) {
    legacy::lookup(key, [this, waiter](int v) {
      value = v;
      waiter.resume();  // on the service's thread; weft brings the fiber back to the pool
    });
  }
  int await_resume() const noexcept { return value; }
};

int main() {
  const legacy::Node tree{1, {{2, {{4, {}}, {5, {}}}}, {3, {{6, {}}}}}};
  weft::ThreadPool pool(2);

  auto sum = weft::spawnFiber(&pool, [&] {
    int total = 0;
    bool onPool = true;
    legacy::walk(tree, [&](const legacy::Node& node) {
      total += weft::await(Lookup{node.key});  // parks the fiber inside walk()
      onPool = onPool && pool.currentThreadInExecutor();
    });
    return onPool ? total : -1;
  });

  const int total = weft::syncAwait(std::move(sum));
  std::printf("sum of the lookups of 6 nodes, each awaited inside legacy::walk(): %d\n", total);
  return total == 210 ? 0 : 1;
}
