/* weft switch core, x86-64 System V ABI, ELF, GNU as: weft_jump_context.
 *
 *   ContextTransfer weft_jump_context(void* to, void* data);
 *     rax = context, rdx = data         rdi        rsi
 *
 * Saves the running context's callee-saved state in a record on its own stack, switches
 * rsp to `to` (the handle of a suspended context: the rsp at which it saved its record),
 * restores that context's state and continues where it suspended: in its own
 * weft_jump_context / weft_ontop_context call, which returns {our handle, data}, or, for
 * a new context, in the trampoline of make_x86_64_sysv_elf_gas.S, which calls the entry
 * with the same {our handle, data} in rdi, rsi.
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
 * Caller-saved registers (rax, rcx, rdx, rsi, rdi, r8-r11, xmm0-15, the x87 stack, the
 * MXCSR status flags) need no saving: the caller of a function expects them clobbered.
 * The direction flag is clear at every call and return (ABI), here too.
 *
 * Signals: rsp always points into a valid stack, and everything not yet consumed lies
 * above it (the record is reserved before it is written, and the target's record is
 * read before rsp moves above it), so a handler can run at any instruction. The red
 * zone is not used (a call just wrote below the caller's rsp anyway).
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
    .globl  weft_jump_context
    .hidden weft_jump_context
    .type   weft_jump_context, @function
    .p2align 4
weft_jump_context:
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
#if !(defined(__CET__) && (__CET__ & 1))
    movq    WEFT_X86_64_RIP(%rsp), %r8               /* r8 = where the target continues, loaded
                                                        first: the jump's target is known early */
#endif
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
#if defined(__CET__) && (__CET__ & 1)
    /* IBT: an indirect jmp may only land on endbr64, which return addresses are not, so
     * continue with `ret` (costs a return-stack-buffer mispredict). */
    leaq    WEFT_X86_64_RIP(%rsp), %rsp              /* pop the record up to the return address */
    .cfi_adjust_cfa_offset -WEFT_X86_64_RIP
    .cfi_restore rbx                                 /* the registers now hold the values of */
    .cfi_restore rbp                                 /* the frame we return to */
    .cfi_restore r12
    .cfi_restore r13
    .cfi_restore r14
    .cfi_restore r15
    movq    %rsi, %rdx                               /* return value, second eightbyte: data */
    movq    %rax, %rdi                               /* a new context's entry argument: {rdi, rsi} */
    ret                                              /* continue the target (rax:rdx returned) */
#else
    leaq    WEFT_X86_64_RECORD_SIZE(%rsp), %rsp      /* pop the record and the return address */
    .cfi_adjust_cfa_offset -WEFT_X86_64_RECORD_SIZE
    .cfi_register rip, r8                            /* the return address now lives in r8 */
    .cfi_restore rbx                                 /* the registers now hold the values of */
    .cfi_restore rbp                                 /* the frame we return to */
    .cfi_restore r12
    .cfi_restore r13
    .cfi_restore r14
    .cfi_restore r15
    movq    %rsi, %rdx                               /* return value, second eightbyte: data */
    movq    %rax, %rdi                               /* a new context's entry argument: {rdi, rsi} */
    jmpq    *%r8                                     /* continue the target (rax:rdx returned); an
                                                        indirect jmp predicts better than ret here */
#endif
    .cfi_endproc
    .size   weft_jump_context, .-weft_jump_context

    /* No executable stack for programs that link this object. */
    .section .note.GNU-stack,"",%progbits
