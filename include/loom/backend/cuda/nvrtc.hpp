/// \file
/// NVRTC, NVIDIA's run-time CUDA C++ compiler, loaded with dlopen (layer backend/cuda, namespace
/// loom::cuda): CUDA source in, PTX text out.
///
/// No CUDA header or library is needed to build this: the handful of NVRTC entry points loom uses
/// are declared in the bodies (`impl/nvrtc.ipp`) and looked up with dlsym the first time one is
/// needed. A machine without NVRTC builds and runs loom; nvrtc_available() says false there and
/// compile_to_ptx() throws loom::backend_error `[loom.cuda.E901]` saying how to get NVRTC.
/// Compiling to PTX needs no GPU and no driver (loading the PTX does: backend/cuda/driver.hpp).
///
/// Where NVRTC comes from, tried in this order the first time it is needed:
/// 1. `LOOM_NVRTC_LIBRARY` (a path or a soname), when set. It is then the only candidate: a
///    library named on purpose that fails to load is reported, not silently replaced.
/// 2. "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so" through the dynamic loader's search path
///    (LD_LIBRARY_PATH, ldconfig's cache);
/// 3. `/usr/local/cuda/lib64/libnvrtc.so*`, newest name first.
/// The library stays loaded until the process exits.
///
/// Thread safety: every function here may be called from several threads at once. Loading
/// happens once (the first caller loads, the others wait), and each compilation has its own
/// NVRTC program, which NVRTC compiles concurrently.
#ifndef LOOM_BACKEND_CUDA_NVRTC_HPP
#define LOOM_BACKEND_CUDA_NVRTC_HPP

#include "loom/config.hpp"
#include "loom/error.hpp"

#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace cuda {

/// Whether NVRTC could be loaded (see the file comment for where it is looked for). When `why`
/// is given it receives what was tried: the library loaded and its version, or every candidate
/// with the loader's reason for refusing it.
LOOM_DECL bool nvrtc_available(std::string* why = nullptr);

/// The version of the loaded NVRTC ({13, 0} for CUDA 13.0).
struct NvrtcVersion {
  int major = 0;
  int minor = 0;
};

/// The version of the loaded NVRTC. Throws loom::backend_error `[loom.cuda.E901]` when NVRTC
/// cannot be loaded.
LOOM_DECL NvrtcVersion nvrtc_version();

/// The virtual architectures the loaded NVRTC compiles for, as compute capabilities times ten
/// ({75, 80, 86, ..., 120} for NVRTC 13.0), ascending. Throws `[loom.cuda.E901]` without NVRTC.
LOOM_DECL std::vector<int> nvrtc_supported_archs();

/// The architecture to compile for so that the PTX runs on a device of compute capability
/// `major.minor`: "sm_<major><minor>" when NVRTC supports it, otherwise the newest supported one
/// below it (PTX for compute_X runs on every device of capability X or newer, through the
/// driver's JIT). Throws `[loom.cuda.E901]` without NVRTC and loom::user_error
/// `[loom.cuda.E904]` when NVRTC supports nothing that old.
LOOM_DECL std::string nvrtc_arch_for(int compute_major, int compute_minor);

/// Compiles CUDA C++ `source` to PTX for `arch` and returns the PTX text.
///
/// - `arch` is a real architecture "sm_90" (also "sm_90a") or a virtual one "compute_90": either
///   way NVRTC gets `--gpu-architecture=compute_90`, and the PTX says `.target sm_90`. Anything
///   else is a loom::user_error `[loom.cuda.E904]`.
/// - Options always given: `--gpu-architecture=compute_XX`, `--std=c++17`, and `-default-device`
///   (a function without an execution-space annotation is a `__device__` function, so generated
///   helpers need none). `extra_options` come after them, e.g. `--use_fast_math`, `-lineinfo`,
///   `--maxrregcount=64`, `-DNAME=value`.
/// - Kernels that the host looks up by name should be `extern "C"`; otherwise their PTX names are
///   C++-mangled.
/// - `program_name` is the file name NVRTC uses in its messages ("loom_kernel.cu(3): error: ...").
///
/// Throws loom::backend_error:
/// - `[loom.cuda.E901]` when NVRTC cannot be loaded (the message says how to install it or
///   point LOOM_NVRTC_LIBRARY at it);
/// - `[loom.cuda.E902]` when NVRTC refuses the source or the options; the message names the
///   program and the options and carries NVRTC's full log;
/// - `[loom.cuda.E903]` when another NVRTC call fails (creating the program, fetching the PTX).
LOOM_DECL std::string compile_to_ptx(const std::string& source, const std::string& arch = "sm_90",
                                     const std::vector<std::string>& extra_options = {},
                                     const std::string& program_name = "loom_kernel.cu");

/// Compiles CUDA C++ `source` to machine code (a CUBIN) for the real architecture of `arch`
/// ("sm_90" or "compute_90" both give sm_90 code): no JIT when the module is loaded, so loading
/// is fast, but the image runs only on devices of that architecture. Same options and errors as
/// compile_to_ptx; `[loom.cuda.E903]` also when this NVRTC cannot emit CUBINs (before 11.1).
LOOM_DECL std::string compile_to_cubin(const std::string& source, const std::string& arch = "sm_90",
                                       const std::vector<std::string>& extra_options = {},
                                       const std::string& program_name = "loom_kernel.cu");

}  // namespace cuda
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/backend/cuda/impl/nvrtc.ipp"
#endif

#endif  // LOOM_BACKEND_CUDA_NVRTC_HPP
