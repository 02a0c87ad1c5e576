// Bodies of loom/dag/compute_dag.hpp.
#include "loom/dag/compute_dag.hpp"

#include "loom/detail/hash.hpp"
#include "loom/ir/equal_hash.hpp"
#include "loom/ir/printer.hpp"
#include "loom/ir/visitor.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <ostream>
#include <unordered_map>

LOOM_BEGIN_NAMESPACE

namespace detail {

// Every read of `tensor` in `body`, as its index lists.
inline std::vector<const std::vector<ir::Expr>*> reads_of(const ir::Expr& body,
                                                          const ir::TensorNode* tensor) {
  std::vector<const std::vector<ir::Expr>*> out;
  ir::post_order_visit(body, [&](const ir::Expr& e) {
    if (auto* r = e.as<ir::TensorRead>(); r && r->tensor.get() == tensor)
      out.push_back(&r->indices);
  });
  return out;
}

// Position of `v` among the op's axes, or -1.
inline int axis_position(const std::vector<ir::IterVar>& axes, const ir::Variable* v) {
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i].variable() == v) return static_cast<int>(i);
  return -1;
}

// An index of a simple access: `axis`, `axis + c`, `axis - c`, `c + axis` or a constant.
// Returns the axis position (-1 for a constant) and whether it had a shift; false if not simple.
inline bool simple_index(const ir::Expr& e, const std::vector<ir::IterVar>& axes, int& axis,
                         bool& shifted) {
  shifted = false;
  axis = -1;
  if (ir::as_const_int(e)) return true;
  if (auto* c = e.as<ir::Cast>()) return simple_index(c->value, axes, axis, shifted);
  if (auto* v = e.as<ir::Variable>()) {
    axis = axis_position(axes, v);
    return axis >= 0;
  }
  const ir::Expr *var = nullptr, *cst = nullptr;
  if (auto* a = e.as<ir::Add>()) {
    var = ir::as_const_int(a->b) ? &a->a : &a->b;
    cst = ir::as_const_int(a->b) ? &a->b : &a->a;
  } else if (auto* s = e.as<ir::Sub>()) {
    var = &s->a;
    cst = &s->b;
  }
  if (!var || !ir::as_const_int(*cst)) return false;
  auto* v = var->as<ir::Variable>();
  if (!v) return false;
  axis = axis_position(axes, v);
  shifted = true;
  return axis >= 0;
}

struct access_facts {
  bool simple = true;    // every index simple, axes in order, none repeated
  bool complete = true;  // additionally: index d is exactly axis d, for every dimension
};

inline access_facts analyse_reads(const ir::Tensor& op, const ir::TensorNode* input) {
  access_facts f;
  const auto& axes = op->axes;
  for (auto* idx : reads_of(op->body, input)) {
    int last = -1;
    std::vector<bool> seen(axes.size(), false);
    if (idx->size() != axes.size()) f.complete = false;
    for (size_t d = 0; d < idx->size(); ++d) {
      int axis;
      bool shifted;
      if (!simple_index((*idx)[d], axes, axis, shifted)) {
        f.simple = f.complete = false;
        continue;
      }
      if (axis >= 0) {
        if (axis <= last || seen[axis]) f.simple = false;
        seen[axis] = true;
        last = axis;
      }
      if (axis != static_cast<int>(d) || shifted) f.complete = false;
    }
    if (!f.simple) f.complete = false;
  }
  return f;
}

inline bool has_expensive_or_branch(const ir::Expr& body) {
  bool found = false;
  ir::post_order_visit(body, [&](const ir::Expr& e) {
    if (e.as<ir::Select>()) found = true;
    if (auto* c = e.as<ir::Call>()) {
      using ir::CallOp;
      found = found || !(c->op == CallOp::abs || c->op == CallOp::floor || c->op == CallOp::ceil ||
                         c->op == CallOp::round);
    }
  });
  return found;
}

}  // namespace detail

