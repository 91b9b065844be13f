#include "weft/io/detail/tls_send_buffer.h"

namespace weft::detail::tls {

namespace {

// The calling thread's spare send buffer (empty, with room): a connection whose sends are
// done leaves its buffer here (the larger one is kept, the other freed), and the next
// write on this thread takes it, so that a request/response server neither keeps a
// buffer per idle connection nor allocates one per response (a malloc and a free: 224
// instructions per response, measured with callgrind, against a few for the swaps).
// Not inlined, and only called from plain functions: a compiler may keep the address of a
// thread_local across a suspension after which a coroutine runs on another thread (see
// coro/detail/frame_allocator.h).
[[gnu::noinline]] SendBuffer& spareSendBuffer() noexcept {
  thread_local SendBuffer spare;
  return spare;
}

}  // namespace

void releaseSendBuffer(SendBuffer& buffer) noexcept {
  const std::size_t capacity = buffer.capacity();
  if (capacity == 0 || capacity >= kFreedSendCapacity) return;
  SendBuffer& spare = spareSendBuffer();
  if (capacity > spare.capacity()) spare.swap(buffer);
  buffer.release();  // the smaller one, if any
}

void takeSpareSendBuffer(SendBuffer& output) noexcept {
  if (output.capacity() == 0) output.swap(spareSendBuffer());
}

}  // namespace weft::detail::tls
