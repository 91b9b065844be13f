/* weft switch core, aarch64 AAPCS64, ELF, GNU as: weft_jump_context.
 *
 *   ContextTransfer weft_jump_context(void* to, void* data);
 *     x0 = context, x1 = data          x0         x1
 *
 * Saves the running context's callee-saved state in a record on its own stack, switches
 * sp to `to` (the handle of a suspended context: the sp at which it saved its record),
 * restores that context's state and continues where it suspended (ret to its saved x30):
 * in its own weft_jump_context / weft_ontop_context call, which returns {our handle,
 * data}, or, for a new context, in the trampoline of make_arm64_aapcs_elf_gas.S, which
 * calls the entry with the same {our handle, data} in x0, x1.
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
 * Caller-saved state (x0-x18, the upper halves of v8-v15, v0-v7, v16-v31, FPSR, NZCV)
 * needs no saving: the caller of a function expects it clobbered. x18 (the platform
 * register) is left alone.
 *
 * Signals: sp always points into a valid stack, and everything not yet consumed lies
 * above it (the record is reserved before it is written, and the target's record is read
 * before sp moves above it), so a handler can run at any instruction.
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
    .globl  weft_jump_context
    .hidden weft_jump_context
    .type   weft_jump_context, %function
    .p2align 4
weft_jump_context:
    .cfi_startproc
    WEFT_BTI_C                                       /* landing pad for blr / br x16 (BTI) */
    /* Alignment: sp is 16-byte aligned at every instruction on aarch64 (AAPCS64 5.2.2.1
     * and the hardware's stack alignment check); the record is 0xb0 bytes, so the handle
     * is 16-byte aligned too. */
    sub     sp, sp, #WEFT_ARM64_RECORD_SIZE          /* reserve the record first: a signal
                                                        never lands on it */
    .cfi_def_cfa_offset WEFT_ARM64_RECORD_SIZE
    stp     d8, d9, [sp, #WEFT_ARM64_D8]             /* save d8, d9 */
    stp     d10, d11, [sp, #WEFT_ARM64_D10]          /* save d10, d11 */
    stp     d12, d13, [sp, #WEFT_ARM64_D12]          /* save d12, d13 */
    stp     d14, d15, [sp, #WEFT_ARM64_D14]          /* save d14, d15 */
    stp     x19, x20, [sp, #WEFT_ARM64_X19]          /* save x19, x20 */
    stp     x21, x22, [sp, #WEFT_ARM64_X21]          /* save x21, x22 */
    stp     x23, x24, [sp, #WEFT_ARM64_X23]          /* save x23, x24 */
    stp     x25, x26, [sp, #WEFT_ARM64_X25]          /* save x25, x26 */
    stp     x27, x28, [sp, #WEFT_ARM64_X27]          /* save x27, x28 */
    stp     x29, x30, [sp, #WEFT_ARM64_X29]          /* save fp and lr (our resume address) */
    .cfi_rel_offset d8, WEFT_ARM64_D8
    .cfi_rel_offset d9, WEFT_ARM64_D8 + 8
    .cfi_rel_offset d10, WEFT_ARM64_D10
    .cfi_rel_offset d11, WEFT_ARM64_D10 + 8
    .cfi_rel_offset d12, WEFT_ARM64_D12
    .cfi_rel_offset d13, WEFT_ARM64_D12 + 8
    .cfi_rel_offset d14, WEFT_ARM64_D14
    .cfi_rel_offset d15, WEFT_ARM64_D14 + 8
    .cfi_rel_offset x19, WEFT_ARM64_X19
    .cfi_rel_offset x20, WEFT_ARM64_X19 + 8
    .cfi_rel_offset x21, WEFT_ARM64_X21
    .cfi_rel_offset x22, WEFT_ARM64_X21 + 8
    .cfi_rel_offset x23, WEFT_ARM64_X23
    .cfi_rel_offset x24, WEFT_ARM64_X23 + 8
    .cfi_rel_offset x25, WEFT_ARM64_X25
    .cfi_rel_offset x26, WEFT_ARM64_X25 + 8
    .cfi_rel_offset x27, WEFT_ARM64_X27
    .cfi_rel_offset x28, WEFT_ARM64_X27 + 8
    .cfi_rel_offset x29, WEFT_ARM64_X29
    .cfi_rel_offset x30, WEFT_ARM64_X29 + 8
#if WEFT_FIBER_SAVE_FPU_CONTROL
    mrs     x9, fpcr                                 /* x9 = our FPCR (rounding, FZ, DN, AHP...) */
    str     x9, [sp, #WEFT_ARM64_FPCR]               /* save it */
#endif
    mov     x10, sp                                  /* x10 = our handle: the resumed side's
                                                        transfer.context */
    /* THE SWITCH. From here sp is the target's handle: its record is above sp on its own
     * stack, and ours stays above our handle. The CFI above now describes the target's
     * record, so a backtrace taken here shows the target's callers. */
    mov     sp, x0                                   /* sp = target context's handle */
#if WEFT_FIBER_SAVE_FPU_CONTROL
    /* Writing FPCR can be slow (it may synchronise the FP pipeline): skip it when the
     * target's value equals ours, the common case. */
    ldr     x11, [sp, #WEFT_ARM64_FPCR]              /* x11 = the target's FPCR */
    cmp     x11, x9                                  /* the same as ours? */
    b.eq    1f                                       /* yes: nothing to write */
    msr     fpcr, x11                                /* no: restore the target's FPCR */
1:
#endif
    ldp     d8, d9, [sp, #WEFT_ARM64_D8]             /* restore the target's d8, d9 */
    ldp     d10, d11, [sp, #WEFT_ARM64_D10]          /* restore d10, d11 */
    ldp     d12, d13, [sp, #WEFT_ARM64_D12]          /* restore d12, d13 */
    ldp     d14, d15, [sp, #WEFT_ARM64_D14]          /* restore d14, d15 */
    ldp     x19, x20, [sp, #WEFT_ARM64_X19]          /* restore x19, x20 */
    ldp     x21, x22, [sp, #WEFT_ARM64_X21]          /* restore x21, x22 */
    ldp     x23, x24, [sp, #WEFT_ARM64_X23]          /* restore x23, x24 */
    ldp     x25, x26, [sp, #WEFT_ARM64_X25]          /* restore x25, x26 */
    ldp     x27, x28, [sp, #WEFT_ARM64_X27]          /* restore x27, x28 */
    ldp     x29, x30, [sp, #WEFT_ARM64_X29]          /* restore fp, and lr = where it resumes */
    add     sp, sp, #WEFT_ARM64_RECORD_SIZE          /* pop the record: sp = the target's sp
                                                        at its call, 16-byte aligned */
    .cfi_def_cfa_offset 0
    .cfi_restore d8                                  /* the registers now hold the values of */
    .cfi_restore d9                                  /* the frame we return to */
    .cfi_restore d10
    .cfi_restore d11
    .cfi_restore d12
    .cfi_restore d13
    .cfi_restore d14
    .cfi_restore d15
    .cfi_restore x19
    .cfi_restore x20
    .cfi_restore x21
    .cfi_restore x22
    .cfi_restore x23
    .cfi_restore x24
    .cfi_restore x25
    .cfi_restore x26
    .cfi_restore x27
    .cfi_restore x28
    .cfi_restore x29
    .cfi_restore x30
    mov     x0, x10                                  /* return {our handle, data}; x1 = data
                                                        already. Also a new context's entry
                                                        argument */
    ret                                              /* continue the target at its x30 */
    .cfi_endproc
    .size   weft_jump_context, .-weft_jump_context

    /* No executable stack for programs that link this object. */
    .section .note.GNU-stack,"",%progbits