LOOM_DECL double count_flops(const ir::Expr& e) {
  if (!e.defined()) return 0;
  switch (e.kind()) {
    case ir::NodeKind::IntImm:
    case ir::NodeKind::FloatImm:
    case ir::NodeKind::Variable:
    case ir::NodeKind::TensorRead:  // index arithmetic is not counted
    case ir::NodeKind::Load:
    case ir::NodeKind::Ramp: return 0;
    case ir::NodeKind::Broadcast: return count_flops(e.as<ir::Broadcast>()->value);
    case ir::NodeKind::Cast: return count_flops(e.as<ir::Cast>()->value);
    case ir::NodeKind::Not: return 1 + count_flops(e.as<ir::Not>()->a);
    case ir::NodeKind::Select: {
      auto* s = e.as<ir::Select>();
      return count_flops(s->condition) +
             std::max(count_flops(s->true_value), count_flops(s->false_value));
    }
    case ir::NodeKind::Call: {
      double f = 1;
      for (auto& a : e.as<ir::Call>()->args) f += count_flops(a);
      return f;
    }
    case ir::NodeKind::Reduce: {
      auto* r = e.as<ir::Reduce>();
      double n = 1;
      for (auto& a : r->axes) n *= static_cast<double>(a.extent);
      return n * (count_flops(r->source) + 1 + count_flops(r->condition));
    }
    default: {
      auto [a, b] = ir::binary_operands(e);
      return 1 + count_flops(*a) + count_flops(*b);
    }
  }
}

namespace detail {

/// Throws loom.dag.E218 when compute `op` computes on a 16-bit float: arithmetic, comparisons,
/// math calls, selects and reductions of float16/bfloat16 values. Those types are storage-only
/// (ir/dtype.hpp): the typed DSL refuses them at compile time, and this catches IR built by
/// other means (ir::make_compute, importers), once, before any schedule or backend sees it.
inline void refuse_16bit_float_arithmetic(const ir::Tensor& op) {
  auto computes_on_half = [](const ir::Expr& e) {
    const ir::NodeKind k = e.kind();
    if (ir::is_binary(k)) return ir::binary_operands(e).first->dtype().is_16bit_float();
    return (k == ir::NodeKind::Select || k == ir::NodeKind::Call || k == ir::NodeKind::Reduce) &&
           e.dtype().is_16bit_float();
  };
  ir::post_order_visit(op->body, [&](const ir::Expr& e) {
    LOOM_USER_CHECK(!computes_on_half(e), "loom.dag.E218")
        << "compute '" << op.name() << "' computes on " << ir::to_string(e.dtype()) << " values ("
        << ir::node_kind_name(e.kind()) << "); float16 and bfloat16 are storage-only: load them, "
        << "cast<float>() them, compute in float32 and cast the result back";
  });
}

/// Throws loom.dag.E219 when tensor `t`'s element count, or a compute's iteration space (its
/// elements times its reduction's extents), does not fit int64_t: sizes, flat indices and the
/// lowered loops' index arithmetic would wrap, into a crash or a wrong result far from the cause.
inline void refuse_overflowing_extents(const ir::Tensor& t) {
  int64_t n = 1;
  auto times = [&](int64_t extent, const std::string& what) {
    LOOM_USER_CHECK(!__builtin_mul_overflow(n, extent, &n), "loom.dag.E219")
        << "tensor '" << t.name() << "': " << what << " overflows a 64-bit count (shape " <<
        [&] {
          std::string s;
          for (int64_t e : t.shape()) s += (s.empty() ? "" : " x ") + std::to_string(e);
          return s;
        }()
        << "); split the computation into smaller tensors";
  };
  for (int64_t e : t.shape()) times(e, "its element count");
  if (t.is_placeholder()) return;
  if (auto* red = t->body.as<ir::Reduce>())
    for (const ir::IterVar& a : red->axes)
      times(a.extent, "its iteration space (elements x reduction '" + a.name() + "')");
}

}  // namespace detail

LOOM_DECL ComputeDAG::ComputeDAG(std::vector<ir::Tensor> inputs, std::vector<ir::Tensor> outputs)
    : inputs_(std::move(inputs)), outputs_(std::move(outputs)) {
  LOOM_USER_CHECK(!outputs_.empty(), "loom.dag.E201") << "a ComputeDAG needs at least one output";
  std::vector<ir::Tensor> args = arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    LOOM_USER_CHECK(args[i].defined(), "loom.dag.E202") << "argument " << i << " is undefined";
    for (size_t j = 0; j < i; ++j)
      LOOM_USER_CHECK(!args[i].same_as(args[j]), "loom.dag.E203")
          << "tensor '" << args[i].name() << "' is passed twice (arguments " << j << " and " << i
          << ")";
  }
  for (auto& t : inputs_)
    LOOM_USER_CHECK(t.is_placeholder(), "loom.dag.E204")
        << "input '" << t.name() << "' is computed, not a placeholder; pass the placeholders it "
        << "reads as inputs instead";
  for (auto& t : outputs_)
    LOOM_USER_CHECK(!t.is_placeholder(), "loom.dag.E205")
        << "output '" << t.name() << "' is a placeholder; outputs must be computed tensors";

  // Depth-first post-order from the outputs: deterministic and independent of the order in which
  // the user created the tensors.
  std::unordered_map<const ir::TensorNode*, int> state;  // 1 = visiting, 2 = done
  std::function<void(const ir::Tensor&)> visit = [&](const ir::Tensor& t) {
    auto& s = state[t.get()];
    if (s == 2) return;
    LOOM_INTERNAL_CHECK(s != 1) << "cycle through tensor '" << t.name() << "'";
    s = 1;
    for (auto& in : ir::input_tensors(t)) visit(in);
    state[t.get()] = 2;
    ops_.push_back(t);
  };
  for (auto& t : outputs_) visit(t);
  for (auto& t : ops_) {
    detail::refuse_overflowing_extents(t);
    if (!t.is_placeholder()) detail::refuse_16bit_float_arithmetic(t);
  }
  for (auto& t : ops_) {
    if (!t.is_placeholder()) continue;
    bool listed = std::any_of(inputs_.begin(), inputs_.end(),
                              [&](const ir::Tensor& i) { return i.same_as(t); });
    LOOM_USER_CHECK(listed, "loom.dag.E206")
        << "the outputs read placeholder '" << t.name()
        << "', which is not among the inputs; add it to the ComputeDAG's inputs";
  }
  // Inputs that no output reads still are kernel arguments; keep them in the op list.
  for (auto& t : inputs_)
    if (!state.count(t.get())) ops_.insert(ops_.begin(), t);
  analyse();
  compute_key();
}

