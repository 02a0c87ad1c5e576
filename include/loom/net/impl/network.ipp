// Bodies of loom/net/network.hpp: constants, the network's analysis, the memory plan.
#include "loom/net/network.hpp"

#include "loom/error.hpp"

#include "loom/ir/visitor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <ostream>
#include <unordered_map>
#include <unordered_set>

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

LOOM_DECL ChannelAffine batch_norm_affine(const std::vector<double>& gamma,
                                          const std::vector<double>& beta,
                                          const std::vector<double>& mean,
                                          const std::vector<double>& var, double eps) {
  ChannelAffine a;
  for (size_t c = 0; c < gamma.size(); ++c) {
    a.scale.push_back(gamma[c] / std::sqrt(var.at(c) + eps));
    a.shift.push_back(beta.at(c) - mean.at(c) * a.scale.back());
  }
  return a;
}

namespace detail {

template <class N>
const N* as_binary(const ir::Expr& e) {
  return e.defined() ? e.as<N>() : nullptr;
}

// The tensor a read of a 1-D tensor at exactly variable `v` reads, or null.
inline const ir::TensorNode* read_at(const ir::Expr& e, const ir::Variable* v) {
  const auto* r = e.as<ir::TensorRead>();
  if (!r || r->indices.size() != 1 || r->indices[0].as<ir::Variable>() != v) return nullptr;
  return r->tensor.get();
}

// ops::batch_norm's body, `(x - mean[c]) * rsqrt(var[c] + eps) * gamma[c] + beta[c]`, taken
// apart; false when `op` is not exactly that.
struct BatchNormParts {
  const ir::TensorRead* x = nullptr;
  const ir::TensorNode *mean = nullptr, *var = nullptr, *gamma = nullptr, *beta = nullptr;
  double eps = 0;
};
inline bool batch_norm_parts(const ir::Tensor& op, BatchNormParts& p) {
  if (op.is_placeholder() || op->tag != "batch_norm" || op->axes.size() < 2 ||
      op.dtype() != ir::DType::f32())
    return false;
  const ir::Variable* c = op->axes[1].variable();
  const auto* add = as_binary<ir::Add>(op->body);
  const auto* mul_gamma = add ? as_binary<ir::Mul>(add->a) : nullptr;
  const auto* mul_rsqrt = mul_gamma ? as_binary<ir::Mul>(mul_gamma->a) : nullptr;
  const auto* sub = mul_rsqrt ? as_binary<ir::Sub>(mul_rsqrt->a) : nullptr;
  const auto* call = mul_rsqrt ? mul_rsqrt->b.as<ir::Call>() : nullptr;
  if (!sub || !call || call->op != ir::CallOp::rsqrt || call->args.size() != 1) return false;
  const auto* var_eps = as_binary<ir::Add>(call->args[0]);
  const auto* eps = var_eps ? var_eps->b.as<ir::FloatImm>() : nullptr;
  p.x = sub->a.as<ir::TensorRead>();
  p.mean = read_at(sub->b, c);
  p.var = var_eps ? read_at(var_eps->a, c) : nullptr;
  p.gamma = read_at(mul_gamma->b, c);
  p.beta = read_at(add->b, c);
  if (!p.x || !p.mean || !p.var || !p.gamma || !p.beta || !eps) return false;
  p.eps = eps->value;
  // x is read at the batch norm's own coordinates.
  if (p.x->indices.size() != op->axes.size()) return false;
  for (size_t d = 0; d < op->axes.size(); ++d)
    if (p.x->indices[d].as<ir::Variable>() != op->axes[d].variable()) return false;
  return true;
}

inline std::vector<double> float_values(const Constant& c) {
  std::vector<double> out(static_cast<size_t>(c.tensor.num_elements()));
  const auto* f = reinterpret_cast<const float*>(c.bytes->data());
  for (size_t i = 0; i < out.size(); ++i) out[i] = f[i];
  return out;
}

}  // namespace detail

