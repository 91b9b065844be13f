#include "weft/stackful/protected_stack.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <system_error>

#include "weft/stackful/detail/stack_guard.h"
#include "weft/stackful/detail/tool_hooks.h"

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
  detail::asanUnpoisonStack(bottom(), top());
  ::munmap(mapping_, mappingSize_);
  mapping_ = nullptr;
  mappingSize_ = 0;
  guardSize_ = 0;
  valgrindId_ = 0;
}

namespace detail {

void asanUnpoisonStack(void* bottom, void* top) noexcept {
#if WEFT_ASAN
  // Not by writing the shadow (__asan_unpoison_memory_region is a memset of it): that
  // commits an eighth of the reservation, and keeps it committed after the stack is
  // unmapped. The whole shadow pages of the stack are handed back to the kernel instead
  // (MADV_DONTNEED: they read as zero, i.e. unpoisoned, from then on), as ASan itself
  // clears large shadow ranges; only the two partial pages at the ends are written. That
  // costs a page-table walk over what the fiber touched, whatever the reservation, and
  // frees the shadow of the frames too. The shadow pages cleared cover nothing but this
  // stack (they lie inside its shadow), so no other memory's poison is touched.
  std::size_t scale = 0, offset = 0;
  __asan_get_shadow_mapping(&scale, &offset);
  const auto low = reinterpret_cast<std::uintptr_t>(bottom);
  const auto high = reinterpret_cast<std::uintptr_t>(top);
  const std::uintptr_t page = ProtectedStack::pageSize();
  const std::uintptr_t shadowLow = (low >> scale) + offset;
  const std::uintptr_t shadowHigh = (high >> scale) + offset;
  const std::uintptr_t pagesLow = (shadowLow + page - 1) & ~(page - 1);
  const std::uintptr_t pagesHigh = shadowHigh & ~(page - 1);
  if (pagesLow < pagesHigh &&
      ::madvise(reinterpret_cast<void*>(pagesLow), pagesHigh - pagesLow, MADV_DONTNEED) == 0) {
    const std::uintptr_t clearedLow = (pagesLow - offset) << scale;    // application
    const std::uintptr_t clearedHigh = (pagesHigh - offset) << scale;  // addresses
    __asan_unpoison_memory_region(bottom, clearedLow - low);
    __asan_unpoison_memory_region(reinterpret_cast<void*>(clearedHigh), high - clearedHigh);
    return;
  }
  __asan_unpoison_memory_region(bottom, high - low);  // smaller than a shadow page
#else
  (void)bottom, (void)top;
#endif
}

}  // namespace detail
}  // namespace weft
