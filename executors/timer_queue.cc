#include "weft/executors/detail/timer_queue.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#if defined(__linux__)
#include <pthread.h>
#include <sys/prctl.h>
#endif

namespace weft::detail {

TimerQueue::TimerQueue(std::string threadName, Deliver deliver, void* context, Poll poll)
    : threadName_(std::move(threadName)), deliver_(deliver), context_(context), poll_(poll) {}

TimerQueue::~TimerQueue() { stop(/*deliverPending=*/false); }

void TimerQueue::startThreadLocked() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { run(); });  // may throw: nothing changed then
#if defined(__linux__)
  // Named from here rather than by the thread itself, so the name is visible as soon as
  // add() returns (a debugger or /proc never sees an unnamed timer thread).
  pthread_setname_np(thread_.native_handle(), threadName_.substr(0, 15).c_str());
#endif
}

bool TimerQueue::add(TimerEntry& entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopped_) return false;
  // An entry that never expires (deadline time_point::max(): a guard that only waits for
  // stop() or cancel(), as blocking() and signal() arm) needs no thread: the first entry
  // with a deadline starts it.
  if (entry.deadline != Clock::time_point::max()) startThreadLocked();  // may throw
  entry.shutDown = false;
  entry.dropped = false;
  heap_.push(entry);  // may throw: nothing armed (a started thread just waits)
  bump(armed_);
  // Woken only for a deadline earlier than the one it waits for: a timer armed after one
  // was cancelled (withTimeout around work that finished) is usually later, and the
  // thread, waking for the cancelled one's deadline, finds it then. So a steady stream of
  // armed-and-cancelled timers costs no thread switch per timer.
  if (entry.deadline < waitingUntil_) {
    waitingUntil_ = Clock::time_point::min();  // one notification is enough
    wake_.notify_one();
  }
  return true;
}

bool TimerQueue::cancel(TimerEntry& entry) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!TimerHeap::contains(entry)) return false;
  // No wake-up: if it was the earliest, the thread wakes at its deadline, finds a later
  // one and waits again.
  heap_.remove(entry);
  bump(cancelled_);
  return true;
}

void TimerQueue::pollBy(Clock::time_point when) {
  // seq_cst: the load that pairs with run()'s seq_cst stores of pollAt_ (see there). A
  // poll is planned at `when` or earlier: nothing to do.
  if (when.time_since_epoch().count() >= pollAt_.load(std::memory_order_seq_cst)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopped_) return;
  startThreadLocked();  // may throw: nothing changed
  if (when >= nextPoll_) return;
  nextPoll_ = when;
  // While poll runs, pollAt_ stays max() (every caller comes here) and run() reads
  // nextPoll_ when poll returns.
  if (!polling_) pollAt_.store(when.time_since_epoch().count(), std::memory_order_seq_cst);
  if (when < waitingUntil_) {
    waitingUntil_ = Clock::time_point::min();
    wake_.notify_one();
  }
}

std::size_t TimerQueue::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return heap_.size();
}

bool TimerQueue::threadStarted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return thread_.joinable();
}

// Polling and pollBy, without a lost request. pollBy's caller C stores X (seq_cst), then
// loads pollAt_ (seq_cst) and skips the lock only when it reads a planned time T no later
// than it asks for. The thread, before each poll, stores max() to pollAt_ (seq_cst), then
// poll loads X (seq_cst). If C read T, its load precedes the store of max() by the poll P
// that T planned (it would read that max() otherwise) in the single total order of seq_cst
// operations, and C's store precedes its load: P's load of X comes after C's store and
// sees it, and P runs no later than T. If C read max() (a poll running, none planned, or
// the thread not started), it took the lock and lowered nextPoll_, which the thread reads
// under the lock before it waits again.
void TimerQueue::run() {
#if defined(__linux__)
  // Linux lets a sleeping thread wake up to 50 us late ("timer slack") to batch wake-ups.
  // This thread exists to wake on time, so it asks for 1 ns. Failure only costs accuracy.
  (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopped_) {
    const Clock::time_point now = Clock::now();
    if (nextPoll_ <= now) {
      polling_ = true;
      nextPoll_ = Clock::time_point::max();
      pollAt_.store(std::numeric_limits<Clock::rep>::max(), std::memory_order_seq_cst);
      lock.unlock();
      const Clock::time_point next = poll_(context_, now);
      lock.lock();
      polling_ = false;
      nextPoll_ = std::min(nextPoll_, next);  // pollBy calls during the poll lowered it
      pollAt_.store(nextPoll_.time_since_epoch().count(), std::memory_order_seq_cst);
      continue;
    }
    TimerEntry* first = heap_.top();
    if (first != nullptr && first->deadline <= now) {
      heap_.pop();
      // Delivered without the lock: `deliver` may resume a coroutine that arms or cancels
      // timers. Once out of the heap, cancel() returns false, so this is the only delivery.
      lock.unlock();
      deliver_(context_, *first);
      lock.lock();
      continue;
    }
    const Clock::time_point until =
        std::min(first != nullptr ? first->deadline : Clock::time_point::max(), nextPoll_);
    waitingUntil_ = until;
    // time_point::max() is "never": wait without a timeout (libstdc++ would overflow
    // converting it to a timespec).
    if (until == Clock::time_point::max()) {
      wake_.wait(lock);
    } else {
      wake_.wait_until(lock, until);
    }
    waitingUntil_ = Clock::time_point::min();
  }
}

void TimerQueue::stop(bool deliverPending) noexcept {
  std::lock_guard<std::mutex> stopLock(stopMutex_);
  if (joined_) return;
  std::vector<TimerEntry*> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
    // In deadline order, so the flushed timers are seen in the order they would have
    // fired. Under the lock, which cancel() takes: an owner whose cancel() returns false
    // from now on sees whether its entry was dropped (takeAll marks every entry out of
    // the heap, so cancel() returns false for each).
    pending = heap_.takeAll();
    for (TimerEntry* entry : pending) entry->dropped = !deliverPending;
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
