// Bodies of loom/ir/stmt.hpp.
#include "loom/ir/stmt.hpp"

#include "loom/ir/printer.hpp"

#include <ostream>
#include <sstream>

LOOM_BEGIN_NAMESPACE
namespace ir {

LOOM_DECL Stmt For::make(Expr var, Expr min, Expr extent, ForKind kind, Stmt body) {
  LOOM_INTERNAL_CHECK(var.as<Variable>() && var.dtype() == DType::index())
      << "For over a non-variable";
  LOOM_INTERNAL_CHECK(min.dtype() == DType::index() && extent.dtype() == DType::index())
      << "For bounds must be index typed";
  LOOM_INTERNAL_CHECK(body.defined()) << "For without a body";
  return new For(std::move(var), std::move(min), std::move(extent), kind, std::move(body));
}

LOOM_DECL Stmt Store::make(Buffer buffer, Expr index, Expr value) {
  LOOM_INTERNAL_CHECK(buffer && index.defined() && value.defined()) << "incomplete Store";
  LOOM_INTERNAL_CHECK(value.dtype() == buffer->dtype.with_lanes(index.dtype().lanes))
      << "Store of " << to_string(value.dtype()) << " into " << buffer->name << " ("
      << to_string(buffer->dtype) << ") at index of type " << to_string(index.dtype());
  return new Store(std::move(buffer), std::move(index), std::move(value));
}

LOOM_DECL Stmt Allocate::make(Buffer buffer, Stmt body) {
  LOOM_INTERNAL_CHECK(buffer && buffer->arg_index < 0) << "Allocate of a kernel argument";
  return new Allocate(std::move(buffer), std::move(body));
}

LOOM_DECL Stmt Block::make(std::vector<Stmt> stmts) {
  std::vector<Stmt> flat;
  for (auto& s : stmts) {
    if (!s.defined()) continue;
    if (auto* b = s.as<Block>())
      flat.insert(flat.end(), b->stmts.begin(), b->stmts.end());
    else
      flat.push_back(s);
  }
  if (flat.size() == 1) return flat[0];
  return new Block(std::move(flat));
}

LOOM_DECL Stmt IfThenElse::make(Expr condition, Stmt then_case, Stmt else_case) {
  LOOM_INTERNAL_CHECK(condition.dtype() == DType::boolean()) << "IfThenElse on a non-bool";
  return new IfThenElse(std::move(condition), std::move(then_case), std::move(else_case));
}

LOOM_DECL Stmt Barrier::make(bool wait_async, int pending_groups) {
  return new Barrier(wait_async, pending_groups);
}
LOOM_DECL Stmt CopyAsync::make(Stmt body) { return new CopyAsync(std::move(body)); }

LOOM_DECL Stmt AllReduce::make(ReduceOp op, Buffer buffer) {
  LOOM_INTERNAL_CHECK(buffer && buffer->dtype.lanes == 1 && buffer->scope == MemoryScope::Local)
      << "AllReduce over something other than a thread's own scalar array";
  return new AllReduce(op, std::move(buffer));
}

LOOM_DECL void StmtVisitor::visit(const Stmt& s) {
  if (!s.defined()) return;
  switch (s.kind()) {
#define LOOM_X(name) \
  case StmtKind::name: return visit_##name(static_cast<const name*>(s.get()));
    LOOM_FOR_EACH_STMT(LOOM_X)
#undef LOOM_X
  }
}
LOOM_DECL void StmtVisitor::visit_For(const For* op) {
  visit(op->min);
  visit(op->extent);
  visit(op->body);
}
LOOM_DECL void StmtVisitor::visit_Store(const Store* op) {
  visit(op->index);
  visit(op->value);
}
LOOM_DECL void StmtVisitor::visit_Allocate(const Allocate* op) { visit(op->body); }
LOOM_DECL void StmtVisitor::visit_Block(const Block* op) {
  for (auto& s : op->stmts) visit(s);
}
LOOM_DECL void StmtVisitor::visit_IfThenElse(const IfThenElse* op) {
  visit(op->condition);
  visit(op->then_case);
  visit(op->else_case);
}
LOOM_DECL void StmtVisitor::visit_Barrier(const Barrier*) {}
LOOM_DECL void StmtVisitor::visit_AllReduce(const AllReduce*) {}
LOOM_DECL void StmtVisitor::visit_CopyAsync(const CopyAsync* op) { visit(op->body); }

LOOM_DECL Stmt StmtMutator::mutate(const Stmt& s) {
  if (!s.defined()) return s;
  switch (s.kind()) {
#define LOOM_X(name) \
  case StmtKind::name: return visit_##name(static_cast<const name*>(s.get()), s);
    LOOM_FOR_EACH_STMT(LOOM_X)
#undef LOOM_X
  }
  return s;
}
LOOM_DECL Stmt StmtMutator::visit_For(const For* op, const Stmt& self) {
  Expr mn = mutate(op->min), ext = mutate(op->extent);
  Stmt body = mutate(op->body);
  if (mn.same_as(op->min) && ext.same_as(op->extent) && body.same_as(op->body)) return self;
  return For::make(op->var, mn, ext, op->for_kind, body);
}
LOOM_DECL Stmt StmtMutator::visit_Store(const Store* op, const Stmt& self) {
  Expr i = mutate(op->index), v = mutate(op->value);
  if (i.same_as(op->index) && v.same_as(op->value)) return self;
  return Store::make(op->buffer, i, v);
}
LOOM_DECL Stmt StmtMutator::visit_Allocate(const Allocate* op, const Stmt& self) {
  Stmt b = mutate(op->body);
  return b.same_as(op->body) ? self : Allocate::make(op->buffer, b);
}
LOOM_DECL Stmt StmtMutator::visit_Block(const Block* op, const Stmt& self) {
  std::vector<Stmt> out;
  bool changed = false;
  for (auto& s : op->stmts) {
    out.push_back(mutate(s));
    changed = changed || !out.back().same_as(s);
  }
  return changed ? Block::make(std::move(out)) : self;
}
LOOM_DECL Stmt StmtMutator::visit_IfThenElse(const IfThenElse* op, const Stmt& self) {
  Expr c = mutate(op->condition);
  Stmt t = mutate(op->then_case), e = mutate(op->else_case);
  if (c.same_as(op->condition) && t.same_as(op->then_case) && e.same_as(op->else_case)) return self;
  return IfThenElse::make(c, t, e);
}
LOOM_DECL Stmt StmtMutator::visit_Barrier(const Barrier*, const Stmt& self) { return self; }
LOOM_DECL Stmt StmtMutator::visit_AllReduce(const AllReduce*, const Stmt& self) { return self; }
LOOM_DECL Stmt StmtMutator::visit_CopyAsync(const CopyAsync* op, const Stmt& self) {
  Stmt b = mutate(op->body);
  return b.same_as(op->body) ? self : CopyAsync::make(b);
}

namespace detail {

inline const char* scope_name(MemoryScope s) {
  switch (s) {
    case MemoryScope::Global: return "global";
    case MemoryScope::Local: return "local";
    case MemoryScope::Shared: return "shared";
  }
  return "?";
}

inline void print_stmt(std::ostream& os, const Stmt& s, int indent) {
  std::string pad(indent * 2, ' ');
  if (!s.defined()) return;
  switch (s.kind()) {
    case StmtKind::For: {
      auto* f = s.as<For>();
      os << pad << for_kind_name(f->for_kind) << " (" << f->variable()->name << ", " << f->min
         << ", " << f->extent << ") {\n";
      print_stmt(os, f->body, indent + 1);
      os << pad << "}\n";
      return;
    }
    case StmtKind::Store: {
      auto* st = s.as<Store>();
      os << pad << st->buffer->name << '[' << st->index << "] = " << st->value << '\n';
      return;
    }
    case StmtKind::Allocate: {
      auto* a = s.as<Allocate>();
      os << pad << "allocate " << a->buffer->name << ": " << to_string(a->buffer->dtype) << '[';
      for (size_t d = 0; d < a->buffer->shape.size(); ++d)
        os << (d ? ", " : "") << a->buffer->shape[d];
      os << "] " << scope_name(a->buffer->scope) << '\n';
      print_stmt(os, a->body, indent);
      return;
    }
    case StmtKind::Block:
      for (auto& x : s.as<Block>()->stmts) print_stmt(os, x, indent);
      return;
    case StmtKind::IfThenElse: {
      auto* i = s.as<IfThenElse>();
      os << pad << "if (" << i->condition << ") {\n";
      print_stmt(os, i->then_case, indent + 1);
      if (i->else_case.defined()) {
        os << pad << "} else {\n";
        print_stmt(os, i->else_case, indent + 1);
      }
      os << pad << "}\n";
      return;
    }
    case StmtKind::Barrier:
      if (auto* b = s.as<Barrier>(); b->wait_async)
        os << pad << "wait_async_copies(pending " << b->pending_groups << "); barrier\n";
      else
        os << pad << "barrier\n";
      return;
    case StmtKind::CopyAsync:
      os << pad << "copy_async {\n";
      print_stmt(os, s.as<CopyAsync>()->body, indent + 1);
      os << pad << "}\n";
      return;
    case StmtKind::AllReduce: {
      auto* r = s.as<AllReduce>();
      os << pad << r->buffer->name << "[0] = all_reduce_" << reduce_op_name(r->op)
         << "(threadIdx.x)\n";
      return;
    }
  }
}

class stmt_substituter : public StmtMutator {
 public:
  explicit stmt_substituter(const std::unordered_map<const Variable*, Expr>& m) : m_(m) {}

