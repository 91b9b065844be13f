#include "weft/executors/symbolizer.h"

#include <cxxabi.h>
#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

extern char** environ;

namespace weft {
namespace {

// The function symbols of one ELF object, sorted by address. The file stays mapped (the
// names point into it) for the life of the process: objects are few.
class ElfSymbols {
 public:
  explicit ElfSymbols(const std::string& path) { load(path); }

  // The name of the function containing `offset` (an address in the object's own
  // numbering), or nullptr.
  const char* find(std::uintptr_t offset) const {
    auto it = std::upper_bound(symbols_.begin(), symbols_.end(), offset,
                               [](std::uintptr_t o, const Symbol& s) { return o < s.value; });
    if (it == symbols_.begin()) return nullptr;
    --it;
    // A symbol of size 0 (assembly without .size) covers up to the next one.
    if (it->size != 0 && offset >= it->value + it->size) return nullptr;
    return it->name;
  }

 private:
  struct Symbol {
    std::uintptr_t value;
    std::uintptr_t size;
    const char* name;
  };

  void load(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Elf64_Ehdr))) {
      ::close(fd);
      return;
    }
    void* map = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) return;
    const auto* base = static_cast<const unsigned char*>(map);
    const auto size = static_cast<std::size_t>(st.st_size);
    const auto* header = reinterpret_cast<const Elf64_Ehdr*>(base);
    if (std::memcmp(header->e_ident, ELFMAG, SELFMAG) != 0 ||
        header->e_ident[EI_CLASS] != ELFCLASS64 || header->e_shentsize != sizeof(Elf64_Shdr) ||
        header->e_shoff == 0 || header->e_shoff + header->e_shnum * sizeof(Elf64_Shdr) > size) {
      ::munmap(map, size);
      return;
    }
    const auto* sections = reinterpret_cast<const Elf64_Shdr*>(base + header->e_shoff);
    // .symtab has every function; .dynsym only the exported ones (a stripped object).
    for (Elf64_Word wanted : {Elf64_Word{SHT_SYMTAB}, Elf64_Word{SHT_DYNSYM}}) {
      for (unsigned i = 0; i < header->e_shnum; ++i) {
        const Elf64_Shdr& table = sections[i];
        if (table.sh_type != wanted || table.sh_link >= header->e_shnum) continue;
        const Elf64_Shdr& strings = sections[table.sh_link];
        if (table.sh_offset + table.sh_size > size || strings.sh_offset + strings.sh_size > size ||
            table.sh_entsize != sizeof(Elf64_Sym)) {
          continue;
        }
        const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + table.sh_offset);
        const auto* names = reinterpret_cast<const char*>(base + strings.sh_offset);
        const std::size_t count = table.sh_size / sizeof(Elf64_Sym);
        for (std::size_t k = 0; k < count; ++k) {
          const Elf64_Sym& sym = syms[k];
          const unsigned type = ELF64_ST_TYPE(sym.st_info);
          if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_value == 0 ||
              sym.st_shndx == SHN_UNDEF || sym.st_name >= strings.sh_size) {
            continue;
          }
          symbols_.push_back({sym.st_value, sym.st_size, names + sym.st_name});
        }
      }
      if (!symbols_.empty()) break;
    }
    std::sort(symbols_.begin(), symbols_.end(),
              [](const Symbol& a, const Symbol& b) { return a.value < b.value; });
    // The mapping is kept: the names live in it.
  }

  std::vector<Symbol> symbols_;
};

struct Module {
  std::string path;        // as the dynamic loader names it ("" for the executable)
  std::uintptr_t bias = 0;  // load address minus the object's own addresses
};

// The loaded object containing `address`, if any.
bool findModule(const void* address, Module& out) {
  struct Search {
    std::uintptr_t address;
    Module* out;
    bool found;
  } search{reinterpret_cast<std::uintptr_t>(address), &out, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* arg) -> int {
        auto* s = static_cast<Search*>(arg);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& segment = info->dlpi_phdr[i];
          if (segment.p_type != PT_LOAD) continue;
          const std::uintptr_t begin = info->dlpi_addr + segment.p_vaddr;
          if (s->address >= begin && s->address < begin + segment.p_memsz) {
            s->out->path = info->dlpi_name != nullptr ? info->dlpi_name : "";
            s->out->bias = info->dlpi_addr;
            s->found = true;
            return 1;
          }
        }
        return 0;
      },
      &search);
  return search.found;
}

std::string executablePath() {
  char buffer[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0) return "/proc/self/exe";
  return std::string(buffer, static_cast<std::size_t>(n));
}

// Never destroyed: a dump thread may still symbolize while the process exits.
const ElfSymbols& symbolsOf(const std::string& path) {
  static std::mutex* const mutex = new std::mutex;
  static auto* const cache = new std::map<std::string, std::unique_ptr<ElfSymbols>>;
  std::lock_guard<std::mutex> lock(*mutex);
  std::unique_ptr<ElfSymbols>& entry = (*cache)[path];
  if (!entry) entry = std::make_unique<ElfSymbols>(path);
  return *entry;
}

