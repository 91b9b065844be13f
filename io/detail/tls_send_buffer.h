#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <utility>

namespace weft::detail::tls {

// Ciphertext to send: bytes and the room for more. A std::string would do, but these
// move between the connection, its sender and the thread's spare (below) on every write,
// and three words swap in a few instructions where a std::string's swap takes dozens.
class SendBuffer {
 public:
  const char* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return capacity_; }
  bool empty() const noexcept { return size_ == 0; }
  void clear() noexcept { size_ = 0; }
  // Frees the buffer (the bytes too).
  void release() noexcept {
    data_.reset();
    size_ = 0;
    capacity_ = 0;
  }
  void swap(SendBuffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(capacity_, other.capacity_);
  }
  // Room for `n` bytes in all. Errors: std::bad_alloc (nothing changed).
  void reserve(std::size_t n) {
    if (n <= capacity_) return;
    std::unique_ptr<char[]> bigger(new char[n]);
    if (size_ != 0) std::memcpy(bigger.get(), data_.get(), size_);
    data_ = std::move(bigger);
    capacity_ = n;
  }
  // Errors: std::bad_alloc (nothing appended).
  void append(const char* bytes, std::size_t n) {
    if (n > capacity_ - size_) reserve(std::max(size_ + n, 2 * capacity_));
    std::memcpy(data_.get() + size_, bytes, n);
    size_ += n;
  }

 private:
  std::unique_ptr<char[]> data_;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

// One write() encrypts at most this much: its records are queued whole before they are
// sent, so this bounds the ciphertext a connection holds.
inline constexpr std::size_t kMaxWrite = 64 * 1024;
// What a record adds to its plaintext, at most (TLS 1.2 AES-GCM: header 5, explicit nonce
// 8, tag 16; TLS 1.3: 5, content type 1, tag 16), with room to spare.
inline constexpr std::size_t kRecordOverhead = 64;
// A send buffer grown beyond this by a large write is freed once sent.
inline constexpr std::size_t kKeptSendCapacity = 2 * kMaxWrite;
// Send buffers smaller than this leave a connection once everything queued was sent, so
// that a connection between requests holds none (a TLS 1.3 handshake leaves 1-2 KiB, a
// small response less): 0.75 KiB per idle HTTPS connection, measured. Larger ones (a
// stream of 64 KiB writes) stay, as freeing a chunk of 64 KiB or more can make glibc trim
// its heap and the next write fault the pages in again.
inline constexpr std::size_t kFreedSendCapacity = 60 * 1024;

// `buffer` (empty) leaves its connection: to the thread's spare if it is larger than that,
// else freed. Buffers of kFreedSendCapacity or more stay.
void releaseSendBuffer(SendBuffer& buffer) noexcept;

// Gives `output` (empty, without a buffer) the thread's spare, if there is one.
void takeSpareSendBuffer(SendBuffer& output) noexcept;

}  // namespace weft::detail::tls
