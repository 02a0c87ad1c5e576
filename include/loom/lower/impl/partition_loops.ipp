// Body of loom/lower/partition_loops.hpp.
#include "loom/lower/partition_loops.hpp"

#include "loom/ir/simplify.hpp"

#include <vector>

LOOM_BEGIN_NAMESPACE
namespace lower {

namespace detail {

// `ranges_` holds the ranges of the enclosing loops of constant bounds: a term that depends on
// an outer loop's variable is settled (or not) over that loop's range.
class loop_partitioner : public ir::StmtMutator {
 protected:
  // Conditions, mins and maxes in `s` that use `v`; also the ranges of the loops inside `s`,
  // which proving them needs.
  static std::vector<ir::Expr> dependent_terms(const ir::Stmt& s, const ir::Variable* v,
                                               ir::RangeMap& inner_ranges) {
    struct collector : ir::StmtVisitor {
      const ir::Variable* v;
      std::vector<ir::Expr> out;
      ir::RangeMap* ranges;
      using ir::StmtVisitor::visit;
      void visit_For(const ir::For* op) override {
        auto *mn = ir::as_const_int(op->min), *ext = ir::as_const_int(op->extent);
        if (mn && ext) (*ranges)[op->variable()] = {*mn, *mn + *ext - 1};
        ir::StmtVisitor::visit_For(op);
      }
      // A conjunction contributes its conjuncts: a padding condition `0 <= y && y < H && 0 <=
      // x && x < W` is settled for the y loop once its own two terms are, and the x loop inside
      // settles the other two.
      void add(const ir::Expr& e) {
        if (const auto* a = e.as<ir::And>()) {
          add(a->a);
          add(a->b);
        } else if (ir::uses_var(e, v)) {
          out.push_back(e);
        }
      }
      void visit_IfThenElse(const ir::IfThenElse* op) override {
        add(op->condition);
        ir::StmtVisitor::visit_IfThenElse(op);
      }
      void visit_Select(const ir::Select* op) override {
        add(op->condition);
        ir::StmtVisitor::visit_Select(op);
      }
      void visit_Min(const ir::Min* op) override {
        add(ir::Min::make(op->a, op->b));
        ir::StmtVisitor::visit_Min(op);
      }
      void visit_Max(const ir::Max* op) override {
        add(ir::Max::make(op->a, op->b));
        ir::StmtVisitor::visit_Max(op);
      }
    } c;
    c.v = v;
    c.ranges = &inner_ranges;
    c.visit(s);
    return c.out;
  }

  bool all_resolve(const std::vector<ir::Expr>& terms, const ir::Variable* v, int64_t lo,
                   int64_t hi, const ir::RangeMap& inner) {
    for (auto& [var, r] : inner) ranges_[var] = r;
    ranges_[v] = {lo, hi};
    bool ok = true;
    for (auto& t : terms) {
      ir::Expr r = ir::simplify(t, ranges_);
      if (t.dtype().is_bool() ? !ir::as_const_int(r) : (r.as<ir::Min>() || r.as<ir::Max>())) {
        ok = false;
        break;
      }
    }
    ranges_.erase(v);
    for (auto& [var, r] : inner) ranges_.erase(var);
    return ok;
  }

  ir::Stmt visit_For(const ir::For* op, const ir::Stmt& self) override {
    auto *cmin = ir::as_const_int(op->min), *cext = ir::as_const_int(op->extent);
    if (!cmin || !cext || *cext < 3 || op->for_kind >= ir::ForKind::BlockIdxX) {
      if (cmin && cext) ranges_[op->variable()] = {*cmin, *cmin + *cext - 1};
      ir::Stmt r = ir::StmtMutator::visit_For(op, self);
      ranges_.erase(op->variable());
      return r;
    }
    const int64_t lo = *cmin, hi = *cmin + *cext - 1;
    ir::RangeMap inner;
    auto terms = dependent_terms(op->body, op->variable(), inner);
    bool peel_first = false, peel_last = false;
    if (!terms.empty() && !all_resolve(terms, op->variable(), lo, hi, inner)) {
      if (all_resolve(terms, op->variable(), lo, hi - 1, inner))
        peel_last = true;
      else if (all_resolve(terms, op->variable(), lo + 1, hi, inner))
        peel_first = true;
      else if (*cext >= 4 && all_resolve(terms, op->variable(), lo + 1, hi - 1, inner))
        peel_first = peel_last = true;
    }
    const int64_t main_lo = lo + (peel_first ? 1 : 0), main_hi = hi - (peel_last ? 1 : 0);
    ranges_[op->variable()] = {main_lo, main_hi};
    ir::Stmt body = mutate(op->body);
    ranges_.erase(op->variable());
    if (!peel_first && !peel_last) {
      if (body.same_as(op->body)) return self;
      return ir::For::make(op->var, op->min, op->extent, op->for_kind, body);
    }
    std::vector<ir::Stmt> parts;
    auto peeled = [&](int64_t at) {
      return mutate(ir::substitute(op->body, {{op->variable(), ir::Expr(at)}}));
    };
    if (peel_first) parts.push_back(peeled(lo));
    parts.push_back(ir::For::make(op->var, ir::Expr(main_lo), ir::Expr(main_hi - main_lo + 1),
                                  op->for_kind, body));
    if (peel_last) parts.push_back(peeled(hi));
    return ir::Block::make(parts);
  }

 private:
  ir::RangeMap ranges_;
};

}  // namespace detail

LOOM_DECL ir::Stmt partition_loops(const ir::Stmt& s) {
  detail::loop_partitioner p;
  return p.mutate(s);
}

}  // namespace lower
LOOM_END_NAMESPACE
