// Bodies of loom/backend/cuda/program.hpp.
#include "loom/backend/cuda/program.hpp"

#include "loom/backend/cuda/codegen.hpp"
#include "loom/backend/cuda/nvrtc.hpp"
#include "loom/error.hpp"
#include "loom/runtime/buffer.hpp"

#include <limits>
#include <memory>
#include <span>

LOOM_BEGIN_NAMESPACE
namespace cuda {

LOOM_DECL LaunchPlan make_launch_plan(const lower::GpuProgram& program) {
  LaunchPlan plan;
  auto bytes_of = [](const ir::Buffer& b) {
    return static_cast<std::size_t>(b->num_elements()) * static_cast<std::size_t>(b->dtype.bytes());
  };
  for (const ir::Buffer& a : program.args) plan.arg_bytes.push_back(bytes_of(a));
  plan.arg_written.assign(program.args.size(), false);
  for (const lower::GpuKernel& k : program.kernels)
    for (const ir::Buffer& w : k.written_params())
      for (std::size_t i = 0; i < program.args.size(); ++i)
        if (program.args[i].get() == w.get()) plan.arg_written[i] = true;
  for (const ir::Buffer& w : program.workspaces) plan.workspace_bytes.push_back(bytes_of(w));
  auto dim = [&](int64_t x, const std::string& kernel) {
    LOOM_USER_CHECK(x >= 1 && x <= std::numeric_limits<unsigned>::max(), "loom.cuda.E920")
        << "kernel " << kernel << " of program " << program.name << " has a launch dimension of "
        << x << ", outside CUDA's range; the schedule needs fewer blocks or threads";
    return static_cast<unsigned>(x);
  };
  for (const lower::GpuKernel& k : program.kernels) {
    KernelLaunch launch;
    launch.name = k.name;
    for (int d = 0; d < 3; ++d) {
      launch.grid[d] = dim(k.grid[d], k.name);
      launch.block[d] = dim(k.block[d], k.name);
    }
    for (const ir::Buffer& p : k.params) {
      int slot = -1;
      for (std::size_t i = 0; i < program.args.size() && slot < 0; ++i)
        if (program.args[i].get() == p.get()) slot = static_cast<int>(i);
      for (std::size_t i = 0; i < program.workspaces.size() && slot < 0; ++i)
        if (program.workspaces[i].get() == p.get())
          slot = static_cast<int>(program.args.size() + i);
      LOOM_USER_CHECK(slot >= 0, "loom.cuda.E920")
          << "kernel " << k.name << " of program " << program.name << " takes buffer " << p->name
          << ", which is neither an argument nor a workspace of the program";
      launch.buffers.push_back(slot);
    }
    launch.dynamic_shared_bytes = static_cast<unsigned>(dynamic_shared_bytes(k));
    plan.kernels.push_back(std::move(launch));
  }
  return plan;
}

LOOM_DECL CompiledProgram compile_program(const lower::GpuProgram& program, const std::string& arch,
                                          const std::vector<std::string>& nvrtc_options,
                                          ImageKind kind) {
  CompiledProgram out;
  out.plan = make_launch_plan(program);
  out.source = to_cuda_source(program);
  out.kind = kind;
  out.image = kind == ImageKind::cubin
                  ? compile_to_cubin(out.source, arch, nvrtc_options, program.name + ".cu")
                  : compile_to_ptx(out.source, arch, nvrtc_options, program.name + ".cu");
  return out;
}

LOOM_DECL Program::Program(const std::string& image, LaunchPlan plan, Context& context)
    : plan_(std::move(plan)), module_(image, context) {
  for (const KernelLaunch& k : plan_.kernels) {
    functions_.push_back(module_.function(k.name));
    if (k.dynamic_shared_bytes > 0)
      functions_.back().set_max_dynamic_shared_memory(static_cast<int>(k.dynamic_shared_bytes));
  }
  for (std::size_t bytes : plan_.workspace_bytes) workspaces_.emplace_back(bytes, context);
}

LOOM_DECL void Program::launch(const std::vector<CUdeviceptr>& args) {
  LOOM_USER_CHECK(args.size() == plan_.arg_bytes.size(), "loom.cuda.E921")
      << "Program::launch got " << args.size() << " arguments; the program takes "
      << plan_.arg_bytes.size() << " (its inputs, then its outputs)";
  std::vector<std::uintptr_t> begin(args.begin(), args.end());
  const std::vector<bool>& w = plan_.arg_written;
  const std::unique_ptr<bool[]> written = std::make_unique<bool[]>(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) written[i] = i < w.size() && w[i];
  const auto [out, other] =
      overlapping_output(begin, plan_.arg_bytes, std::span<const bool>(written.get(), args.size()));
  LOOM_USER_CHECK(out < 0, "loom.cuda.E925")
      << "Program::launch: argument " << out << " (an output, " << plan_.arg_bytes[out]
      << " bytes) overlaps argument " << other << " (" << plan_.arg_bytes[other]
      << " bytes): the kernels would write what they still read or write elsewhere. Pass "
         "separate device buffers (copy the input first for an in-place update)";
  std::vector<CUdeviceptr> values;
  std::vector<void*> params;
  for (std::size_t k = 0; k < plan_.kernels.size(); ++k) {
    const KernelLaunch& launch_k = plan_.kernels[k];
    values.clear();
    for (int slot : launch_k.buffers)
      values.push_back(static_cast<std::size_t>(slot) < args.size()
                           ? args[static_cast<std::size_t>(slot)]
                           : workspaces_[static_cast<std::size_t>(slot) - args.size()].ptr());
    params.clear();
    for (CUdeviceptr& v : values) params.push_back(&v);
    cuda::launch(functions_[k], launch_k.grid, launch_k.block, launch_k.dynamic_shared_bytes,
                 params);
  }
}

}  // namespace cuda
LOOM_END_NAMESPACE
