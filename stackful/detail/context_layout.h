#pragma once

// The layout of a suspended context of weft's own switch core (stackful/asm/*.S), shared
// by the assembly (which #includes this file: only the #defines are seen there) and C++
// (which checks the layout below with static_asserts). The register tables at the top of
// the .S files show the same layout; a change here is a change there, and the
// static_asserts keep the numbers honest.
//
// A context handle (stackful/detail/context.h) is the stack pointer of the suspended
// context, which points at this record on that context's own stack: the switch pushes
// the record, stores the stack pointer as the handle, and on resume pops it again.

// WEFT_FIBER_SAVE_FPU_CONTROL: 1 (the default): every switch saves the floating-point
// control state of the context it leaves and restores that of the context it resumes --
// MXCSR (SSE rounding mode, exception masks, FTZ/DAZ) and the x87 control word on x86-64,
// FPCR on aarch64 -- as the ABIs ask of a function call (these are callee-saved control
// bits). A new context starts with the control state of the thread that created it.
// 0 (compile-time opt-out, -DWEFT_FIBER_SAVE_FPU_CONTROL=0 for weft's build, CMake option
// WEFT_FIBER_SAVE_FPU_CONTROL=OFF): switches leave these registers alone, so the control
// state belongs to the THREAD, not the context: a fiber that calls fesetround() or
// _mm_setcsr() changes it for every context that thread runs next. Only for programs
// that never change the FP environment; it saves a few cycles per switch.
#ifndef WEFT_FIBER_SAVE_FPU_CONTROL
#define WEFT_FIBER_SAVE_FPU_CONTROL 1
#endif

// --- x86-64 System V (stackful/asm/*_x86_64_sysv_elf_gas.S) -----------------------------
// offset  size  contents
//  0x00    4    MXCSR                       (unused with WEFT_FIBER_SAVE_FPU_CONTROL=0)
//  0x04    2    x87 control word            (unused with WEFT_FIBER_SAVE_FPU_CONTROL=0)
//  0x06    2    padding
//  0x08    8    rbx   (a new context: the entry function)
//  0x10    8    rbp   (a new context: 0, the end of the frame-pointer chain)
//  0x18    8    r12
//  0x20    8    r13
//  0x28    8    r14
//  0x30    8    r15
//  0x38    8    return address: where the context resumes (a new context: the trampoline)
//  0x40         end of the record = the caller's stack pointer before its call
// The handle (rsp of the suspended context) is 16-byte aligned: the call that entered the
// switch pushed the return address onto a 16-byte aligned stack (ABI), and the record
// below it is 0x38 bytes, so handle + 0x40 is that aligned stack pointer.
#define WEFT_X86_64_MXCSR 0x00
#define WEFT_X86_64_X87CW 0x04
#define WEFT_X86_64_RBX 0x08
#define WEFT_X86_64_RBP 0x10
#define WEFT_X86_64_R12 0x18
#define WEFT_X86_64_R13 0x20
#define WEFT_X86_64_R14 0x28
#define WEFT_X86_64_R15 0x30
#define WEFT_X86_64_RIP 0x38
#define WEFT_X86_64_RECORD_SIZE 0x40
// A new context's record sits this far below the (16-byte aligned) top of its stack; the
// gap keeps the trampoline's stack pointer (record end) 16 bytes under the top, aligned.
#define WEFT_X86_64_NEW_CONTEXT_GAP 0x10

// --- aarch64 AAPCS64 (stackful/asm/*_arm64_aapcs_elf_gas.S) -----------------------------
// offset  size  contents
//  0x00    8    d8      (low 64 bits of v8: the callee-saved part)
//  0x08    8    d9
//  0x10    8    d10
//  0x18    8    d11
//  0x20    8    d12
//  0x28    8    d13
//  0x30    8    d14
//  0x38    8    d15
//  0x40    8    x19     (a new context: the entry function)
//  0x48    8    x20
//  0x50    8    x21
//  0x58    8    x22
//  0x60    8    x23
//  0x68    8    x24
//  0x70    8    x25
//  0x78    8    x26
//  0x80    8    x27
//  0x88    8    x28
//  0x90    8    x29 (fp) (a new context: 0, the end of the frame-record chain)
//  0x98    8    x30 (lr) = where the context resumes (a new context: the trampoline)
//  0xa0    8    FPCR    (unused with WEFT_FIBER_SAVE_FPU_CONTROL=0)
//  0xa8    8    padding (sp must stay 16-byte aligned at all times on aarch64)
//  0xb0         end of the record = the caller's sp
// The handle (sp of the suspended context) is 16-byte aligned, as sp always is.
#define WEFT_ARM64_D8 0x00
#define WEFT_ARM64_D10 0x10
#define WEFT_ARM64_D12 0x20
#define WEFT_ARM64_D14 0x30
#define WEFT_ARM64_X19 0x40
#define WEFT_ARM64_X21 0x50
#define WEFT_ARM64_X23 0x60
#define WEFT_ARM64_X25 0x70
#define WEFT_ARM64_X27 0x80
#define WEFT_ARM64_X29 0x90
#define WEFT_ARM64_X30 0x98
#define WEFT_ARM64_FPCR 0xa0
#define WEFT_ARM64_RECORD_SIZE 0xb0
#define WEFT_ARM64_NEW_CONTEXT_GAP 0x10

