#include "weft/stackful/detail/context.h"

#include "weft/stackful/detail/context_layout.h"  // its static_asserts check the .S layout

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace weft::detail {

void contextEntryReturned() noexcept {
  // write(2) and abort(): async-signal-safe, no allocation, nothing buffered to lose. The
  // stack we run on is a fiber's, possibly nearly exhausted: keep this frame tiny.
  static constexpr char kMessage[] =
      "weft: a context entry function returned into the switch trampoline; a "
      "ContextEntry must never return (it leaves by switching away for good). "
      "See stackful/detail/context.h.\n";
  ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
  (void)ignored;
  std::abort();
}

#if WEFT_FIBER_BACKEND_BOOST
void boostContextEntry(boost::context::detail::transfer_t transfer) noexcept {
  // makeContext put the header at the kBoostStackHeaderAlign-aligned address right above
  // Boost's context record; this frame is a few dozen bytes below it (the record, the
  // trampoline's push, this frame's own link), so rounding its address up finds it.
  auto frame = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  std::uintptr_t base = (frame + kBoostStackHeaderAlign - 1) & ~(kBoostStackHeaderAlign - 1);
  const auto* header = reinterpret_cast<const BoostStackHeader*>(base);
  if (header->magic != kBoostStackHeaderMagic) {
    static constexpr char kMessage[] =
        "weft: Boost.Context backend: the context's stack header was not found (an "
        "unsupported Boost.Context stack layout?)\n";
    ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
    (void)ignored;
    std::abort();
  }
  header->entry(ContextTransfer{transfer.fctx, transfer.data});
  contextEntryReturned();
}
#endif

}  // namespace weft::detail

#if WEFT_FIBER_BACKEND_ASM
// Called by the trampoline of stackful/asm/make_*.S when an entry function returns.
extern "C" __attribute__((visibility("hidden"))) [[noreturn]] void
weft_context_entry_returned() noexcept {
  weft::detail::contextEntryReturned();
}
#endif
