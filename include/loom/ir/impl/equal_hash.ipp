// Bodies of loom/ir/equal_hash.hpp.
#include "loom/ir/equal_hash.hpp"

LOOM_BEGIN_NAMESPACE
namespace ir {

namespace detail {

class equal_checker {
 public:
  explicit equal_checker(bool map_free) : map_free_(map_free) {}

  bool eq(const Expr& a, const Expr& b) {
    // Identical subtrees are equal only while no variable is being renamed.
    if (a.same_as(b) && !map_free_ && map_.empty()) return true;
    if (!a.defined() || !b.defined()) return a.defined() == b.defined();
    if (a.kind() != b.kind() || a.dtype() != b.dtype()) return false;
    if (is_binary(a.kind())) {
      auto [a0, a1] = binary_operands(a);
      auto [b0, b1] = binary_operands(b);
      return eq(*a0, *b0) && eq(*a1, *b1);
    }
    switch (a.kind()) {
      case NodeKind::IntImm: return a.as<IntImm>()->value == b.as<IntImm>()->value;
      case NodeKind::FloatImm: {
        double x = a.as<FloatImm>()->value, y = b.as<FloatImm>()->value;
        return x == y || (x != x && y != y);
      }
      case NodeKind::Variable: return eq_var(a.as<Variable>(), b.as<Variable>());
      case NodeKind::Cast: return eq(a.as<Cast>()->value, b.as<Cast>()->value);
      case NodeKind::Not: return eq(a.as<Not>()->a, b.as<Not>()->a);
      case NodeKind::Select: {
        auto *x = a.as<Select>(), *y = b.as<Select>();
        return eq(x->condition, y->condition) && eq(x->true_value, y->true_value) &&
               eq(x->false_value, y->false_value);
      }
      case NodeKind::Call: {
        auto *x = a.as<Call>(), *y = b.as<Call>();
        return x->op == y->op && eq_list(x->args, y->args);
      }
      case NodeKind::TensorRead: {
        auto *x = a.as<TensorRead>(), *y = b.as<TensorRead>();
        return x->tensor.get() == y->tensor.get() && eq_list(x->indices, y->indices);
      }
      case NodeKind::Reduce: {
        auto *x = a.as<Reduce>(), *y = b.as<Reduce>();
        if (x->op != y->op || x->axes.size() != y->axes.size()) return false;
        for (size_t i = 0; i < x->axes.size(); ++i) {
          if (x->axes[i].extent != y->axes[i].extent) return false;
          bind(x->axes[i].variable(), y->axes[i].variable());
        }
        if (x->condition.defined() != y->condition.defined()) return false;
        return eq(x->source, y->source) &&
               (!x->condition.defined() || eq(x->condition, y->condition));
      }
      case NodeKind::Load: {
        auto *x = a.as<Load>(), *y = b.as<Load>();
        return x->buffer.get() == y->buffer.get() && eq(x->index, y->index);
      }
      case NodeKind::Ramp: {
        auto *x = a.as<Ramp>(), *y = b.as<Ramp>();
        return x->lanes == y->lanes && eq(x->base, y->base) && eq(x->stride, y->stride);
      }
      case NodeKind::Broadcast: {
        auto *x = a.as<Broadcast>(), *y = b.as<Broadcast>();
        return x->lanes == y->lanes && eq(x->value, y->value);
      }
#define LOOM_X(name) case NodeKind::name:
        LOOM_FOR_EACH_BINARY(LOOM_X)
#undef LOOM_X
        break;  // compared above
    }
    return false;
  }

 private:
  bool eq_list(const std::vector<Expr>& a, const std::vector<Expr>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!eq(a[i], b[i])) return false;
    return true;
  }
  void bind(const Variable* a, const Variable* b) {
    map_[a] = b;
    rmap_[b] = a;
  }
  bool eq_var(const Variable* a, const Variable* b) {
    auto it = map_.find(a);
    if (it != map_.end()) return it->second == b;
    if (rmap_.count(b)) return false;
    if (!map_free_) return a == b;
    bind(a, b);
    return true;
  }
  bool map_free_;
  std::unordered_map<const Variable*, const Variable*> map_, rmap_;
};

}  // namespace detail

LOOM_DECL bool structural_equal(const Expr& a, const Expr& b, bool map_free_vars) {
  return detail::equal_checker(map_free_vars).eq(a, b);
}

LOOM_DECL uint64_t StructuralHasher::var_id(const Variable* v) {
  auto it = vars_.find(v);
  if (it != vars_.end()) return it->second;
  uint64_t id = vars_.size() + 1;
  vars_[v] = id;
  return id;
}

