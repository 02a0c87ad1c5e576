// Bodies of loom/cpu.hpp.
#include "loom/cpu.hpp"

#include "loom/backend/measure_data.hpp"
#include "loom/dag/evaluate.hpp"
#include "loom/runtime/buffer.hpp"
#include "loom/runtime/workspace.hpp"

#include <algorithm>
#include <random>
#include <sstream>

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

LOOM_DECL std::string spot_check(const Task& task, const Kernel& kernel, int points, double rtol,
                                 double atol) {
  namespace md = backend::measure_data;
  const ComputeDAG& dag = *task.dag;
  const std::vector<ir::Tensor> args = dag.arguments();
  const size_t num_inputs = dag.inputs().size();
  std::vector<aligned_vector<std::byte>> storage(args.size());
  std::vector<void*> pointers(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const int64_t n = args[i].num_elements();
    storage[i].resize(static_cast<size_t>(n * args[i].dtype().bytes()));
    pointers[i] = storage[i].data();
    if (i < num_inputs)
      md::fill_random(pointers[i], args[i].dtype(), n, 0x5907C4EC + i);
    else
      md::poison(pointers[i], args[i].dtype(), n);
  }
  if (const int32_t status = kernel.run_unchecked(pointers.data()); status != 0)
    return "the kernel stopped before the end: " + runtime::kernel_status_text(status);
  const std::vector<const void*> inputs(pointers.begin(), pointers.begin() + num_inputs);
  std::mt19937_64 rng(0x5907C4EC);
  for (size_t o = 0; o + num_inputs < args.size(); ++o) {
    const ir::Tensor& out = args[num_inputs + o];
    const int64_t n = out.num_elements();
    std::vector<int64_t> at;
    // The first and last elements (edges of every tile) and random ones between.
    at.push_back(0);
    if (n > 1) at.push_back(n - 1);
    while (static_cast<int64_t>(at.size()) < std::min<int64_t>(points, n))
      at.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(n)));
    const std::vector<double> want = evaluate_points(dag, inputs, o, at);
    for (size_t k = 0; k < at.size(); ++k) {
      const double g = md::value_at(pointers[num_inputs + o], out.dtype(), at[k]);
      const double w = want[k];
      if (md::agrees(g, w, out.dtype(), rtol, atol)) continue;
      std::ostringstream why;
      why.precision(9);
      why << "output '" << out.name() << "' at " << md::coordinates(at[k], out.shape()) << " is "
          << g << ", the interpreter says " << w;
      return why.str();
    }
  }
  return {};
}

LOOM_END_NAMESPACE
