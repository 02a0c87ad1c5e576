// Bodies of loom/ir/visitor.hpp.
#include "loom/ir/visitor.hpp"

#include <algorithm>

LOOM_BEGIN_NAMESPACE
namespace ir {

LOOM_DECL void ExprVisitor::visit(const Expr& e) {
  switch (e.kind()) {
#define LOOM_X(name) \
  case NodeKind::name: return visit_##name(static_cast<const name*>(e.get()));
    LOOM_FOR_EACH_EXPR(LOOM_X)
#undef LOOM_X
  }
}

LOOM_DECL void ExprVisitor::visit_iter_vars(const std::vector<IterVar>& axes) {
  for (auto& a : axes) visit(a.var);
}
LOOM_DECL void ExprVisitor::visit_IntImm(const IntImm*) {}
LOOM_DECL void ExprVisitor::visit_FloatImm(const FloatImm*) {}
LOOM_DECL void ExprVisitor::visit_Variable(const Variable*) {}
LOOM_DECL void ExprVisitor::visit_Cast(const Cast* op) { visit(op->value); }
#define LOOM_X(name)                                         \
  LOOM_DECL void ExprVisitor::visit_##name(const name* op) { \
    visit(op->a);                                            \
    visit(op->b);                                            \
  }
LOOM_FOR_EACH_BINARY(LOOM_X)
#undef LOOM_X
LOOM_DECL void ExprVisitor::visit_Not(const Not* op) { visit(op->a); }
LOOM_DECL void ExprVisitor::visit_Select(const Select* op) {
  visit(op->condition);
  visit(op->true_value);
  visit(op->false_value);
}
LOOM_DECL void ExprVisitor::visit_Call(const Call* op) {
  for (auto& a : op->args) visit(a);
}
LOOM_DECL void ExprVisitor::visit_TensorRead(const TensorRead* op) {
  for (auto& i : op->indices) visit(i);
}
LOOM_DECL void ExprVisitor::visit_Reduce(const Reduce* op) {
  visit(op->source);
  if (op->condition.defined()) visit(op->condition);
}

LOOM_DECL void ExprVisitor::visit_Load(const Load* op) { visit(op->index); }
LOOM_DECL void ExprVisitor::visit_Ramp(const Ramp* op) {
  visit(op->base);
  visit(op->stride);
}
LOOM_DECL void ExprVisitor::visit_Broadcast(const Broadcast* op) { visit(op->value); }

LOOM_DECL Expr ExprMutator::mutate(const Expr& e) {
  if (!e.defined()) return e;
  switch (e.kind()) {
#define LOOM_X(name) \
  case NodeKind::name: return visit_##name(static_cast<const name*>(e.get()), e);
    LOOM_FOR_EACH_EXPR(LOOM_X)
#undef LOOM_X
  }
  return e;
}

LOOM_DECL Expr ExprMutator::visit_IntImm(const IntImm*, const Expr& self) { return self; }
LOOM_DECL Expr ExprMutator::visit_FloatImm(const FloatImm*, const Expr& self) { return self; }
LOOM_DECL Expr ExprMutator::visit_Variable(const Variable*, const Expr& self) { return self; }
LOOM_DECL Expr ExprMutator::visit_Cast(const Cast* op, const Expr& self) {
  Expr v = mutate(op->value);
  return v.same_as(op->value) ? self : Cast::make(op->dtype, v);
}
#define LOOM_X(name)                                                           \
  LOOM_DECL Expr ExprMutator::visit_##name(const name* op, const Expr& self) { \
    Expr a = mutate(op->a), b = mutate(op->b);                                 \
    return a.same_as(op->a) && b.same_as(op->b) ? self : name::make(a, b);     \
  }
LOOM_FOR_EACH_BINARY(LOOM_X)
#undef LOOM_X
LOOM_DECL Expr ExprMutator::visit_Not(const Not* op, const Expr& self) {
  Expr a = mutate(op->a);
  return a.same_as(op->a) ? self : Not::make(a);
}
LOOM_DECL Expr ExprMutator::visit_Select(const Select* op, const Expr& self) {
  Expr c = mutate(op->condition), t = mutate(op->true_value), f = mutate(op->false_value);
  if (c.same_as(op->condition) && t.same_as(op->true_value) && f.same_as(op->false_value))
    return self;
  return Select::make(c, t, f);
}
LOOM_DECL Expr ExprMutator::visit_Call(const Call* op, const Expr& self) {
  std::vector<Expr> args;
  bool changed = false;
  for (auto& a : op->args) {
    args.push_back(mutate(a));
    changed = changed || !args.back().same_as(a);
  }
  return changed ? Call::make(op->op, std::move(args)) : self;
}
LOOM_DECL Expr ExprMutator::visit_TensorRead(const TensorRead* op, const Expr& self) {
  std::vector<Expr> idx;
  bool changed = false;
  for (auto& i : op->indices) {
    idx.push_back(mutate(i));
    changed = changed || !idx.back().same_as(i);
  }
  return changed ? TensorRead::make(Tensor(op->tensor), std::move(idx)) : self;
}
LOOM_DECL Expr ExprMutator::visit_Reduce(const Reduce* op, const Expr& self) {
  Expr s = mutate(op->source);
  Expr c = op->condition.defined() ? mutate(op->condition) : op->condition;
  if (s.same_as(op->source) && c.same_as(op->condition)) return self;
  return Reduce::make(op->op, s, op->axes, c);
}

