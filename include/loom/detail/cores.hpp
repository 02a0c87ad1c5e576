/// \file
/// The cores this process may run on, for loom's thread counts: the kernels' runtime default
/// (runtime/parallel.hpp), the compiler's own threads (compile_threads.hpp) and the measurer's
/// parallel builds.
#ifndef LOOM_DETAIL_CORES_HPP
#define LOOM_DETAIL_CORES_HPP

#include "loom/config.hpp"

#include <algorithm>
#include <thread>

#ifdef __linux__
#include <sched.h>
#endif

LOOM_BEGIN_NAMESPACE
namespace detail {

/// The cores this process may run on (taskset, cgroup cpusets), not the machine's; at least 1.
inline int available_cores() noexcept {
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace detail
LOOM_END_NAMESPACE

#endif  // LOOM_DETAIL_CORES_HPP
