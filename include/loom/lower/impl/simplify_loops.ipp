// Body of loom/lower/simplify_loops.hpp.
#include "loom/lower/simplify_loops.hpp"

#include "loom/ir/simplify.hpp"

#include <unordered_map>

LOOM_BEGIN_NAMESPACE
namespace lower {

namespace detail {

class loop_simplifier : public ir::StmtMutator {
 public:
  using ir::StmtMutator::mutate;
  ir::Expr mutate(const ir::Expr& e) override {
    return ir::simplify_substituted(e, substitutions_, ranges_);
  }

 protected:
  ir::Stmt visit_For(const ir::For* op, const ir::Stmt& self) override {
    ir::Expr mn = mutate(op->min), ext = mutate(op->extent);
    auto *cmin = ir::as_const_int(mn), *cext = ir::as_const_int(ext);
    if (cext && *cext <= 0) return ir::Block::make({});
    // A loop of one iteration is its body at that iteration. The variable is replaced in each
    // expression as it is simplified (the same result as substituting into the body first,
    // without copying the body once per such loop: tiled nests have many of them).
    if (cext && *cext == 1 && op->for_kind < ir::ForKind::BlockIdxX) {
      substitutions_[op->variable()] = mn;
      ir::Stmt body = mutate(op->body);
      substitutions_.erase(op->variable());
      return body;
    }
    if (cmin && cext) ranges_[op->variable()] = {*cmin, *cmin + *cext - 1};
    ir::Stmt body = mutate(op->body);
    ranges_.erase(op->variable());
    if (mn.same_as(op->min) && ext.same_as(op->extent) && body.same_as(op->body)) return self;
    return ir::For::make(op->var, mn, ext, op->for_kind, body);
  }
  ir::Stmt visit_Store(const ir::Store* op, const ir::Stmt& self) override {
    ir::Expr i = mutate(op->index);
    // The value of an update reads the stored element through the same index node: it is
    // simplified once.
    ir::Expr v = ir::simplify_substituted(op->value, substitutions_, ranges_, &op->index, &i);
    if (i.same_as(op->index) && v.same_as(op->value)) return self;
    return ir::Store::make(op->buffer, i, v);
  }
  ir::Stmt visit_IfThenElse(const ir::IfThenElse* op, const ir::Stmt& self) override {
    ir::Expr c = mutate(op->condition);
    if (ir::is_const_int(c, 1)) return mutate(op->then_case);
    if (ir::is_const_int(c, 0))
      return op->else_case.defined() ? mutate(op->else_case) : ir::Block::make({});
    ir::Stmt t = mutate(op->then_case), e = mutate(op->else_case);
    if (c.same_as(op->condition) && t.same_as(op->then_case) && e.same_as(op->else_case))
      return self;
    return ir::IfThenElse::make(c, t, e);
  }

 private:
  ir::RangeMap ranges_;
  std::unordered_map<const ir::Variable*, ir::Expr> substitutions_;  // removed loops' values
};

}  // namespace detail

LOOM_DECL ir::Stmt simplify_loops(const ir::Stmt& s) {
  detail::loop_simplifier p;
  return p.mutate(s);
}

}  // namespace lower
LOOM_END_NAMESPACE
