// Bodies of loom/network.hpp: compiling a network's tasks, running its groups, tuning them.
#include "loom/network.hpp"

#include "loom/backend/llvm/measurer.hpp"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

LOOM_BEGIN_NAMESPACE

namespace detail {

inline std::string describe(const ir::Tensor& t) {
  std::ostringstream os;
  os << "'" << t.name() << "' (" << ir::to_string(t.dtype()) << "[";
  for (size_t d = 0; d < t.shape().size(); ++d) os << (d ? ", " : "") << t.shape()[d];
  os << "])";
  return os.str();
}

// The placeholder names of the task DAGs that stand for the network's constants, without a
// name that also stands for something else in some task (names are per group).
inline std::vector<std::string> constant_names(const net::Network& n) {
  std::unordered_set<const ir::TensorNode*> constants;
  for (const net::Constant& c : n.constants()) constants.insert(c.tensor.get());
  std::vector<std::string> names;
  std::unordered_set<std::string> other;
  for (const net::FusedGroup& g : n.groups())
    for (size_t k = 0; k < g.inputs.size(); ++k) {
      const std::string& name = g.dag->inputs()[k].name();
      if (!constants.count(g.inputs[k].get()))
        other.insert(name);
      else if (std::find(names.begin(), names.end(), name) == names.end())
        names.push_back(name);
    }
  std::erase_if(names, [&](const std::string& s) { return other.count(s) > 0; });
  return names;
}

}  // namespace detail

LOOM_DECL CompiledNetwork compile(std::shared_ptr<const net::Network> network,
                                  const NetworkOptions& options) {
  LOOM_USER_CHECK(network != nullptr, "loom.net.E1005") << "compile: no network";
  CompiledNetwork c;
  c.state_ = std::make_shared<CompiledNetwork::state>();
  CompiledNetwork::state& s = *c.state_;
  s.network = network;
  const Target host = Target::host();
  const std::vector<std::string> constants = detail::constant_names(*network);
  std::unordered_map<const ir::TensorNode*, const net::Constant*> constant_of;
  for (const net::Constant& c : network->constants()) constant_of[c.tensor.get()] = &c;
  for (const net::NetworkTask& t : network->tasks()) {
    const Task task(t.dag, host);
    std::optional<sched::State> best;
    if (!options.records.empty()) best = best_recorded_schedule(task, options.records);
    const std::string& name = t.dag->outputs()[0].name();
    (best ? s.tuned : s.untuned).push_back(name);
    CompiledNetwork::packed_weight packed;
    std::vector<std::string> packable =
        best ? cpu_jit::LocalMeasurer::packed_inputs(*best, constants) : std::vector<std::string>{};
    // The groups of one workload may differ in what they read there: a weight in one, another
    // layer's output in another (an attention's two matmuls). Pack only a weight of every group.
    if (!packable.empty()) {
      const auto& args = t.dag->inputs();
      const auto at = std::find_if(args.begin(), args.end(), [&](const ir::Tensor& a) {
        return a.name() == packable.front();
      });
      const size_t k = static_cast<size_t>(at - args.begin());
      for (int g : t.groups)
        if (!constant_of.count(network->groups()[g].inputs[k].get())) packable.clear();
    }
    if (packable.empty()) {
      s.kernels.push_back(best ? build(task, *best) : build(task));
      s.packed_weights.push_back(std::move(packed));
      continue;
    }
    // Measured reading the weight in its loop nest's layout: pack it once per group.
    PackedKernel pk = build_with_packed_input(task, *best, packable.front());
    packed.argument = pk.argument;
    packed.shape = pk.packed_shape;
    for (int g : t.groups) {
      const ir::Tensor& weight = network->groups()[g].inputs[static_cast<size_t>(pk.argument)];
      const net::Constant* c = constant_of.at(weight.get());
      int64_t elements = 1;
      for (int64_t e : pk.packed_shape) elements *= e;
      aligned_vector<unsigned char> bytes(static_cast<size_t>(elements * weight.dtype().bytes()));
      pk.pack.run(
          {BufferView(const_cast<unsigned char*>(c->bytes->data()), weight.dtype(), weight.shape()),
           BufferView(bytes.data(), weight.dtype(), pk.packed_shape)});
      packed.per_group.push_back(std::move(bytes));
    }
    s.packed.push_back(name);
    s.kernels.push_back(std::move(pk.kernel));
    s.packed_weights.push_back(std::move(packed));
  }
  if (!options.records.empty() && !s.untuned.empty()) {
    std::cerr << "loom: warning: " << options.records << " has no record of " << s.untuned.size()
              << " of the network's " << network->tasks().size()
              << " tasks; they run their default schedules:";
    for (const std::string& n : s.untuned) std::cerr << ' ' << n;
    std::cerr << '\n';
  }
  s.task_of_group.assign(network->groups().size(), -1);
  s.place_in_task.assign(network->groups().size(), -1);
  for (size_t t = 0; t < network->tasks().size(); ++t)
    for (size_t k = 0; k < network->tasks()[t].groups.size(); ++k) {
      const int g = network->tasks()[t].groups[k];
      s.task_of_group[g] = static_cast<int>(t);
      s.place_in_task[g] = static_cast<int>(k);
    }
  s.arena.resize(static_cast<size_t>(network->memory().peak_bytes));

  // Each group's arguments, once: constants (packed or not) and arena slices fixed here, the
  // caller's buffers filled in by run().
  const net::Network& n = *network;
  std::unordered_map<const ir::TensorNode*, size_t> caller;
  for (size_t i = 0; i < n.inputs().size(); ++i) caller[n.inputs()[i].get()] = i;
  for (size_t o = 0; o < n.outputs().size(); ++o)
    caller[n.outputs()[o].get()] = n.inputs().size() + o;
  std::unordered_map<const ir::TensorNode*, unsigned char*> in_arena;
  s.views.resize(n.groups().size());
  s.caller_slots.resize(n.groups().size());
  for (size_t g = 0; g < n.groups().size(); ++g) {
    const net::FusedGroup& grp = n.groups()[g];
    const ir::Tensor& out = n.dag().ops()[grp.output()];
    if (n.memory().offset[g] >= 0) in_arena[out.get()] = s.arena.data() + n.memory().offset[g];
    std::vector<ir::Tensor> args = grp.inputs;
    args.push_back(out);
    for (size_t a = 0; a < args.size(); ++a) {
      const ir::Tensor& t = args[a];
      void* data = nullptr;
      if (auto it = caller.find(t.get()); it != caller.end())
        s.caller_slots[g].emplace_back(a, it->second);
      else if (auto k = constant_of.find(t.get()); k != constant_of.end())
        data = const_cast<unsigned char*>(k->second->bytes->data());  // kernels only read it
      else
        data = in_arena.at(t.get());
      s.views[g].emplace_back(data, t.dtype(), t.shape());
    }
    const CompiledNetwork::packed_weight& packed =
        s.packed_weights[static_cast<size_t>(s.task_of_group[g])];
    if (packed.argument >= 0) {
      BufferView& v = s.views[g][static_cast<size_t>(packed.argument)];
      auto& bytes = packed.per_group[static_cast<size_t>(s.place_in_task[g])];
      v = BufferView(const_cast<unsigned char*>(bytes.data()), v.dtype, packed.shape);
    }
  }
  return c;
}

