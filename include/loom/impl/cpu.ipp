// Bodies of loom/cpu.hpp.
#include "loom/cpu.hpp"

#include <algorithm>

LOOM_BEGIN_NAMESPACE

LOOM_DECL Kernel build(const Task& task, const sched::State& state, const BuildOptions& options) {
  LOOM_USER_CHECK(task.target.is_cpu(), "loom.runtime.E610")
      << "build(): task targets " << task.target.to_string()
      << " but loom/cpu.hpp builds for the CPU; use loom/cuda.hpp";
  LOOM_USER_CHECK(state.dag().workload_key() == task.workload_key(), "loom.runtime.E611")
      << "build(): the schedule was made for workload " << state.dag().workload_key()
      << ", not for this task's " << task.workload_key();
  ir::LoweredFunc f = lower::lower(state, options.name, options.lower);
  auto compiled = std::make_shared<cpu_jit::CompiledKernel>(cpu_jit::compile(f, options.codegen));
  std::vector<KernelArg> args;
  const auto dag_args = task.dag->arguments();
  for (size_t i = 0; i < dag_args.size(); ++i)
    args.push_back({dag_args[i].name(), dag_args[i].dtype(), dag_args[i].shape(),
                    i >= task.dag->inputs().size()});
  Kernel::entry_fn fn = compiled->fn;
  return Kernel(options.name, std::move(args), fn, std::shared_ptr<void>(compiled, compiled.get()),
                ir::to_string(f.body));
}

LOOM_DECL Kernel build(const Task& task, const BuildOptions& options) {
  return build(task, sched::default_schedule(task.dag, task.target), options);
}

LOOM_DECL PackedKernel build_with_packed_input(const Task& task, const sched::State& state,
                                               const std::string& input,
                                               const BuildOptions& options) {
  LOOM_USER_CHECK(state.dag().workload_key() == task.workload_key(), "loom.runtime.E611")
      << "build_with_packed_input(): the schedule was made for workload "
      << state.dag().workload_key() << ", not for this task's " << task.workload_key();
  sched::LayoutRewrite rw = sched::rewrite_layout(state, input);
  BuildOptions pack_options = options;
  pack_options.name = options.name + "_pack_" + input;
  // A pack kernel runs once per weight value; LLVM 19's O3 pipeline takes seconds on some of
  // them (5.7–12.5 s measured, 82 ms at O2).
  pack_options.codegen.opt_level = std::min(pack_options.codegen.opt_level, 2);
  PackedKernel out;
  out.pack = build(Task(rw.transform, task.target), pack_options);
  out.kernel = build(Task(rw.dag, task.target), rw.state, options);
  out.input = input;
  out.packed_shape = rw.packed.shape();
  out.argument = rw.argument;
  return out;
}

LOOM_END_NAMESPACE
