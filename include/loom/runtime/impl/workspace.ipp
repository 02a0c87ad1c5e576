// Bodies of loom/runtime/workspace.hpp: a per-thread cache of freed kernel scratch blocks.
//
// Each block carries a 64-byte header in front of what the kernel sees, holding its usable
// size, so that a block can be freed (and cached) by any thread.
#include "loom/runtime/workspace.hpp"

#include <cstdlib>
#include <pthread.h>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace runtime {
namespace detail {

inline constexpr size_t header_bytes = 64;

struct cached_block {
  unsigned char* base;  // what aligned_alloc returned
  size_t bytes;         // usable bytes after the header
};

struct thread_cache {
  std::vector<cached_block> blocks;  // oldest first
  size_t bytes = 0;
  void release() noexcept {
    for (const cached_block& b : blocks) std::free(b.base);
    blocks.clear();
    bytes = 0;
  }
  ~thread_cache() { release(); }
};

LOOM_DECL thread_cache& cache() noexcept {
  thread_local thread_cache c;
  // A forked child (a measurer's) would otherwise reuse the parent's cached blocks, whose pages
  // it shares copy-on-write: its first call would copy every page it writes, which made a
  // measured first call 10x slower than the program. The child starts with an empty cache.
  static const bool at_fork = [] {
    pthread_atfork(nullptr, nullptr, [] { cache().release(); });
    return true;
  }();
  static_cast<void>(at_fork);
  return c;
}

}  // namespace detail

LOOM_DECL void release_workspace() noexcept { detail::cache().release(); }

LOOM_DECL size_t cached_workspace_bytes() noexcept { return detail::cache().bytes; }

}  // namespace runtime
LOOM_END_NAMESPACE

extern "C" LOOM_DECL void* loom_workspace_alloc(int64_t bytes) noexcept {
  namespace ws = ::loom::runtime::detail;
  const size_t wanted = (static_cast<size_t>(bytes > 0 ? bytes : 1) + 63) / 64 * 64;
  ws::thread_cache& c = ws::cache();
  size_t best = c.blocks.size();
  for (size_t i = 0; i < c.blocks.size(); ++i) {
    const size_t have = c.blocks[i].bytes;
    if (have >= wanted && have / 2 <= wanted &&
        (best == c.blocks.size() || have < c.blocks[best].bytes))
      best = i;
  }
  if (best < c.blocks.size()) {
    ws::cached_block b = c.blocks[best];
    c.blocks.erase(c.blocks.begin() + static_cast<std::ptrdiff_t>(best));
    c.bytes -= b.bytes;
    return b.base + ws::header_bytes;
  }
  auto* base = static_cast<unsigned char*>(std::aligned_alloc(64, wanted + ws::header_bytes));
  if (!base) return nullptr;
  *reinterpret_cast<size_t*>(base) = wanted;
  return base + ws::header_bytes;
}

extern "C" LOOM_DECL void loom_workspace_free(void* block) noexcept {
  namespace ws = ::loom::runtime::detail;
  if (!block) return;
  unsigned char* base = static_cast<unsigned char*>(block) - ws::header_bytes;
  const size_t bytes = *reinterpret_cast<size_t*>(base);
  if (bytes > ::loom::runtime::workspace_cache_limit) {
    std::free(base);
    return;
  }
  ws::thread_cache& c = ws::cache();
  while (!c.blocks.empty() && c.bytes + bytes > ::loom::runtime::workspace_cache_limit) {
    std::free(c.blocks.front().base);
    c.bytes -= c.blocks.front().bytes;
    c.blocks.erase(c.blocks.begin());
  }
  try {
    c.blocks.push_back({base, bytes});
    c.bytes += bytes;
  } catch (...) {
    std::free(base);
  }
}
