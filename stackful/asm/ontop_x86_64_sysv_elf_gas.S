/* weft switch core, x86-64 System V ABI, ELF, GNU as: weft_ontop_context.
 *
 *   ContextTransfer weft_ontop_context(void* to, void* data,
 *     rax = context, rdx = data          rdi        rsi
 *                                       ContextTransfer (*fn)(ContextTransfer));
 *                                                         rdx
 *
 * Like weft_jump_context, but instead of returning into the target's pending switch call
 * it calls fn({our handle, data}) on the target's stack, with the target's return
 * address as fn's return address: fn's result is what the target's pending call
 * returns, and an exception thrown by fn unwinds straight into the target's frames (the
 * unwinder sees fn called from the target's call site). This is how a suspended fiber is
 * force-unwound. The target must have started (a new context has no pending call).
 *
 * Context record (stackful/detail/context_layout.h mirrors and checks it; the handle is
 * the suspended context's rsp, which points at offset 0x00):
 *
 *   offset  contents
 *   0x00    MXCSR (32 bits)              } saved and restored unless
 *   0x04    x87 control word (16 bits)   } WEFT_FIBER_SAVE_FPU_CONTROL=0
 *   0x08    rbx
 *   0x10    rbp
 *   0x18    r12
 *   0x20    r13
 *   0x28    r14
 *   0x30    r15
 *   0x38    return address (pushed by the caller's `call`)
 *   0x40    (end: the caller's rsp before the call, 16-byte aligned)
 *
 * Alignment invariant at fn's entry: rsp = handle + 0x38 = 8 (mod 16), exactly as after a
 * `call` from 16-byte aligned code.
 *
 * Signals: as weft_jump_context (see there): rsp always points into a valid stack.
 */

#include "weft/stackful/detail/context_layout.h"

/* CET: endbr64 at every entry point when compiled with -fcf-protection (IBT). <cet.h>
 * also marks the object IBT (and SHSTK) compatible in .note.gnu.property; the switch does
 * not maintain a shadow stack, so with SHSTK requested we do not include it and emit no
 * note, which makes the linker mark the program as not CET-enabled (correct, if
 * conservative). See stackful/asm/README.md. */
#if defined(__CET__) && !(__CET__ & 2) && defined(__has_include)
#if __has_include(<cet.h>)
#include <cet.h>
#endif
#endif
#if defined(_CET_ENDBR)
#define WEFT_ENDBR _CET_ENDBR
#elif defined(__CET__) && (__CET__ & 1)
#define WEFT_ENDBR endbr64
#else
#define WEFT_ENDBR
#endif

    .text
    .globl  weft_ontop_context
    .hidden weft_ontop_context
    .type   weft_ontop_context, @function
    .p2align 4
weft_ontop_context:
    .cfi_startproc
    WEFT_ENDBR                                       /* indirect-branch target (CET IBT) */
    /* Alignment: entered by `call` from ABI-conforming code, so rsp = 8 (mod 16) with the
     * return address at (%rsp); the record below it ends 16-byte aligned: handle = 0 (mod 16). */
    leaq    -WEFT_X86_64_RIP(%rsp), %rsp             /* reserve the record below the return address;
                                                        rsp moves first, so a signal never lands on it */
    .cfi_adjust_cfa_offset WEFT_X86_64_RIP
#if WEFT_FIBER_SAVE_FPU_CONTROL
    stmxcsr WEFT_X86_64_MXCSR(%rsp)                  /* save MXCSR (callee-saved control bits) */
    fnstcw  WEFT_X86_64_X87CW(%rsp)                  /* save the x87 control word */
#endif
    movq    %rbx, WEFT_X86_64_RBX(%rsp)              /* save rbx */
    .cfi_rel_offset rbx, WEFT_X86_64_RBX
    movq    %rbp, WEFT_X86_64_RBP(%rsp)              /* save rbp */
    .cfi_rel_offset rbp, WEFT_X86_64_RBP
    movq    %r12, WEFT_X86_64_R12(%rsp)              /* save r12 */
    .cfi_rel_offset r12, WEFT_X86_64_R12
    movq    %r13, WEFT_X86_64_R13(%rsp)              /* save r13 */
    .cfi_rel_offset r13, WEFT_X86_64_R13
    movq    %r14, WEFT_X86_64_R14(%rsp)              /* save r14 */
    .cfi_rel_offset r14, WEFT_X86_64_R14
    movq    %r15, WEFT_X86_64_R15(%rsp)              /* save r15 */
    .cfi_rel_offset r15, WEFT_X86_64_R15
    movq    %rsp, %rax                               /* rax = our handle, the resumed side's
                                                        transfer.context */
    /* THE SWITCH. From here rsp is the target's handle: its record is above rsp on its
     * own stack, and ours stays above our handle. The CFI above now describes the
     * target's record, so a backtrace taken here shows the target's callers. */
    movq    %rdi, %rsp                               /* rsp = target context's handle */
#if WEFT_FIBER_SAVE_FPU_CONTROL
    /* Loaded unconditionally: skipping the loads when the values are equal was measured
     * slower (the compare must wait for the stmxcsr/fnstcw stores above; on this
     * machine that costs more than ldmxcsr + fldcw). */
    ldmxcsr WEFT_X86_64_MXCSR(%rsp)                  /* restore the target's MXCSR */
    fldcw   WEFT_X86_64_X87CW(%rsp)                  /* restore the target's x87 control word */
#endif
    movq    WEFT_X86_64_RBX(%rsp), %rbx              /* restore the target's rbx */
    movq    WEFT_X86_64_RBP(%rsp), %rbp              /* restore rbp */
    movq    WEFT_X86_64_R12(%rsp), %r12              /* restore r12 */
    movq    WEFT_X86_64_R13(%rsp), %r13              /* restore r13 */
    movq    WEFT_X86_64_R14(%rsp), %r14              /* restore r14 */
    movq    WEFT_X86_64_R15(%rsp), %r15              /* restore r15 */
    leaq    WEFT_X86_64_RIP(%rsp), %rsp              /* pop the record but keep the target's
                                                        return address: fn returns there */
    .cfi_adjust_cfa_offset -WEFT_X86_64_RIP
    .cfi_restore rbx                                 /* the registers now hold the values of */
    .cfi_restore rbp                                 /* the frame we return to */
    .cfi_restore r12
    .cfi_restore r13
    .cfi_restore r14
    .cfi_restore r15
    /* Alignment: rsp = 8 (mod 16) here, the state of a function's first instruction. */
    movq    %rax, %rdi                               /* fn's argument: {rdi = our handle, rsi = data} */
    jmpq    *%rdx                                    /* tail-call fn (its entry has endbr64 under IBT) */
    .cfi_endproc
    .size   weft_ontop_context, .-weft_ontop_context

    /* No executable stack for programs that link this object. */
    .section .note.GNU-stack,"",%progbits