LOOM_DECL void CompiledNetwork::run(const std::vector<BufferView>& inputs_then_outputs) const {
  const net::Network& n = *state_->network;
  const size_t ni = n.inputs().size(), no = n.outputs().size();
  LOOM_USER_CHECK(inputs_then_outputs.size() == ni + no, "loom.net.E1005")
      << "CompiledNetwork::run got " << inputs_then_outputs.size() << " buffers; the network takes "
      << ni << " input(s) then " << no << " output(s)";
  for (size_t i = 0; i < ni + no; ++i) {
    const BufferView& v = inputs_then_outputs[i];
    const ir::Tensor& t = i < ni ? n.inputs()[i] : n.outputs()[i - ni];
    LOOM_USER_CHECK(v.data && (v.dtype.lanes == 0 || v.dtype == t.dtype()) &&
                        (!v.has_shape() || v.shape == t.shape()),
                    "loom.net.E1006")
        << "CompiledNetwork::run: buffer " << i << " is for " << (i < ni ? "input " : "output ")
        << detail::describe(t) << ", but it is " << (v.data ? "" : "a null pointer, ")
        << ir::to_string(v.dtype) << (v.has_shape() ? " of another shape" : "");
  }
  std::lock_guard<std::mutex> lock(state_->running);
  run_groups(inputs_then_outputs, nullptr);
}

LOOM_DECL void CompiledNetwork::run_groups(const std::vector<BufferView>& inputs_then_outputs,
                                           std::vector<double>* seconds) const {
  for (size_t g = 0; g < state_->views.size(); ++g) {
    std::vector<BufferView>& views = state_->views[g];
    for (const auto& [slot, buffer] : state_->caller_slots[g])
      views[slot].data = inputs_then_outputs[buffer].data;
    const auto start = std::chrono::steady_clock::now();
    state_->kernels[static_cast<size_t>(state_->task_of_group[g])].run(views);
    if (seconds)
      (*seconds)[g] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
}

LOOM_DECL std::vector<double> CompiledNetwork::profile(
    const std::vector<BufferView>& inputs_then_outputs, int repeat) const {
  LOOM_USER_CHECK(repeat >= 1, "loom.net.E1005")
      << "CompiledNetwork::profile: repeat " << repeat << " (>= 1)";
  run(inputs_then_outputs);  // the checks, and a warm-up
  const size_t groups = state_->views.size();
  std::vector<std::vector<double>> samples(groups,
                                           std::vector<double>(static_cast<size_t>(repeat)));
  std::vector<double> one(groups);
  std::lock_guard<std::mutex> lock(state_->running);
  for (int r = 0; r < repeat; ++r) {
    run_groups(inputs_then_outputs, &one);
    for (size_t g = 0; g < groups; ++g) samples[g][static_cast<size_t>(r)] = one[g];
  }
  std::vector<double> median(groups);
  for (size_t g = 0; g < groups; ++g) {
    auto& v = samples[g];
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    median[g] = v[v.size() / 2];
  }
  return median;
}

namespace detail {

LOOM_DECL NetworkTuning network_tuning(const net::Network& network,
                                       const TaskSchedulerOptions& options) {
  NetworkTuning out{{}, options};
  for (const net::NetworkTask& t : network.tasks())
    out.tasks.push_back({Task(t.dag, Target::host()), static_cast<double>(t.weight()), {}});
  std::vector<std::string>& constants = out.options.tune.constant_inputs;
  for (const std::string& name : constant_names(network))
    if (std::find(constants.begin(), constants.end(), name) == constants.end())
      constants.push_back(name);
  if (!out.options.tune.measure.cold_constants) out.options.tune.measure.cold_constants = true;
  return out;
}

}  // namespace detail

LOOM_DECL search::TaskSchedulerReport tune(const net::Network& network,
                                           const TaskSchedulerOptions& options) {
  const detail::NetworkTuning t = detail::network_tuning(network, options);
  return tune_tasks(t.tasks, t.options);
}

LOOM_END_NAMESPACE