LOOM_DECL std::vector<ir::Tensor> ComputeDAG::arguments() const {
  std::vector<ir::Tensor> a = inputs_;
  a.insert(a.end(), outputs_.begin(), outputs_.end());
  return a;
}

LOOM_DECL int ComputeDAG::op_index(const ir::Tensor& t) const {
  for (size_t i = 0; i < ops_.size(); ++i)
    if (ops_[i].same_as(t)) return static_cast<int>(i);
  LOOM_USER_FAIL("loom.dag.E207") << "tensor '" << (t.defined() ? t.name() : "<undefined>")
                                  << "' is not part of this ComputeDAG";
  return -1;
}

LOOM_DECL void ComputeDAG::analyse() {
  infos_.assign(ops_.size(), OpInfo{});
  flops_ = 0;
  for (size_t i = 0; i < ops_.size(); ++i) {
    const ir::Tensor& op = ops_[i];
    OpInfo& info = infos_[i];
    info.spatial_size = op.num_elements();
    info.is_output = std::any_of(outputs_.begin(), outputs_.end(),
                                 [&](const ir::Tensor& o) { return o.same_as(op); });
    if (op.is_placeholder()) {
      info.is_placeholder = true;
      continue;
    }
    for (auto& in : ir::input_tensors(op)) {
      int p = op_index(in);
      info.producers.push_back(p);
      infos_[p].consumers.push_back(static_cast<int>(i));
    }
    if (auto* r = op->body.as<ir::Reduce>()) {
      info.has_reduce = true;
      for (auto& a : r->axes) info.reduce_size *= a.extent;
    }
    info.is_injective = !info.has_reduce;
    info.flops = static_cast<double>(info.spatial_size) * count_flops(op->body);
    flops_ += info.flops;

    bool all_simple = true, all_complete = true;
    int inputs_missing_axis = 0;
    for (auto& in : ir::input_tensors(op)) {
      auto facts = detail::analyse_reads(op, in.get());
      all_simple = all_simple && facts.simple;
      all_complete = all_complete && facts.complete && in.shape() == op.shape();
      // Does some read of `in` ignore an output axis of extent > 1? Then its data is reused
      // along that axis.
      auto reads = detail::reads_of(op->body, in.get());
      for (auto& axis : op->axes) {
        if (axis.extent <= 1) continue;
        bool used = false;
        for (auto* idx : reads)
          for (auto& e : *idx) used = used || ir::uses_var(e, axis.variable());
        if (!used) {
          ++inputs_missing_axis;
          break;
        }
      }
    }
    info.is_elementwise = info.is_injective && all_complete;
    info.is_strictly_inlineable =
        info.is_injective && all_simple && !detail::has_expensive_or_branch(op->body);
    info.needs_multi_level_tiling =
        inputs_missing_axis >= 2 || (inputs_missing_axis >= 1 && info.has_reduce);
  }
}

LOOM_DECL bool ComputeDAG::has_more_reduction_parallel(int op, int num_cores) const {
  const OpInfo& i = info(op);
  if (!i.has_reduce) return false;
  if (i.needs_multi_level_tiling)
    return i.spatial_size <= i.reduce_size && i.spatial_size <= 16 * int64_t{num_cores};
  return i.reduce_size > num_cores;
}

