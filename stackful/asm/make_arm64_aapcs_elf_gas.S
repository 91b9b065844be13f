/* weft switch core, aarch64 AAPCS64, ELF, GNU as: weft_make_context.
 *
 *   void* weft_make_context(void* stackTop, size_t stackSize, ContextEntry entry);
 *         x0                      x0               x1                 x2
 *
 * Builds a suspended context on the stack below stackTop that, when first resumed by
 * weft_jump_context, "returns" (ret to its saved x30) into the trampoline below, which
 * calls entry(transfer).
 *
 * Context record (stackful/detail/context_layout.h mirrors and checks it; the handle is
 * the suspended context's sp, which points at offset 0x00):
 *
 *   offset  contents
 *   0x00    d8   d9       the low 64 bits of v8-v15 are callee-saved (AAPCS64 6.1.2)
 *   0x10    d10  d11
 *   0x20    d12  d13
 *   0x30    d14  d15
 *   0x40    x19  x20      callee-saved general registers
 *   0x50    x21  x22
 *   0x60    x23  x24
 *   0x70    x25  x26
 *   0x80    x27  x28
 *   0x90    x29  x30      frame pointer; link register = where the context resumes
 *   0xa0    FPCR          unless WEFT_FIBER_SAVE_FPU_CONTROL=0
 *   0xa8    (padding: sp stays 16-byte aligned)
 *   0xb0    (end: the caller's sp)
 *
 * A new context holds: x19 = entry, x29 = 0 (ends the frame-record chain), x30 = the
 * trampoline, FPCR = the creating thread's, every other register 0; above the record a
 * 16-byte zeroed gap, then stackTop rounded down to 16.
 *
 * Alignment invariant: the handle is 16-byte aligned, so the trampoline runs with
 * sp = handle + 0xb0, 16-byte aligned, as entry requires at its first instruction.
 *
 * Signals: this function only stores into the new stack and never moves sp.
 */

#include "weft/stackful/detail/context_layout.h"

/* BTI: with -mbranch-protection=bti (or standard), indirect branches may only land on
 * BTI instructions in guarded pages. Our entry points are called (blr) or tail-called
 * through x16, so `bti c` (a hint, a NOP on cores without BTI) opens each one, and the
 * object is marked BTI compatible so the linker can keep the program's marking. Returns
 * (ret) are not checked by BTI; pointer authentication is not used by this code (it
 * stores return addresses only in context records, as Boost.Context does). */
#if defined(__ARM_FEATURE_BTI_DEFAULT) && __ARM_FEATURE_BTI_DEFAULT
#define WEFT_BTI_C hint #34
    .pushsection .note.gnu.property, "a"
    .p2align 3
    .word   4                                        /* n_namesz: "GNU\0" */
    .word   16                                       /* n_descsz: one property, padded */
    .word   5                                        /* n_type: NT_GNU_PROPERTY_TYPE_0 */
    .asciz  "GNU"                                    /* n_name */
    .word   0xc0000000                               /* GNU_PROPERTY_AARCH64_FEATURE_1_AND */
    .word   4                                        /* pr_datasz */
    .word   1                                        /* GNU_PROPERTY_AARCH64_FEATURE_1_BTI */
    .word   0                                        /* padding to 8 bytes */
    .popsection
#else
#define WEFT_BTI_C
#endif

    .text
    .globl  weft_make_context
    .hidden weft_make_context
    .type   weft_make_context, %function
    .p2align 4
weft_make_context:
    .cfi_startproc
    WEFT_BTI_C                                       /* landing pad for blr (BTI) */
    /* Alignment: a leaf that never moves sp (16-byte aligned, as always). */
    and     x0, x0, #-16                             /* round stackTop down to 16 bytes */
    sub     x0, x0, #(WEFT_ARM64_RECORD_SIZE + WEFT_ARM64_NEW_CONTEXT_GAP)
                                                     /* x0 = handle: record below a 16-byte gap */
    stp     xzr, xzr, [x0, #WEFT_ARM64_D8]           /* d8, d9 = 0 */
    stp     xzr, xzr, [x0, #WEFT_ARM64_D10]          /* d10, d11 = 0 */
    stp     xzr, xzr, [x0, #WEFT_ARM64_D12]          /* d12, d13 = 0 */
    stp     xzr, xzr, [x0, #WEFT_ARM64_D14]          /* d14, d15 = 0 */
    stp     x2, xzr, [x0, #WEFT_ARM64_X19]           /* x19 = entry (for the trampoline), x20 = 0 */
    stp     xzr, xzr, [x0, #WEFT_ARM64_X21]          /* x21, x22 = 0 */
    stp     xzr, xzr, [x0, #WEFT_ARM64_X23]          /* x23, x24 = 0 */
    stp     xzr, xzr, [x0, #WEFT_ARM64_X25]          /* x25, x26 = 0 */
    stp     xzr, xzr, [x0, #WEFT_ARM64_X27]          /* x27, x28 = 0 */
    adr     x3, weft_context_trampoline              /* x3 = &trampoline (PC-relative) */
    stp     xzr, x3, [x0, #WEFT_ARM64_X29]           /* x29 = 0 (chain end), x30 = trampoline */
#if WEFT_FIBER_SAVE_FPU_CONTROL
    mrs     x4, fpcr                                 /* x4 = our FPCR */
    str     x4, [x0, #WEFT_ARM64_FPCR]               /* the new context starts with it */
#endif
    stp     xzr, xzr, [x0, #WEFT_ARM64_RECORD_SIZE]  /* the gap above the record: zeroes */
    ret                                              /* return the handle in x0 */
    .cfi_endproc
    .size   weft_make_context, .-weft_make_context

/* The base frame of every context. Entered by the `ret` of the first weft_jump_context
 * into the context, which restored x19 = entry and x29 = 0 and left x0 = the jumping
 * context's handle, x1 = its data: exactly a ContextTransfer argument (x0, x1).
 * sp = handle + 0xb0: 16-byte aligned (see the invariant above).
 * `.cfi_undefined x30` says this frame has no caller: unwinders (exceptions, backtraces,
 * debuggers) stop here instead of walking into whatever lies above the stack top. */
    .type   weft_context_trampoline, %function
    .p2align 4
weft_context_trampoline:
    .cfi_startproc
    .cfi_undefined x30                               /* the outermost frame of the context */
    /* Alignment: sp = 0 (mod 16), as entry needs. Reached by ret: no BTI pad needed. */
    blr     x19                                      /* entry(ContextTransfer{x0, x1}) */
    /* entry returned, which it must never do: report and abort. */
    bl      weft_context_entry_returned              /* prints a message, aborts: no return */
    brk     #0x3e8                                   /* unreachable: trap if it ever did return */
    .cfi_endproc
    .size   weft_context_trampoline, .-weft_context_trampoline

    /* No executable stack for programs that link this object. */
    .section .note.GNU-stack,"",%progbits