LOOM_DECL Expr ExprMutator::visit_Load(const Load* op, const Expr& self) {
  Expr i = mutate(op->index);
  return i.same_as(op->index) ? self : Load::make(op->buffer, i);
}
LOOM_DECL Expr ExprMutator::visit_Ramp(const Ramp* op, const Expr& self) {
  Expr b = mutate(op->base), s = mutate(op->stride);
  return b.same_as(op->base) && s.same_as(op->stride) ? self : Ramp::make(b, s, op->lanes);
}
LOOM_DECL Expr ExprMutator::visit_Broadcast(const Broadcast* op, const Expr& self) {
  Expr v = mutate(op->value);
  return v.same_as(op->value) ? self : Broadcast::make(v, op->lanes);
}

namespace detail {
class post_order_walker : public ExprVisitor {
 public:
  explicit post_order_walker(const std::function<void(const Expr&)>& f) : f_(f) {}
  void visit(const Expr& e) override {
    ExprVisitor::visit(e);
    f_(e);
  }

 private:
  const std::function<void(const Expr&)>& f_;
};

class substituter : public ExprMutator {
 public:
  explicit substituter(const std::unordered_map<const Variable*, Expr>& m) : m_(m) {}

 protected:
  Expr visit_Variable(const Variable* op, const Expr& self) override {
    auto it = m_.find(op);
    return it == m_.end() ? self : it->second;
  }

 private:
  const std::unordered_map<const Variable*, Expr>& m_;
};

class free_var_collector : public ExprVisitor {
 public:
  std::vector<const Variable*> vars;

 protected:
  void visit_Variable(const Variable* op) override {
    if (bound_.count(op)) return;
    if (std::find(vars.begin(), vars.end(), op) == vars.end()) vars.push_back(op);
  }
  void visit_Reduce(const Reduce* op) override {
    for (auto& a : op->axes) bound_.insert(a.variable());
    ExprVisitor::visit_Reduce(op);
  }

 private:
  std::unordered_set<const Variable*> bound_;
};
}  // namespace detail

LOOM_DECL void post_order_visit(const Expr& e, const std::function<void(const Expr&)>& f) {
  detail::post_order_walker w(f);
  w.visit(e);
}

LOOM_DECL Expr substitute(const Expr& e,
                          const std::unordered_map<const Variable*, Expr>& replacements) {
  if (replacements.empty()) return e;
  detail::substituter s(replacements);
  return s.mutate(e);
}

LOOM_DECL std::vector<const Variable*> free_vars(const Expr& e) {
  detail::free_var_collector c;
  c.visit(e);
  return c.vars;
}

LOOM_DECL bool uses_var(const Expr& e, const Variable* v) {
  bool found = false;
  post_order_visit(e, [&](const Expr& x) { found = found || x.get() == v; });
  return found;
}

LOOM_DECL Expr TensorRedirector::visit_TensorRead(const TensorRead* op, const Expr& self) {
  Expr e = ExprMutator::visit_TensorRead(op, self);
  const auto* r = e.as<TensorRead>();
  auto it = map.find(r->tensor.get());
  if (it == map.end()) return e;
  if (r->tensor.get() == reindexed && reindex)
    return TensorRead::make(it->second, reindex(r->indices));
  return TensorRead::make(it->second, r->indices);
}

LOOM_DECL void TensorRedirector::rebuild(const Tensor& op) {
  Expr body = mutate(op->body);
  if (!body.same_as(op->body)) map[op.get()] = make_compute(op.name(), op->axes, body, op->tag);
}

LOOM_DECL Tensor TensorRedirector::current(const Tensor& t) const {
  auto it = map.find(t.get());
  return it == map.end() ? t : it->second;
}

}  // namespace ir
LOOM_END_NAMESPACE
