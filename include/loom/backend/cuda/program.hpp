/// \file
/// A GPU program ready to run (layer backend/cuda, namespace loom::cuda): the bridge between a
/// `lower::GpuProgram` (kernels as IR) and the driver (backend/cuda/driver.hpp).
///
/// ```cpp
/// lower::GpuProgram g = lower::lower_gpu(state, target, "gemm");
/// cuda::CompiledProgram c = cuda::compile_program(g, target.arch);  // CUDA C + NVRTC, no GPU
/// cuda::Program p(c.image, c.plan);                                 // loaded on the device
/// p.launch({a.ptr(), b.ptr(), c.ptr()});                            // every kernel, in order
/// ```
///
/// A `LaunchPlan` is the part of a GpuProgram the host needs to launch it (kernel names, launch
/// shapes, which buffer goes to which parameter, workspace sizes): plain data, so that a process
/// that never saw the IR (the measurer's worker) can run the program from its image and its plan.
#ifndef LOOM_BACKEND_CUDA_PROGRAM_HPP
#define LOOM_BACKEND_CUDA_PROGRAM_HPP

#include "loom/backend/cuda/driver.hpp"
#include "loom/lower/gpu.hpp"

#include <array>
#include <cstddef>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace cuda {

/// One kernel launch of a plan.
struct KernelLaunch {
  std::string name;
  std::array<unsigned, 3> grid{1, 1, 1};
  std::array<unsigned, 3> block{1, 1, 1};
  /// Per kernel parameter, the buffer it receives: i < number of program arguments is argument
  /// i, otherwise workspace i - number of arguments.
  std::vector<int> buffers;
  /// Dynamic shared memory per block (`cuda::dynamic_shared_bytes`): 0 for a kernel whose shared
  /// arrays are static; Program allows the kernel this much when it loads it.
  unsigned dynamic_shared_bytes = 0;
};

/// How to launch a program: its buffers and its kernels in order.
struct LaunchPlan {
  /// Bytes of each program argument (the kernel arguments of the lowered function, in order).
  std::vector<std::size_t> arg_bytes;
  /// Whether a kernel of the program writes argument i (an output).
  std::vector<bool> arg_written;
  /// Bytes of each workspace (intermediate tensors in global memory).
  std::vector<std::size_t> workspace_bytes;
  std::vector<KernelLaunch> kernels;
};

/// The plan of `program`. Throws loom::user_error `[loom.cuda.E920]` when a launch dimension
/// does not fit CUDA's unsigned launch parameters or a kernel parameter is neither an argument
/// nor a workspace of the program.
LOOM_DECL LaunchPlan make_launch_plan(const lower::GpuProgram& program);

/// What compile_program makes the loadable image of.
enum class ImageKind {
  cubin,  ///< machine code for exactly the target's architecture: loads without a JIT
  ptx,    ///< PTX: runs on that architecture and newer ones, through the driver's JIT
};

/// A program compiled for one architecture: its CUDA C source, the image a Module loads (CUBIN
/// or PTX) and its plan. Making it needs NVRTC but no GPU.
struct CompiledProgram {
  std::string source;
  std::string image;
  ImageKind kind = ImageKind::cubin;
  LaunchPlan plan;
};

/// Prints `program` as CUDA C (backend/cuda/codegen.hpp) and compiles it with NVRTC for `arch`
/// (backend/cuda/nvrtc.hpp), with NVRTC's optimizer on. Throws what those throw.
LOOM_DECL CompiledProgram compile_program(const lower::GpuProgram& program, const std::string& arch,
                                          const std::vector<std::string>& nvrtc_options = {},
                                          ImageKind kind = ImageKind::cubin);

/// A compiled program loaded into a context, with its workspaces allocated: launch() runs all of
/// its kernels in order on the default stream. Move-only.
class Program {
 public:
  Program() = default;
  /// Loads `image` (a CUBIN or PTX: Module) and looks up every kernel of `plan`, and allocates
  /// the workspaces. Throws the driver's errors (`[loom.cuda.E913]` for an image the driver
  /// rejects, `[loom.cuda.E914]` for a missing kernel).
  Program(const std::string& image, LaunchPlan plan, Context& context = Context::get());

  /// Launches every kernel, asynchronously. `args` are the device addresses of the program
  /// arguments, in order. Throws loom::user_error `[loom.cuda.E921]` for the wrong number of
  /// arguments, `[loom.cuda.E925]` for an output whose bytes overlap another argument's (the
  /// generated code assumes none does; inputs may share), and the driver's launch errors
  /// (`[loom.cuda.E915]`, `[loom.cuda.E916]`).
  void launch(const std::vector<CUdeviceptr>& args);

  const LaunchPlan& plan() const noexcept { return plan_; }
  const Module& module() const noexcept { return module_; }
  /// The kernels, in launch order: what the device made of each (Function::num_registers,
  /// Function::local_memory: a tile whose accumulators spilled has local memory).
  const std::vector<Function>& functions() const noexcept { return functions_; }

 private:
  LaunchPlan plan_;
  Module module_;
  std::vector<Function> functions_;
  std::vector<DeviceBuffer> workspaces_;
};

}  // namespace cuda
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/backend/cuda/impl/program.ipp"
#endif

#endif  // LOOM_BACKEND_CUDA_PROGRAM_HPP
