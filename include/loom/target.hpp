/// \file
/// Targets: the hardware a kernel is built for (CPU host or a CUDA architecture) and the
/// parameters the schedule search and the default schedule need.
#ifndef LOOM_TARGET_HPP
#define LOOM_TARGET_HPP

#include "loom/config.hpp"

#include <algorithm>
#include <string>
#include <thread>

LOOM_BEGIN_NAMESPACE

struct Target {
  enum class Kind { CPU, CUDA };
  Kind kind = Kind::CPU;
  std::string arch;                  ///< "host" for the CPU, "sm_90" etc. for CUDA
  int num_cores = 1;                 ///< CPU cores kernels may use
  int vector_bits = 128;             ///< widest SIMD register (CPU)
  int max_threads_per_block = 1024;  ///< CUDA
  /// CUDA, bytes: what a block may use, static and dynamic (cuda::device_target sets the
  /// device's opt-in limit; Target::cuda keeps the 48 KiB every CUDA GPU allows).
  int max_shared_memory_per_block = 48 * 1024;
  int warp_size = 32;  ///< CUDA
  /// CUDA: float32 matrix products may run on tensor cores with TF32 operands (the inputs
  /// rounded to 10 mantissa bits, products accumulated in float32; PyTorch's `allow_tf32`). Off
  /// by default: it changes results by up to about 1e-3 relative. Part of the target's name, so
  /// TF32 programs never stand in for float32 ones in a tuning log.
  bool tf32 = false;
  /// CUDA: the blocks an SM should hold at once, given to ptxas as every kernel's
  /// `__launch_bounds__(threads, min_blocks_per_sm)`; 0 gives only the threads. With the
  /// threads alone ptxas trades registers for occupancy and may spill with registers to spare
  /// (a sampled tile at 512 threads: 40 registers under a cap of 128, 24 bytes spilled); with 1
  /// it uses up to the block's share: of 216 sampled ResNet conv and bf16 GEMM tensor-core
  /// programs (ptxas 13.0, sm_90) 14 spill rather than 21, about as many bytes, at 130
  /// registers a thread on average rather than 100, so fewer blocks an SM.
  /// Which runs faster is the device's to say (bench_gpu --min-blocks). Part of the target's
  /// name, so programs tuned under one never stand in for the other's.
  int min_blocks_per_sm = 0;

  bool is_cpu() const { return kind == Kind::CPU; }
  bool is_cuda() const { return kind == Kind::CUDA; }
  /// Lanes of a vector register for elements of `bytes` bytes.
  int vector_lanes(int bytes) const { return std::max(1, vector_bits / 8 / bytes); }

  /// The machine this process runs on: its core count and SIMD width (AVX-512: 512 bits).
  static Target host() {
    Target t;
    t.arch = "host";
    t.num_cores = std::max(1u, std::thread::hardware_concurrency());
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
      t.vector_bits = 512;
    else if (__builtin_cpu_supports("avx2"))
      t.vector_bits = 256;
#endif
    return t;
  }
  /// An NVIDIA GPU of the given architecture ("sm_90" for the H100).
  static Target cuda(std::string arch = "sm_90") {
    Target t;
    t.kind = Kind::CUDA;
    t.arch = std::move(arch);
    t.num_cores = 132;
    t.vector_bits = 128;
    t.max_shared_memory_per_block = 48 * 1024;
    return t;
  }
  /// This target with TF32 tensor cores allowed (`tf32`).
  Target with_tf32() const {
    Target t = *this;
    t.tf32 = true;
    return t;
  }
  /// This target with kernels bounded to `blocks` blocks an SM (`min_blocks_per_sm`).
  Target with_min_blocks_per_sm(int blocks) const {
    Target t = *this;
    t.min_blocks_per_sm = blocks;
    return t;
  }
  /// The compute capability of a CUDA target's architecture ("sm_90a" -> 90); 0 for the CPU or
  /// an architecture not named "sm_<digits>".
  int compute_capability() const {
    if (!is_cuda() || arch.rfind("sm_", 0) != 0) return 0;
    int v = 0;
    for (size_t c = 3; c < arch.size() && arch[c] >= '0' && arch[c] <= '9'; ++c)
      v = v * 10 + (arch[c] - '0');
    return v;
  }
  /// Whether tensor-core tiles may run as Hopper's warpgroup MMAs (`wgmma.mma_async`,
  /// lower::WgmmaNest): the architecture-specific target "sm_90a" only, whose code runs on
  /// compute capability 9.0 alone (NVRTC's compute_90a).
  bool warpgroup_mma() const { return is_cuda() && arch == "sm_90a"; }
  std::string to_string() const {
    if (is_cpu()) return "llvm -mcpu=" + arch;
    return "cuda -arch=" + arch + (tf32 ? " -tf32" : "") +
           (min_blocks_per_sm > 0 ? " -min-blocks=" + std::to_string(min_blocks_per_sm) : "");
  }
};

LOOM_END_NAMESPACE

#endif  // LOOM_TARGET_HPP
