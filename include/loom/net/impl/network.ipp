// Bodies of loom/net/network.hpp: constants, the network's analysis, the memory plan.
#include "loom/net/network.hpp"

#include "loom/error.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <ostream>

LOOM_BEGIN_NAMESPACE
namespace net {

LOOM_DECL Constant constant(const ir::Tensor& tensor, const std::vector<float>& values) {
  LOOM_USER_CHECK(tensor.defined() && tensor.is_placeholder(), "loom.net.E1002")
      << "net::constant: '" << (tensor.defined() ? tensor.name() : "<undefined>")
      << "' is not a placeholder; bind data to the placeholder a layer reads";
  LOOM_USER_CHECK(tensor.dtype() == ir::DType::f32(), "loom.net.E1002")
      << "net::constant: '" << tensor.name() << "' holds " << ir::to_string(tensor.dtype())
      << ", not float32 values";
  LOOM_USER_CHECK(static_cast<int64_t>(values.size()) == tensor.num_elements(), "loom.net.E1002")
      << "net::constant: '" << tensor.name() << "' has " << tensor.num_elements()
      << " elements, but " << values.size() << " values were given";
  auto bytes = std::make_shared<std::vector<unsigned char>>(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(bytes->data(), values.data(), bytes->size());
  return {tensor, std::move(bytes)};
}

LOOM_DECL MemoryPlan plan_memory(const ComputeDAG& dag, const std::vector<FusedGroup>& groups) {
  constexpr int64_t align = 64;
  const int n = static_cast<int>(groups.size());
  MemoryPlan plan;
  plan.offset.assign(n, -1);
  // The last group that reads each group's output.
  std::vector<int> last_use(n, -1), writer(dag.num_ops(), -1);
  for (int g = 0; g < n; ++g) writer[groups[g].output()] = g;
  for (int g = 0; g < n; ++g)
    for (const ir::Tensor& in : groups[g].inputs)
      if (const int w = writer[dag.op_index(in)]; w >= 0) last_use[w] = std::max(last_use[w], g);
  std::map<int64_t, int64_t> free;  // offset -> bytes, merged when adjacent
  std::vector<std::vector<int>> dies_after(n);
  int64_t end = 0;
  for (int g = 0; g < n; ++g) {
    const OpInfo& info = dag.info(groups[g].output());
    if (!info.is_output) {
      const ir::Tensor& t = dag.ops()[groups[g].output()];
      const int64_t bytes = (t.num_elements() * t.dtype().bytes() + align - 1) / align * align;
      plan.total_bytes += bytes;
      auto fit = std::find_if(free.begin(), free.end(), [&](auto& b) { return b.second >= bytes; });
      if (fit != free.end()) {
        plan.offset[g] = fit->first;
        if (fit->second > bytes) free[fit->first + bytes] = fit->second - bytes;
        free.erase(fit);
      } else {
        plan.offset[g] = end;
        end += bytes;
      }
      // Read by nobody (a dead branch): free once written.
      dies_after[std::max(last_use[g], g)].push_back(g);
    }
    // Freed after this group ran: what it was the last to read.
    for (int d : dies_after[g]) {
      const ir::Tensor& t = dag.ops()[groups[d].output()];
      int64_t at = plan.offset[d];
      int64_t bytes = (t.num_elements() * t.dtype().bytes() + align - 1) / align * align;
      auto next = free.find(at + bytes);
      if (next != free.end()) {
        bytes += next->second;
        free.erase(next);
      }
      auto prev = free.lower_bound(at);
      if (prev != free.begin() && std::prev(prev)->first + std::prev(prev)->second == at) {
        --prev;
        prev->second += bytes;
      } else {
        free[at] = bytes;
      }
    }
  }
  plan.peak_bytes = end;
  return plan;
}

LOOM_DECL Network::Network(std::vector<ir::Tensor> inputs, std::vector<Constant> constants,
                           std::vector<ir::Tensor> outputs)
    : inputs_(std::move(inputs)), constants_(std::move(constants)), outputs_(std::move(outputs)) {
  LOOM_USER_CHECK(!outputs_.empty(), "loom.net.E1003")
      << "net::Network: no outputs; give the tensors the network computes";
  std::vector<ir::Tensor> placeholders = inputs_;
  for (const Constant& c : constants_) {
    for (const ir::Tensor& in : inputs_)
      LOOM_USER_CHECK(!in.same_as(c.tensor), "loom.net.E1004")
          << "net::Network: '" << in.name() << "' is both an input and a constant";
    placeholders.push_back(c.tensor);
  }
  dag_ = std::make_shared<const ComputeDAG>(placeholders, outputs_);
  groups_ = partition(*dag_);
  tasks_ = extract_tasks(groups_);
  memory_ = plan_memory(*dag_, groups_);
}

LOOM_DECL std::ostream& operator<<(std::ostream& os, const Network& n) {
  int computes = 0;
  for (int i = 0; i < n.dag().num_ops(); ++i) computes += !n.dag().info(i).is_placeholder;
  os << "network: " << computes << " computes in " << n.groups().size() << " groups, "
     << n.tasks().size() << " tasks, " << n.flop_count() * 1e-6 << " MFLOP per run; "
     << "intermediates " << n.memory().peak_bytes << " bytes planned for "
     << n.memory().total_bytes << '\n';
  std::vector<int> task_of(n.groups().size(), -1);
  for (size_t t = 0; t < n.tasks().size(); ++t)
    for (int g : n.tasks()[t].groups) task_of[g] = static_cast<int>(t);
  for (size_t g = 0; g < n.groups().size(); ++g) {
    const FusedGroup& grp = n.groups()[g];
    os << "  group " << g << " (" << pattern_name(grp.pattern) << ", task " << task_of[g] << "):";
    for (int op : grp.ops) os << ' ' << n.dag().ops()[op].name();
    os << "  <-";
    for (const ir::Tensor& in : grp.inputs) os << ' ' << in.name();
    os << '\n';
  }
  for (size_t t = 0; t < n.tasks().size(); ++t)
    os << "  task " << t << ": " << n.tasks()[t].dag->outputs()[0].name() << ", weight "
       << n.tasks()[t].weight() << ", " << n.tasks()[t].dag->flop_count() * 1e-6 << " MFLOP\n";
  return os;
}

}  // namespace net
LOOM_END_NAMESPACE