 protected:
  Expr visit_Variable(const Variable* op, const Expr& self) override {
    auto it = m_.find(op);
    return it == m_.end() ? self : it->second;
  }

 private:
  const std::unordered_map<const Variable*, Expr>& m_;
};

}  // namespace detail

LOOM_DECL std::ostream& operator<<(std::ostream& os, const Stmt& s) {
  detail::print_stmt(os, s, 0);
  return os;
}

LOOM_DECL std::ostream& operator<<(std::ostream& os, const LoweredFunc& f) {
  os << "kernel " << f.name << '(';
  for (size_t i = 0; i < f.args.size(); ++i) {
    os << (i ? ", " : "") << to_string(f.args[i]->dtype) << "* " << f.args[i]->name << '[';
    for (size_t d = 0; d < f.args[i]->shape.size(); ++d)
      os << (d ? ", " : "") << f.args[i]->shape[d];
    os << ']';
  }
  os << ") {\n";
  detail::print_stmt(os, f.body, 1);
  return os << "}\n";
}

LOOM_DECL std::string to_string(const Stmt& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

LOOM_DECL Stmt substitute(const Stmt& s,
                          const std::unordered_map<const Variable*, Expr>& replacements) {
  if (replacements.empty()) return s;
  detail::stmt_substituter sub(replacements);
  return sub.mutate(s);
}

}  // namespace ir
LOOM_END_NAMESPACE
