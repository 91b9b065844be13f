#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace weft {

// SymbolInfo and symbolize(): names of code addresses of this process, from the
// binaries' symbol tables (and, on request, source lines from addr2line). Used by async
// backtraces (coro/async_backtrace.h) and ThreadPool's stall reports; public for tools
// built on weft (a dump of one's own, a runtime's diagnostics).

// What the symbolizer knows of one code address.
struct SymbolInfo {
  std::string function;  // demangled, as written (not a compiler clone's name); empty: unknown
  std::string file;      // source file (with source lines and debug info); else empty
  unsigned line = 0;     // 0: unknown
  std::string object;    // the executable or shared object that holds the address
};

// Names the functions that contain `addresses` (code addresses of this process: a
// return address should be passed minus one, so that it falls inside the call).
//
// Function names come from the object's ELF symbol table (.symtab, else .dynsym), read
// from its file once and cached, then demangled: this needs no debug information and no
// -rdynamic, only an unstripped binary. With `sourceLines`, file and line come from the
// toolchain's symbolizer (`addr2line` from binutils, run as a child process once per
// object) when it is on PATH and the object has debug information; without either they
// stay empty. A coroutine's body is named as the coroutine (g++ and clang++ compile it
// into clones, "<name>.actor" with a frame parameter, "<name>.resume").
//
// Errors: none; what cannot be resolved stays empty (std::bad_alloc aside). Not
// async-signal-safe (it allocates, locks and reads files). Thread safety: any thread,
// concurrently.
// Example:
//   std::vector<weft::SymbolInfo> names = weft::symbolize({address}, /*sourceLines=*/true);
//   std::printf("%s at %s:%u\n", names[0].function.c_str(), names[0].file.c_str(), names[0].line);
std::vector<SymbolInfo> symbolize(const std::vector<const void*>& addresses, bool sourceLines);

}  // namespace weft