LOOM_DECL FoldedBatchNorms fold_batch_norm(const std::vector<ir::Tensor>& inputs,
                                           const std::vector<Constant>& constants,
                                           const std::vector<ir::Tensor>& outputs) {
  using namespace detail;
  std::vector<ir::Tensor> placeholders = inputs;
  std::unordered_map<const ir::TensorNode*, const Constant*> constant_of;
  for (const Constant& c : constants) {
    placeholders.push_back(c.tensor);
    constant_of[c.tensor.get()] = &c;
  }
  const ComputeDAG dag(placeholders, outputs);
  // Who reads what: a weight or a convolution output read twice cannot change for one reader.
  std::unordered_map<const ir::TensorNode*, int> readers;
  for (const ir::Tensor& op : dag.ops()) {
    if (op.is_placeholder()) continue;
    std::unordered_set<const ir::TensorNode*> read;
    ir::post_order_visit(op->body, [&](const ir::Expr& e) {
      if (const auto* r = e.as<ir::TensorRead>()) read.insert(r->tensor.get());
    });
    for (const ir::TensorNode* t : read) ++readers[t];
  }
  for (const ir::Tensor& out : outputs) ++readers[out.get()];

  FoldedBatchNorms result;
  std::vector<Constant> added;
  ir::TensorRedirector redirect;
  // One pass in topological order: every op is rebuilt on what was rebuilt before it, a
  // foldable batch norm replaces itself and its convolution (which only it reads).
  for (const ir::Tensor& op : dag.ops()) {
    if (op.is_placeholder()) continue;
    BatchNormParts bn;
    const Constant *mean = nullptr, *var = nullptr, *gamma = nullptr, *beta = nullptr;
    if (!batch_norm_parts(op, bn) || !(mean = constant_of[bn.mean]) ||
        !(var = constant_of[bn.var]) || !(gamma = constant_of[bn.gamma]) ||
        !(beta = constant_of[bn.beta]) || readers[bn.x->tensor.get()] != 1) {
      redirect.rebuild(op);
      continue;
    }
    const ir::Tensor conv(bn.x->tensor);
    const auto* sum = conv.is_placeholder() ? nullptr : conv->body.as<ir::Reduce>();
    if (!sum || sum->op != ir::ReduceOp::Sum || conv->axes.size() < 2) {
      redirect.rebuild(op);
      continue;
    }
    // The weight: a product's constant factor read at the output channel in one dimension.
    const auto* product = as_binary<ir::Mul>(sum->source);
    const ir::Variable* channel = conv->axes[1].variable();
    const Constant* weight = nullptr;
    int channel_dim = -1;
    for (const ir::Expr* f : {product ? &product->a : nullptr, product ? &product->b : nullptr}) {
      const auto* r = f ? f->as<ir::TensorRead>() : nullptr;
      const Constant* c = r ? constant_of[r->tensor.get()] : nullptr;
      if (!c || c->tensor.dtype() != ir::DType::f32() || readers[r->tensor.get()] != 1) continue;
      int dims = 0;
      for (size_t d = 0; d < r->indices.size(); ++d)
        if (r->indices[d].as<ir::Variable>() == channel) {
          channel_dim = static_cast<int>(d);
          ++dims;
        }
      if (dims == 1) weight = c;
    }
    const ChannelAffine a = weight
                                ? batch_norm_affine(float_values(*gamma), float_values(*beta),
                                                    float_values(*mean), float_values(*var), bn.eps)
                                : ChannelAffine{};
    if (!weight || static_cast<int64_t>(a.scale.size()) !=
                       weight->tensor.shape()[static_cast<size_t>(channel_dim)]) {
      redirect.rebuild(op);
      continue;
    }
    const auto& shape = weight->tensor.shape();
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(channel_dim) + 1; d < shape.size(); ++d) inner *= shape[d];
    std::vector<float> scaled(static_cast<size_t>(weight->tensor.num_elements()));
    const auto* w = reinterpret_cast<const float*>(weight->bytes->data());
    for (size_t i = 0; i < scaled.size(); ++i)
      scaled[i] =
          static_cast<float>(w[i] * a.scale[static_cast<size_t>(i / inner) % a.scale.size()]);
    const ir::Tensor new_weight =
        ir::make_placeholder(weight->tensor.name() + "_bn", ir::DType::f32(), shape);
    const ir::Tensor shift = ir::make_placeholder(op.name() + "_shift", ir::DType::f32(),
                                                  {static_cast<int64_t>(a.shift.size())});
    added.push_back(constant(new_weight, scaled));
    added.push_back(constant(shift, std::vector<float>(a.shift.begin(), a.shift.end())));
    // The convolution as rebuilt on its new inputs (if they changed), now on the new weight.
    ir::TensorRedirector to_new_weight;
    to_new_weight.map[weight->tensor.get()] = new_weight;
    const ir::Tensor new_conv = ir::make_compute(
        conv.name(), conv->axes, to_new_weight.mutate(redirect.current(conv)->body), conv->tag);
    std::vector<ir::Expr> at;
    for (const ir::IterVar& ax : op->axes) at.push_back(ax.var);
    const ir::Tensor folded =
        ir::make_compute(op.name(), op->axes,
                         ir::Add::make(ir::TensorRead::make(new_conv, at),
                                       ir::TensorRead::make(shift, {op->axes[1].var})),
                         "bias_add");
    redirect.map[conv.get()] = new_conv;
    redirect.map[op.get()] = folded;
    ++result.folded;
  }
  if (result.folded == 0) return {constants, outputs, 0};
  for (const ir::Tensor& out : outputs) result.outputs.push_back(redirect.current(out));
  // The constants the new computation reads, the original ones first in their order.
  std::vector<ir::Tensor> all = inputs;
  for (const Constant& c : constants) all.push_back(c.tensor);
  for (const Constant& c : added) all.push_back(c.tensor);
  const ComputeDAG rebuilt(all, result.outputs);
  std::unordered_set<const ir::TensorNode*> read;
  for (const ir::Tensor& op : rebuilt.ops())
    if (!op.is_placeholder())
      ir::post_order_visit(op->body, [&](const ir::Expr& e) {
        if (const auto* r = e.as<ir::TensorRead>()) read.insert(r->tensor.get());
      });
  for (const Constant& c : constants)
    if (read.count(c.tensor.get())) result.constants.push_back(c);
  for (const Constant& c : added)
    if (read.count(c.tensor.get())) result.constants.push_back(c);
  return result;
}

LOOM_DECL Network::Network(std::vector<ir::Tensor> inputs, std::vector<Constant> constants,
                           std::vector<ir::Tensor> outputs, NetworkOptions options)
    : inputs_(std::move(inputs)), constants_(std::move(constants)), outputs_(std::move(outputs)) {
  LOOM_USER_CHECK(!outputs_.empty(), "loom.net.E1003")
      << "net::Network: no outputs; give the tensors the network computes";
  for (const Constant& c : constants_)
    for (const ir::Tensor& in : inputs_)
      LOOM_USER_CHECK(!in.same_as(c.tensor), "loom.net.E1004")
          << "net::Network: '" << in.name() << "' is both an input and a constant";
  if (options.fold_batch_norm) {
    FoldedBatchNorms f = fold_batch_norm(inputs_, constants_, outputs_);
    constants_ = std::move(f.constants);
    outputs_ = std::move(f.outputs);
    folded_batch_norms_ = f.folded;
  }
  std::vector<ir::Tensor> placeholders = inputs_;
  for (const Constant& c : constants_) placeholders.push_back(c.tensor);
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
     << "intermediates " << n.memory().peak_bytes << " bytes planned for " << n.memory().total_bytes
     << '\n';
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