LOOM_DECL bool ComputeDAG::elementwise_match(int producer, int consumer) const {
  const ir::Tensor& p = ops_.at(producer);
  const ir::Tensor& c = ops_.at(consumer);
  if (c.is_placeholder() || p.shape() != c.shape()) return false;
  if (infos_[producer].consumers != std::vector<int>{consumer}) return false;
  if (infos_[consumer].has_reduce) return false;
  auto facts = detail::analyse_reads(c, p.get());
  return facts.complete && !detail::reads_of(c->body, p.get()).empty();
}

LOOM_DECL int ComputeDAG::single_elementwise_matched_consumer(int op) const {
  const OpInfo& i = info(op);
  if (i.consumers.size() != 1) return -1;
  int c = i.consumers[0];
  return elementwise_match(op, c) ? c : -1;
}

LOOM_DECL void ComputeDAG::compute_key() {
  using ::loom::detail::hash_combine;
  std::unordered_map<const ir::TensorNode*, uint64_t> position;
  for (size_t i = 0; i < ops_.size(); ++i) position[ops_[i].get()] = i + 1;
  uint64_t h = ::loom::detail::hash_string("loom.workload.v1");
  h = hash_combine(h, ops_.size());
  for (auto& op : ops_) {
    h = hash_combine(h, static_cast<uint64_t>(op->op));
    h = hash_combine(h, ::loom::detail::hash_string(ir::to_string(op.dtype())));
    h = hash_combine(h, op.shape().size());
    for (int64_t s : op.shape()) h = hash_combine(h, static_cast<uint64_t>(s));
    if (op.is_placeholder()) continue;
    ir::StructuralHasher hasher;
    hasher.tensor_id = [&](const ir::TensorNode* t) { return position.at(t); };
    for (auto& a : op->axes) hasher.hash(a.var);  // number the axes first, in order
    h = hash_combine(h, hasher.hash(op->body));
  }
  // The argument order is part of the kernel's signature.
  for (auto& t : arguments()) h = hash_combine(h, position.at(t.get()));
  h = hash_combine(h, inputs_.size());
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  key_ = std::string("wk-") + buf;

  // Names, not bodies: a schedule's steps name stages, and bodies hold extents (a mean divides
  // by its row length, a convolution's padding guard compares with the image size). Two
  // computations of one structure that differ in an index constant (a stride) get the same key;
  // the transferred schedule is then slower, never wrong, as every schedule computes its DAG.
  uint64_t s = ::loom::detail::hash_string("loom.structure.v1");
  s = hash_combine(s, ops_.size());
  for (size_t i = 0; i < ops_.size(); ++i) {
    const ir::Tensor& op = ops_[i];
    s = hash_combine(s, ::loom::detail::hash_string(op.name()));
    s = hash_combine(s, static_cast<uint64_t>(op->op));
    s = hash_combine(s, ::loom::detail::hash_string(op->tag));
    s = hash_combine(s, ::loom::detail::hash_string(ir::to_string(op.dtype())));
    s = hash_combine(s, op.shape().size());
    // The loops a stage starts with: its spatial axes (the rank) and its reduce axes.
    const auto* reduce = op.is_placeholder() ? nullptr : op->body.as<ir::Reduce>();
    s = hash_combine(s, reduce ? reduce->axes.size() + 1 : 0);
    for (int p : infos_[i].producers) s = hash_combine(s, static_cast<uint64_t>(p) + 1);
  }
  for (auto& t : arguments()) s = hash_combine(s, position.at(t.get()));
  s = hash_combine(s, inputs_.size());
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(s));
  structure_key_ = std::string("st-") + buf;
}

LOOM_DECL std::vector<int64_t> ComputeDAG::extents() const {
  std::vector<int64_t> out;
  for (const ir::Tensor& op : ops_) out.insert(out.end(), op.shape().begin(), op.shape().end());
  return out;
}

LOOM_DECL std::ostream& operator<<(std::ostream& os, const ComputeDAG& dag) {
  for (int i = 0; i < dag.num_ops(); ++i) {
    const ir::Tensor& t = dag.ops()[i];
    if (t.is_placeholder()) {
      os << "placeholder " << t << '\n';
      continue;
    }
    os << "compute " << t.name() << ": " << ir::to_string(t.dtype()) << '[';
    for (size_t d = 0; d < t.shape().size(); ++d) os << (d ? ", " : "") << t.shape()[d];
    os << ']';
    if (!t->tag.empty()) os << " (" << t->tag << ')';
    if (dag.info(i).is_output) os << " output";
    os << "\n  " << t << '\n';
  }
  return os;
}

LOOM_END_NAMESPACE
