/// \file
/// CUDA C code generation (backend/cuda): the kernels of a `lower::GpuProgram` as CUDA C source,
/// one `extern "C" __global__` function per kernel, ready for NVRTC (backend/cuda/nvrtc.hpp).
/// The source needs no header: NVRTC provides the math functions it calls.
///
/// What the printer decides:
///  - indices are 32-bit (`int`) when every buffer of the program has fewer than 2^31 elements,
///    otherwise 64-bit: 64-bit integer arithmetic costs several instructions per operation on a
///    GPU;
///  - floor division and modulo by a positive constant become `/` and `%` where the dividend is
///    provably non-negative (almost every index), the exact helpers elsewhere;
///  - buffers a kernel only reads are `const T* __restrict__` (read-only data cache);
///  - loops marked Unrolled (auto_unroll_max_step, or small vectorized loops) get `#pragma unroll`;
///    a thread's arrays are local arrays (registers once the loops over them are unrolled),
///    shared buffers `__shared__` arrays, barriers `__syncthreads()`.
#ifndef LOOM_BACKEND_CUDA_CODEGEN_HPP
#define LOOM_BACKEND_CUDA_CODEGEN_HPP

#include "loom/lower/gpu.hpp"

#include <string>

LOOM_BEGIN_NAMESPACE
namespace cuda {

/// The CUDA C source of every kernel of `program`, named as in `program.kernels[i].name`, with
/// its parameters in the order of `program.kernels[i].params`. Throws loom::backend_error
/// `[loom.cuda.E950]` for IR the printer cannot express (vector expressions), `[loom.cuda.E951]`
/// for a reduction across threads of 8- or 16-bit values.
std::string to_cuda_source(const lower::GpuProgram& program);

/// The most shared memory a kernel may declare statically (`__shared__` arrays): past it, the
/// CUDA form takes the kernel's shared arrays from dynamic shared memory, which a launch asks for
/// and a kernel must be allowed first (`Function::set_max_dynamic_shared_memory`, up to
/// `DeviceInfo::max_shared_memory_per_block_optin`: 227 KiB on an H100).
inline constexpr int64_t static_shared_memory_limit = 48 * 1024;

/// The bytes of dynamic shared memory kernel `k` launches with: 0 when its shared arrays and
/// AllReduce scratch fit `static_shared_memory_limit`, else its shared arrays', each at a
/// 16-byte boundary (AllReduce scratch stays static).
int64_t dynamic_shared_bytes(const lower::GpuKernel& k);

}  // namespace cuda
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/backend/cuda/impl/codegen.ipp"
#endif

#endif  // LOOM_BACKEND_CUDA_CODEGEN_HPP