LOOM_DECL uint64_t StructuralHasher::hash(const Expr& e) {
  using ::loom::detail::hash_combine;
  if (!e.defined()) return 0x5bd1e995ull;
  uint64_t h = hash_combine(static_cast<uint64_t>(e.kind()) + 1, e.dtype().bits);
  h = hash_combine(h, static_cast<uint64_t>(e.dtype().code) * 1000 + e.dtype().lanes);
  if (is_binary(e.kind())) {
    auto [a, b] = binary_operands(e);
    h = hash_combine(h, hash(*a));
    return hash_combine(h, hash(*b));
  }
  switch (e.kind()) {
    case NodeKind::IntImm: return hash_combine(h, static_cast<uint64_t>(e.as<IntImm>()->value));
    case NodeKind::FloatImm:
      return hash_combine(h, ::loom::detail::hash_double(e.as<FloatImm>()->value));
    case NodeKind::Variable: return hash_combine(h, var_id(e.as<Variable>()));
    case NodeKind::Cast: return hash_combine(h, hash(e.as<Cast>()->value));
    case NodeKind::Not: return hash_combine(h, hash(e.as<Not>()->a));
    case NodeKind::Select: {
      auto* s = e.as<Select>();
      h = hash_combine(h, hash(s->condition));
      h = hash_combine(h, hash(s->true_value));
      return hash_combine(h, hash(s->false_value));
    }
    case NodeKind::Call: {
      auto* c = e.as<Call>();
      h = hash_combine(h, static_cast<uint64_t>(c->op));
      for (auto& a : c->args) h = hash_combine(h, hash(a));
      return h;
    }
    case NodeKind::TensorRead: {
      auto* r = e.as<TensorRead>();
      uint64_t t;
      if (tensor_id) {
        t = tensor_id(r->tensor.get());
      } else {
        t = hash_combine(static_cast<uint64_t>(r->tensor->op), r->tensor->dtype.bits);
        t = hash_combine(t, static_cast<uint64_t>(r->tensor->dtype.code));
        for (int64_t s : r->tensor->shape) t = hash_combine(t, static_cast<uint64_t>(s));
      }
      h = hash_combine(h, t);
      for (auto& i : r->indices) h = hash_combine(h, hash(i));
      return h;
    }
    case NodeKind::Reduce: {
      auto* r = e.as<Reduce>();
      h = hash_combine(h, static_cast<uint64_t>(r->op));
      for (auto& a : r->axes) {
        h = hash_combine(h, var_id(a.variable()));
        h = hash_combine(h, static_cast<uint64_t>(a.extent));
      }
      h = hash_combine(h, hash(r->source));
      return hash_combine(h, hash(r->condition));
    }
    case NodeKind::Load: {
      auto* l = e.as<Load>();
      h = hash_combine(h, ::loom::detail::hash_string(l->buffer->name));
      return hash_combine(h, hash(l->index));
    }
    case NodeKind::Ramp: {
      auto* r = e.as<Ramp>();
      h = hash_combine(h, hash(r->base));
      return hash_combine(h, hash(r->stride));
    }
    case NodeKind::Broadcast: return hash_combine(h, hash(e.as<Broadcast>()->value));
#define LOOM_X(name) case NodeKind::name:
      LOOM_FOR_EACH_BINARY(LOOM_X)
#undef LOOM_X
      break;  // hashed above
  }
  return h;
}

LOOM_DECL uint64_t structural_hash(const Expr& e) { return StructuralHasher{}.hash(e); }

LOOM_DECL bool as_reduce_combine(const Expr& e, const Expr& acc, ReduceOp& op, Expr& value) {
  auto is_acc = [&](const Expr& x) { return structural_equal(x, acc); };
  auto binary = [&](auto* node, ReduceOp o) {
    if (!node || !is_acc(node->a)) return false;
    op = o;
    value = node->b;
    return true;
  };
  if (binary(e.as<Add>(), ReduceOp::Sum) || binary(e.as<Mul>(), ReduceOp::Prod) ||
      binary(e.as<Min>(), ReduceOp::Min) || binary(e.as<Max>(), ReduceOp::Max))
    return true;
  auto* s = e.as<Select>();
  if (!s || !is_acc(s->false_value)) return false;
  auto compares = [&](auto* c) {
    return c && structural_equal(c->a, s->true_value) && is_acc(c->b);
  };
  if (compares(s->condition.as<LT>())) {
    op = ReduceOp::Min;
  } else if (compares(s->condition.as<GT>())) {
    op = ReduceOp::Max;
  } else {
    return false;
  }
  value = s->true_value;
  return true;
}

}  // namespace ir
LOOM_END_NAMESPACE
