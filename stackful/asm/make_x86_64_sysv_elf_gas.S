/* weft switch core, x86-64 System V ABI, ELF, GNU as: weft_make_context.
 *
 *   void* weft_make_context(void* stackTop, size_t stackSize, ContextEntry entry);
 *        rax                     rdi              rsi                 rdx
 *
 * Builds a suspended context on the stack below stackTop that, when first resumed by
 * weft_jump_context, "returns" into the trampoline below, which calls entry(transfer).
 *
 * Context record (stackful/detail/context_layout.h mirrors and checks it; the handle is
 * the suspended context's rsp, which points at offset 0x00):
 *
 *   offset  contents                       a new context holds
 *   0x00    MXCSR (32 bits)                the creating thread's MXCSR
 *   0x04    x87 control word (16 bits)     the creating thread's x87 control word
 *   0x08    rbx                            entry (the trampoline calls it)
 *   0x10    rbp                            0 (ends the frame-pointer chain)
 *   0x18    r12                            0
 *   0x20    r13                            0
 *   0x28    r14                            0
 *   0x30    r15                            0
 *   0x38    return address                 the trampoline
 *   0x40    (end; for a new context: 16 free bytes, then stackTop rounded down to 16)
 *
 * Alignment invariant: the handle is 16-byte aligned, so when weft_jump_context pops the
 * record and continues at the trampoline, rsp = handle + 0x40 is 16-byte aligned, and
 * the trampoline's `call` gives entry rsp = 8 (mod 16), as the ABI requires at a
 * function's first instruction.
 *
 * Signals: this function only stores into the new stack (not the running one) and never
 * moves rsp: a signal at any instruction sees an ordinary leaf function.
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
    .globl  weft_make_context
    .hidden weft_make_context
    .type   weft_make_context, @function
    .p2align 4
weft_make_context:
    .cfi_startproc
    WEFT_ENDBR                                       /* indirect-branch target (CET IBT) */
    /* Alignment: called normally (rsp = 8 mod 16); this leaf touches no stack slot of its own. */
    movq    %rdi, %rax                               /* rax = stackTop */
    andq    $-16, %rax                               /* round the top down to 16 bytes */
    subq    $(WEFT_X86_64_RECORD_SIZE + WEFT_X86_64_NEW_CONTEXT_GAP), %rax
                                                     /* rax = handle: record below a 16-byte gap, aligned */
#if WEFT_FIBER_SAVE_FPU_CONTROL
    stmxcsr WEFT_X86_64_MXCSR(%rax)                  /* the new context starts with our MXCSR */
    fnstcw  WEFT_X86_64_X87CW(%rax)                  /* and our x87 control word */
#endif
    movq    %rdx, WEFT_X86_64_RBX(%rax)              /* rbx slot = entry, for the trampoline */
    xorl    %ecx, %ecx                               /* rcx = 0 */
    movq    %rcx, WEFT_X86_64_RBP(%rax)              /* rbp = 0: frame-pointer walks stop here */
    movq    %rcx, WEFT_X86_64_R12(%rax)              /* r12..r15 = 0: deterministic start */
    movq    %rcx, WEFT_X86_64_R13(%rax)              /* r13 = 0 */
    movq    %rcx, WEFT_X86_64_R14(%rax)              /* r14 = 0 */
    movq    %rcx, WEFT_X86_64_R15(%rax)              /* r15 = 0 */
    movq    %rcx, (WEFT_X86_64_RECORD_SIZE)(%rax)    /* the gap: a null "return address" above */
    movq    %rcx, (WEFT_X86_64_RECORD_SIZE + 8)(%rax) /* and its second word */
    leaq    weft_context_trampoline(%rip), %rcx      /* rcx = &trampoline (position independent) */
    movq    %rcx, WEFT_X86_64_RIP(%rax)              /* resume address = trampoline */
    ret                                              /* return the handle in rax */
    .cfi_endproc
    .size   weft_make_context, .-weft_make_context

/* The base frame of every context. Entered by the first weft_jump_context into the
 * context, which has restored rbx = entry and rbp = 0 and set rdi = the jumping context's
 * handle, rsi = its data: exactly the two eightbytes of a ContextTransfer argument.
 * rsp = handle + 0x40: 16-byte aligned (see the invariant above).
 * `.cfi_undefined rip` says this frame has no caller: unwinders (exceptions, backtraces,
 * debuggers) stop here instead of walking into whatever lies above the stack top. */
    .type   weft_context_trampoline, @function
    .p2align 4
weft_context_trampoline:
    .cfi_startproc
    .cfi_undefined rip                               /* the outermost frame of the context */
    WEFT_ENDBR                                       /* reached by an indirect jump */
    /* Alignment: rsp = 0 (mod 16) here, so entry starts at 8 (mod 16) after the call. */
    callq   *%rbx                                    /* entry(ContextTransfer{rdi, rsi}) */
    /* entry returned, which it must never do: report and abort. rsp = 0 (mod 16) again. */
    callq   weft_context_entry_returned              /* prints a message, aborts: no return */
    ud2                                              /* unreachable: trap if it ever did return */
    .cfi_endproc
    .size   weft_context_trampoline, .-weft_context_trampoline

    /* No executable stack for programs that link this object. */
    .section .note.GNU-stack,"",%progbits
