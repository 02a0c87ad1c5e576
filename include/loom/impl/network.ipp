// Bodies of loom/network.hpp: compiling a network's tasks, running its groups, tuning them.
#include "loom/network.hpp"

#include <iostream>
#include <sstream>

LOOM_BEGIN_NAMESPACE

namespace detail_network {

inline std::string describe(const ir::Tensor& t) {
  std::ostringstream os;
  os << "'" << t.name() << "' (" << ir::to_string(t.dtype()) << "[";
  for (size_t d = 0; d < t.shape().size(); ++d) os << (d ? ", " : "") << t.shape()[d];
  os << "])";
  return os.str();
}

}  // namespace detail_network

LOOM_DECL CompiledNetwork compile(std::shared_ptr<const net::Network> network,
                                  const NetworkOptions& options) {
  LOOM_USER_CHECK(network != nullptr, "loom.net.E1005") << "compile: no network";
  CompiledNetwork c;
  c.state_ = std::make_shared<CompiledNetwork::state>();
  CompiledNetwork::state& s = *c.state_;
  s.network = network;
  const Target host = Target::host();
  for (const net::NetworkTask& t : network->tasks()) {
    const Task task(t.dag, host);
    std::optional<sched::State> best;
    if (!options.records.empty()) best = best_recorded_schedule(task, options.records);
    const std::string& name = t.dag->outputs()[0].name();
    (best ? s.tuned : s.untuned).push_back(name);
    s.kernels.push_back(best ? build(task, *best) : build(task));
  }
  if (!options.records.empty() && !s.untuned.empty()) {
    std::cerr << "loom: warning: " << options.records << " has no record of " << s.untuned.size()
              << " of the network's " << network->tasks().size()
              << " tasks; they run their default schedules:";
    for (const std::string& n : s.untuned) std::cerr << ' ' << n;
    std::cerr << '\n';
  }
  s.task_of_group.assign(network->groups().size(), -1);
  for (size_t t = 0; t < network->tasks().size(); ++t)
    for (int g : network->tasks()[t].groups) s.task_of_group[g] = static_cast<int>(t);
  s.arena.resize(static_cast<size_t>(network->memory().peak_bytes));
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
        << detail_network::describe(t) << ", but it is "
        << (v.data ? "" : "a null pointer, ") << ir::to_string(v.dtype)
        << (v.has_shape() ? " of another shape" : "");
  }
  // Where each tensor a group reads lives: the caller's buffers, the constants' data, the arena.
  std::unordered_map<const ir::TensorNode*, void*> where;
  for (size_t i = 0; i < ni; ++i) where[n.inputs()[i].get()] = inputs_then_outputs[i].data;
  for (size_t o = 0; o < no; ++o) where[n.outputs()[o].get()] = inputs_then_outputs[ni + o].data;
  for (const net::Constant& c : n.constants())
    where[c.tensor.get()] = const_cast<unsigned char*>(c.bytes->data());
  std::lock_guard<std::mutex> lock(state_->running);
  const auto& groups = n.groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const ir::Tensor& out = n.dag().ops()[groups[g].output()];
    if (n.memory().offset[g] >= 0) where[out.get()] = state_->arena.data() + n.memory().offset[g];
    std::vector<BufferView> views;
    for (const ir::Tensor& in : groups[g].inputs)
      views.emplace_back(where.at(in.get()), in.dtype(), in.shape());
    views.emplace_back(where.at(out.get()), out.dtype(), out.shape());
    state_->kernels[static_cast<size_t>(state_->task_of_group[g])].run(views);
  }
}

LOOM_DECL search::TaskSchedulerReport tune(const net::Network& network,
                                           const TaskSchedulerOptions& options) {
  std::vector<WeightedTask> tasks;
  for (const net::NetworkTask& t : network.tasks())
    tasks.push_back({Task(t.dag, Target::host()), static_cast<double>(t.weight()), {}});
  return tune_tasks(tasks, options);
}

LOOM_END_NAMESPACE
