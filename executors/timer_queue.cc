#include "weft/executors/detail/timer_queue.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#if defined(__linux__)
#include <pthread.h>
#include <sys/prctl.h>
#endif

namespace weft::detail {

TimerQueue::TimerQueue(std::string threadName, Deliver deliver, void* context)
    : threadName_(std::move(threadName)), deliver_(deliver), context_(context) {}

TimerQueue::~TimerQueue() { stop(/*deliverPending=*/false); }

bool TimerQueue::earlier(const TimerEntry* a, const TimerEntry* b) const noexcept {
  if (a->deadline != b->deadline) return a->deadline < b->deadline;
  return a->sequence < b->sequence;
}

void TimerQueue::place(std::size_t index, TimerEntry* entry) noexcept {
  heap_[index] = entry;
  entry->heapIndex = index;
}

void TimerQueue::siftUp(std::size_t index) noexcept {
  TimerEntry* entry = heap_[index];
  while (index > 0) {
    const std::size_t parent = (index - 1) / 2;
    if (!earlier(entry, heap_[parent])) break;
    place(index, heap_[parent]);
    index = parent;
  }
  place(index, entry);
}

void TimerQueue::siftDown(std::size_t index) noexcept {
  TimerEntry* entry = heap_[index];
  const std::size_t n = heap_.size();
  for (;;) {
    std::size_t child = 2 * index + 1;
    if (child >= n) break;
    if (child + 1 < n && earlier(heap_[child + 1], heap_[child])) ++child;
    if (!earlier(heap_[child], entry)) break;
    place(index, heap_[child]);
    index = child;
  }
  place(index, entry);
}

void TimerQueue::removeAt(std::size_t index) noexcept {
  TimerEntry* removed = heap_[index];
  TimerEntry* last = heap_.back();
  heap_.pop_back();
  removed->heapIndex = TimerEntry::kNotQueued;
  if (removed == last) return;
  place(index, last);
  // The moved entry may belong above or below its new slot.
  if (index > 0 && earlier(last, heap_[(index - 1) / 2])) {
    siftUp(index);
  } else {
    siftDown(index);
  }
}

bool TimerQueue::add(TimerEntry& entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopped_) return false;
  heap_.reserve(heap_.size() + 1);  // may throw: nothing changed yet
  // An entry that never expires (deadline time_point::max(): a guard that only waits for
  // stop() or cancel(), as blocking() and signal() arm) needs no thread: the first entry
  // with a deadline starts it.
  if (!thread_.joinable() && entry.deadline != TimerEntry::Clock::time_point::max()) {
    thread_ = std::thread([this] { run(); });  // may throw likewise
#if defined(__linux__)
    // Named from here rather than by the thread itself, so the name is visible as soon as
    // add() returns (a debugger or /proc never sees an unnamed timer thread).
    pthread_setname_np(thread_.native_handle(), threadName_.substr(0, 15).c_str());
#endif
  }
  entry.shutDown = false;
  entry.dropped = false;
  entry.sequence = nextSequence_++;
  heap_.push_back(&entry);
  siftUp(heap_.size() - 1);
  // Woken only for a deadline earlier than the one it waits for: a timer armed after one
  // was cancelled (withTimeout around work that finished) is usually later, and the
  // thread, waking for the cancelled one's deadline, finds it then. So a steady stream of
  // armed-and-cancelled timers costs no thread switch per timer.
  if (entry.deadline < waitingUntil_) {
    waitingUntil_ = TimerEntry::Clock::time_point::min();  // one notification is enough
    wake_.notify_one();
  }
  return true;
}

bool TimerQueue::cancel(TimerEntry& entry) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (entry.heapIndex == TimerEntry::kNotQueued) return false;
  // No wake-up: if it was the earliest, the thread wakes at its deadline, finds a later
  // one and waits again.
  removeAt(entry.heapIndex);
  return true;
}

std::size_t TimerQueue::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return heap_.size();
}

bool TimerQueue::threadStarted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return thread_.joinable();
}

void TimerQueue::run() {
#if defined(__linux__)
  // Linux lets a sleeping thread wake up to 50 us late ("timer slack") to batch wake-ups.
  // This thread exists to wake on time, so it asks for 1 ns. Failure only costs accuracy.
  (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopped_) {
    if (heap_.empty()) {
      waitingUntil_ = TimerEntry::Clock::time_point::max();
      wake_.wait(lock);
      waitingUntil_ = TimerEntry::Clock::time_point::min();
      continue;
    }
    const TimerEntry::Clock::time_point deadline = heap_.front()->deadline;
    if (deadline > TimerEntry::Clock::now()) {
      waitingUntil_ = deadline;
      // time_point::max() is "never": wait without a timeout (libstdc++ would overflow
      // converting it to a timespec).
      if (deadline == TimerEntry::Clock::time_point::max()) {
        wake_.wait(lock);
      } else {
        wake_.wait_until(lock, deadline);
      }
      waitingUntil_ = TimerEntry::Clock::time_point::min();
      continue;
    }
    TimerEntry* entry = heap_.front();
    removeAt(0);
    // Delivered without the lock: `deliver` may resume a coroutine that arms or cancels
    // timers. Once out of the heap, cancel() returns false, so this is the only delivery.
    lock.unlock();
    deliver_(context_, *entry);
    lock.lock();
  }
}

void TimerQueue::stop(bool deliverPending) noexcept {
  std::lock_guard<std::mutex> stopLock(stopMutex_);
  if (joined_) return;
  std::vector<TimerEntry*> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
    pending.swap(heap_);
    // Under the lock, which cancel() takes: an owner whose cancel() returns false from
    // now on sees whether its entry was dropped. heapIndex likewise, so that cancel()
    // (which reads it under the lock) returns false for every entry taken here.
    for (TimerEntry* entry : pending) {
      entry->heapIndex = TimerEntry::kNotQueued;
      entry->dropped = !deliverPending;
    }
    wake_.notify_one();
  }
  if (thread_.joinable()) {
    if (thread_.get_id() == std::this_thread::get_id()) {
      // Called from code the timer thread is running (a coroutine resumed there calling
      // exit(), say): it cannot join itself. It exits its loop once that code returns.
      thread_.detach();
    } else {
      thread_.join();
    }
  }
  joined_ = true;
  // Deadline order, so the flushed timers are seen in the order they would have fired.
  std::sort(pending.begin(), pending.end(),
            [this](const TimerEntry* a, const TimerEntry* b) { return earlier(a, b); });
  if (deliverPending) {
    for (TimerEntry* entry : pending) {
      entry->shutDown = true;
      deliver_(context_, *entry);
    }
  }
}

namespace {

// The global queue delivers on its own thread: the entry's complete function knows how
// to reach its executor (it schedules what it resumes) or, without one, runs right here.
void deliverOnTimerThread(void*, TimerEntry& entry) noexcept { entry.complete(&entry, true); }

}  // namespace

TimerQueue& globalTimerQueue() {
  // Never destroyed (see the header); stopped at exit by the handler registered below.
  static TimerQueue* const queue = [] {
    auto* q = new TimerQueue("weft-timer", &deliverOnTimerThread, nullptr);
    std::atexit([] { globalTimerQueue().stop(/*deliverPending=*/false); });
    return q;
  }();
  return *queue;
}

}  // namespace weft::detail
