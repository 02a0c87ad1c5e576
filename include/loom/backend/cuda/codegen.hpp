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

}  // namespace cuda
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/backend/cuda/impl/codegen.ipp"
#endif

#endif  // LOOM_BACKEND_CUDA_CODEGEN_HPP
