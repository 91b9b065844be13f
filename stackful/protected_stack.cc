#include "stackful/protected_stack.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>

#include "stackful/detail/stack_guard.h"
#include "stackful/detail/tool_hooks.h"

namespace weft {

std::size_t ProtectedStack::pageSize() noexcept {
  static const std::size_t kPage = [] {
    long page = ::sysconf(_SC_PAGESIZE);
    return page > 0 ? static_cast<std::size_t>(page) : std::size_t{4096};
  }();
  return kPage;
}

ProtectedStack::ProtectedStack(std::size_t size, std::size_t guardPages) {
  const std::size_t page = pageSize();
  if (guardPages == 0) guardPages = 1;
  if (guardPages > 1024) guardPages = 1024;  // 4 MiB of guard (with 4 KiB pages) is plenty
  if (size == 0) size = page;
  // Round up to whole pages (checking for overflow of absurd requests).
  if (size > (std::size_t{1} << 46)) {
    throw std::system_error(ENOMEM, std::generic_category(),
                            "weft: ProtectedStack of " + std::to_string(size) + " bytes");
  }
  const std::size_t usable = (size + page - 1) / page * page;
  const std::size_t guard = guardPages * page;
  const std::size_t total = usable + guard;
  // MAP_NORESERVE: the stack is address space; pages are committed when touched.
  void* mapping = ::mmap(nullptr, total, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) {
    const int error = errno;
    throw std::system_error(error, std::generic_category(),
                            "weft: cannot map a fiber stack of " + std::to_string(total) +
                                " bytes (address space or memory exhausted?)");
  }
  if (::mprotect(mapping, guard, PROT_NONE) != 0) {
    const int error = errno;
    ::munmap(mapping, total);
    throw std::system_error(
        error, std::generic_category(),
        "weft: cannot protect the guard page of a fiber stack (each stack is two memory "
        "mappings; the process may have reached vm.max_map_count: see "
        "/proc/sys/vm/max_map_count, or use shared stacks)");
  }
  mapping_ = mapping;
  mappingSize_ = total;
  guardSize_ = static_cast<std::uint32_t>(guard);
  valgrindId_ = detail::valgrindRegisterStack(bottom(), top());
  // The SIGSEGV handler that turns a guard-page hit into a diagnostic.
  detail::installStackOverflowHandler();
}

void ProtectedStack::release() noexcept {
  if (mapping_ == nullptr) return;
  detail::valgrindDeregisterStack(valgrindId_);
  // A later mapping at this address must not inherit the poison of our frames.
  detail::asanUnpoison(bottom(), size());
  ::munmap(mapping_, mappingSize_);
  mapping_ = nullptr;
  mappingSize_ = 0;
  guardSize_ = 0;
  valgrindId_ = 0;
}

}  // namespace weft