// The mangled name of the function a compiler clone was made from:
//  - g++ names a coroutine's body "<name>.actor" with a parameter of the frame's type,
//    whose name embeds the coroutine's own mangled name as "<length><original>.Frame":
//    the original is what the user wrote;
//  - other clones end in suffixes ("._omp_fn.0", ".isra.0", ".cold", clang++ ".resume").
// A mangled name itself has no '.'.
std::string originalMangledName(const std::string& symbol) {
  if (symbol.compare(0, 2, "_Z") != 0) return symbol;
  const std::size_t frame = symbol.rfind(".Frame");
  if (frame != std::string::npos) {
    const std::size_t end = frame + 6;  // the source name is "<original>.Frame"
    for (std::size_t p = frame; p-- > 0;) {
      if (symbol.compare(p, 2, "_Z") != 0) continue;
      const std::string length = std::to_string(end - p);
      if (p >= length.size() && symbol.compare(p - length.size(), length.size(), length) == 0) {
        return symbol.substr(p, frame - p);
      }
    }
  }
  return symbol.substr(0, symbol.find('.'));
}

std::string demangle(const char* symbol) {
  const std::string mangled = originalMangledName(symbol);
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : symbol;
  std::free(demangled);
  return name;
}

// Runs `addr2line -a -f -C -i -e <path> <offsets>` and fills file and line of `infos`
// (one per offset). Leaves them empty when addr2line is missing or knows nothing.
void addSourceLines(const std::string& path, const std::vector<std::uintptr_t>& offsets,
                    const std::vector<SymbolInfo*>& infos) {
  int pipeFds[2];
  if (::pipe2(pipeFds, O_CLOEXEC) != 0) return;
  std::vector<std::string> args = {"addr2line", "-a", "-f", "-C", "-i", "-e", path};
  for (std::uintptr_t offset : offsets) {
    char hex[32];
    std::snprintf(hex, sizeof(hex), "0x%llx", static_cast<unsigned long long>(offset));
    args.emplace_back(hex);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipeFds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int spawned = ::posix_spawnp(&pid, "addr2line", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipeFds[1]);
  std::string output;
  if (spawned == 0) {
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::read(pipeFds[0], buffer, sizeof(buffer));
      if (n > 0) {
        output.append(buffer, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        break;
      }
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  ::close(pipeFds[0]);
  // Per address: "0x<addr>", then (function, file:line) pairs from the innermost inlined
  // call out to the real function. The last pair is the line in the real function.
  std::size_t index = 0;
  std::size_t pos = 0;
  std::vector<std::string> lines;
  auto flush = [&] {
    if (index == 0 || index > infos.size() || lines.size() < 2) return;
    const std::string& location = lines[lines.size() - 1];
    const std::size_t colon = location.rfind(':');
    if (colon == std::string::npos || location.compare(0, 2, "??") == 0) return;
    const unsigned line = static_cast<unsigned>(std::strtoul(location.c_str() + colon + 1, nullptr, 10));
    if (line == 0) return;
    SymbolInfo& info = *infos[index - 1];
    info.file = location.substr(0, colon);
    info.line = line;
  };
  while (pos < output.size()) {
    std::size_t end = output.find('\n', pos);
    if (end == std::string::npos) end = output.size();
    std::string line = output.substr(pos, end - pos);
    pos = end + 1;
    if (line.compare(0, 2, "0x") == 0 && lines.size() % 2 == 0) {
      flush();
      lines.clear();
      ++index;
      continue;
    }
    lines.push_back(std::move(line));
  }
  flush();
}

}  // namespace

std::vector<SymbolInfo> symbolize(const std::vector<const void*>& addresses, bool sourceLines) {
  std::vector<SymbolInfo> infos(addresses.size());
  // Per object: the offsets to look up in it, and where their answers go.
  std::map<std::string, std::pair<std::vector<std::uintptr_t>, std::vector<SymbolInfo*>>> byObject;
  const std::string self = executablePath();
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    Module module;
    if (addresses[i] == nullptr || !findModule(addresses[i], module)) continue;
    const std::string path = module.path.empty() ? self : module.path;
    if (path.find("linux-vdso") != std::string::npos) continue;
    const std::uintptr_t offset = reinterpret_cast<std::uintptr_t>(addresses[i]) - module.bias;
    infos[i].object = path;
    if (const char* name = symbolsOf(path).find(offset)) infos[i].function = demangle(name);
    auto& group = byObject[path];
    group.first.push_back(offset);
    group.second.push_back(&infos[i]);
  }
  if (sourceLines) {
    for (auto& [path, group] : byObject) addSourceLines(path, group.first, group.second);
  }
  return infos;
}

}  // namespace weft