#ifndef __ASSEMBLER__

#include <cstddef>
#include <cstdint>

namespace weft::detail {

// The records as C++ structs: offsetof must match the #defines the assembly uses.
struct X86_64ContextRecord {
  std::uint32_t mxcsr;
  std::uint16_t x87ControlWord;
  std::uint16_t padding;
  std::uint64_t rbx, rbp, r12, r13, r14, r15;
  std::uint64_t returnAddress;
};
static_assert(offsetof(X86_64ContextRecord, mxcsr) == WEFT_X86_64_MXCSR);
static_assert(offsetof(X86_64ContextRecord, x87ControlWord) == WEFT_X86_64_X87CW);
static_assert(offsetof(X86_64ContextRecord, rbx) == WEFT_X86_64_RBX);
static_assert(offsetof(X86_64ContextRecord, rbp) == WEFT_X86_64_RBP);
static_assert(offsetof(X86_64ContextRecord, r12) == WEFT_X86_64_R12);
static_assert(offsetof(X86_64ContextRecord, r13) == WEFT_X86_64_R13);
static_assert(offsetof(X86_64ContextRecord, r14) == WEFT_X86_64_R14);
static_assert(offsetof(X86_64ContextRecord, r15) == WEFT_X86_64_R15);
static_assert(offsetof(X86_64ContextRecord, returnAddress) == WEFT_X86_64_RIP);
static_assert(sizeof(X86_64ContextRecord) == WEFT_X86_64_RECORD_SIZE);
// The return address is the last slot (the call pushed it), and the record keeps a
// 16-byte aligned stack 16-byte aligned.
static_assert(WEFT_X86_64_RIP + 8 == WEFT_X86_64_RECORD_SIZE);
static_assert(WEFT_X86_64_RECORD_SIZE % 16 == 0 && WEFT_X86_64_NEW_CONTEXT_GAP % 16 == 0);

struct Arm64ContextRecord {
  std::uint64_t d[8];   // d8..d15
  std::uint64_t x[10];  // x19..x28
  std::uint64_t x29, x30;
  std::uint64_t fpcr;
  std::uint64_t padding;
};
static_assert(offsetof(Arm64ContextRecord, d) == WEFT_ARM64_D8);
static_assert(offsetof(Arm64ContextRecord, d) + 2 * 8 == WEFT_ARM64_D10);
static_assert(offsetof(Arm64ContextRecord, d) + 4 * 8 == WEFT_ARM64_D12);
static_assert(offsetof(Arm64ContextRecord, d) + 6 * 8 == WEFT_ARM64_D14);
static_assert(offsetof(Arm64ContextRecord, x) == WEFT_ARM64_X19);
static_assert(offsetof(Arm64ContextRecord, x) + 2 * 8 == WEFT_ARM64_X21);
static_assert(offsetof(Arm64ContextRecord, x) + 4 * 8 == WEFT_ARM64_X23);
static_assert(offsetof(Arm64ContextRecord, x) + 6 * 8 == WEFT_ARM64_X25);
static_assert(offsetof(Arm64ContextRecord, x) + 8 * 8 == WEFT_ARM64_X27);
static_assert(offsetof(Arm64ContextRecord, x29) == WEFT_ARM64_X29);
static_assert(offsetof(Arm64ContextRecord, x30) == WEFT_ARM64_X30);
static_assert(offsetof(Arm64ContextRecord, fpcr) == WEFT_ARM64_FPCR);
static_assert(sizeof(Arm64ContextRecord) == WEFT_ARM64_RECORD_SIZE);
// Pairs are stored with stp/ldp, whose immediate offsets must be multiples of 8; sp is
// always 16-byte aligned on aarch64, so the record size must be a multiple of 16.
static_assert(WEFT_ARM64_RECORD_SIZE % 16 == 0 && WEFT_ARM64_NEW_CONTEXT_GAP % 16 == 0);

#if defined(__x86_64__)
using NativeContextRecord = X86_64ContextRecord;
inline constexpr std::size_t kNewContextGap = WEFT_X86_64_NEW_CONTEXT_GAP;
#elif defined(__aarch64__)
using NativeContextRecord = Arm64ContextRecord;
inline constexpr std::size_t kNewContextGap = WEFT_ARM64_NEW_CONTEXT_GAP;
#endif

}  // namespace weft::detail

#endif  // __ASSEMBLER__
