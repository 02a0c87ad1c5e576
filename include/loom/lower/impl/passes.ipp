// Loop-nest passes of loom/lower/lower.hpp: simplify_loops, unroll_loops, vectorize_loops.
#include "loom/lower/lower.hpp"

#include "loom/ir/simplify.hpp"

LOOM_BEGIN_NAMESPACE
namespace lower {

namespace detail_lower {

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

/// Peels the first and/or last iteration of a loop when that makes every condition (every
/// conjunct of one), min and max that depends on its variable provable in the remaining
/// iterations: the tails of
/// non-divisible splits and clamped regions then disappear from the main loop, which stays
/// vectorizable and keeps constant offsets into register tiles.
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

class loop_unroller : public ir::StmtMutator {
 public:
  explicit loop_unroller(int max_extent) : max_extent_(max_extent) {}

 protected:
  ir::Stmt visit_For(const ir::For* op, const ir::Stmt& self) override {
    ir::Stmt body = mutate(op->body);
    auto *cmin = ir::as_const_int(op->min), *cext = ir::as_const_int(op->extent);
    if (op->for_kind == ir::ForKind::Unrolled && cmin && cext && *cext <= max_extent_) {
      std::vector<ir::Stmt> copies;
      for (int64_t i = 0; i < *cext; ++i)
        copies.push_back(ir::substitute(body, {{op->variable(), ir::Expr(*cmin + i)}}));
      return ir::Block::make(copies);
    }
    if (body.same_as(op->body)) return self;
    return ir::For::make(op->var, op->min, op->extent, op->for_kind, body);
  }

 private:
  int max_extent_;
};

/// Rewrites the body of one vectorized loop with its variable as a Ramp. `failed` is set where
/// the body is beyond vector code; the caller then keeps a serial loop.
class loop_vectorizer : public ir::StmtMutator {
 public:
  loop_vectorizer(const ir::Variable* v, ir::Expr min, int lanes)
      : var_(v), min_(std::move(min)), lanes_(lanes) {}
  bool failed = false;

 protected:
  using E = ir::Expr;
  E widen(const E& e) { return e.dtype().lanes == 1 ? ir::Broadcast::make(e, lanes_) : e; }

  E visit_Variable(const ir::Variable* op, const E& self) override {
    if (op != var_) return self;
    return ir::Ramp::make(min_, E(int64_t{1}), lanes_);
  }
  // Ramps stay ramps under affine arithmetic, so that the code generator sees unit-stride
  // accesses as such.
  E visit_Add(const ir::Add* op, const E& self) override {
    E a = mutate(op->a), b = mutate(op->b);
    if (a.same_as(op->a) && b.same_as(op->b)) return self;
    auto *ra = a.as<ir::Ramp>(), *rb = b.as<ir::Ramp>();
    if (ra && b.dtype().lanes == 1) return ir::Ramp::make(ra->base + b, ra->stride, lanes_);
    if (rb && a.dtype().lanes == 1) return ir::Ramp::make(a + rb->base, rb->stride, lanes_);
    if (ra && rb) return ir::Ramp::make(ra->base + rb->base, ra->stride + rb->stride, lanes_);
    return ir::Add::make(widen(a), widen(b));
  }
  E visit_Sub(const ir::Sub* op, const E& self) override {
    E a = mutate(op->a), b = mutate(op->b);
    if (a.same_as(op->a) && b.same_as(op->b)) return self;
    auto* ra = a.as<ir::Ramp>();
    if (ra && b.dtype().lanes == 1) return ir::Ramp::make(ra->base - b, ra->stride, lanes_);
    return ir::Sub::make(widen(a), widen(b));
  }
  E visit_Mul(const ir::Mul* op, const E& self) override {
    E a = mutate(op->a), b = mutate(op->b);
    if (a.same_as(op->a) && b.same_as(op->b)) return self;
    auto* ra = a.as<ir::Ramp>();
    if (ra && b.dtype().lanes == 1) return ir::Ramp::make(ra->base * b, ra->stride * b, lanes_);
    auto* rb = b.as<ir::Ramp>();
    if (rb && a.dtype().lanes == 1) return ir::Ramp::make(a * rb->base, a * rb->stride, lanes_);
    return ir::Mul::make(widen(a), widen(b));
  }
#define LOOM_VEC_BINARY(name)                                  \
  E visit_##name(const ir::name* op, const E& self) override { \
    E a = mutate(op->a), b = mutate(op->b);                    \
    if (a.same_as(op->a) && b.same_as(op->b)) return self;     \
    return ir::name::make(widen(a), widen(b));                 \
  }
  LOOM_VEC_BINARY(Div)
  LOOM_VEC_BINARY(Mod)
  LOOM_VEC_BINARY(FloorDiv)
  LOOM_VEC_BINARY(FloorMod)
  LOOM_VEC_BINARY(Min)
  LOOM_VEC_BINARY(Max)
  LOOM_VEC_BINARY(EQ)
  LOOM_VEC_BINARY(NE)
  LOOM_VEC_BINARY(LT)
  LOOM_VEC_BINARY(LE)
  LOOM_VEC_BINARY(GT)
  LOOM_VEC_BINARY(GE)
  LOOM_VEC_BINARY(And)
  LOOM_VEC_BINARY(Or)
#undef LOOM_VEC_BINARY
  E visit_Cast(const ir::Cast* op, const E& self) override {
    E v = mutate(op->value);
    if (v.same_as(op->value)) return self;
    return ir::Cast::make(op->dtype.with_lanes(v.dtype().lanes), v);
  }
  E visit_Select(const ir::Select* op, const E& self) override {
    E c = mutate(op->condition), t = mutate(op->true_value), f = mutate(op->false_value);
    if (c.same_as(op->condition) && t.same_as(op->true_value) && f.same_as(op->false_value))
      return self;
    // A lane-dependent choice evaluates both branches in vector code: only safe when neither
    // branch loads (a padding branch may read out of bounds where it is not taken).
    if (c.dtype().lanes > 1) {
      bool loads = false;
      ir::post_order_visit(op->true_value, [&](const E& x) { loads = loads || x.as<ir::Load>(); });
      ir::post_order_visit(op->false_value, [&](const E& x) { loads = loads || x.as<ir::Load>(); });
      if (loads) failed = true;
      return ir::Select::make(c, widen(t), widen(f));
    }
    if (t.dtype().lanes != f.dtype().lanes) return ir::Select::make(c, widen(t), widen(f));
    return ir::Select::make(c, t, f);
  }
  E visit_Call(const ir::Call* op, const E& self) override {
    std::vector<E> args;
    bool changed = false, vec = false;
    for (auto& a : op->args) {
      args.push_back(mutate(a));
      changed = changed || !args.back().same_as(a);
      vec = vec || args.back().dtype().lanes > 1;
    }
    if (!changed) return self;
    if (vec)
      for (auto& a : args) a = widen(a);
    return ir::Call::make(op->op, args);
  }
  E visit_Not(const ir::Not* op, const E& self) override {
    E a = mutate(op->a);
    return a.same_as(op->a) ? self : ir::Not::make(a);
  }
  E visit_Ramp(const ir::Ramp*, const E& self) override {
    failed = true;
    return self;
  }

  ir::Stmt visit_Store(const ir::Store* op, const ir::Stmt& self) override {
    E i = mutate(op->index), v = mutate(op->value);
    if (i.same_as(op->index) && v.same_as(op->value)) return self;
    // Every lane writing the same element is a reduction along the vector loop: keep it serial.
    if (i.dtype().lanes == 1) {
      failed = true;
      return self;
    }
    return ir::Store::make(op->buffer, i, widen(v));
  }
  ir::Stmt visit_IfThenElse(const ir::IfThenElse* op, const ir::Stmt& self) override {
    E c = mutate(op->condition);
    if (c.dtype().lanes > 1) {
      failed = true;
      return self;
    }
    return ir::StmtMutator::visit_IfThenElse(op, self);
  }
  ir::Stmt visit_For(const ir::For*, const ir::Stmt& self) override {
    failed = true;
    return self;
  }
  ir::Stmt visit_Allocate(const ir::Allocate*, const ir::Stmt& self) override {
    failed = true;
    return self;
  }

 private:
  const ir::Variable* var_;
  ir::Expr min_;
  int lanes_;
};

// The vectors a vectorized loop of `extent` iterations becomes, in order: one vector when the
// extent is a power of two, otherwise the largest powers of two up to 16 lanes that fit (56:
// 16 16 16 8; 14: 8 4 2), the last possibly one scalar iteration. LLVM widens a vector of any
// other length to the next power of two and shuffles the lanes into place on every operation:
// a conv whose 4 x 56 register tile was one <56 x float> per row ran at 27 GFLOP/s, the same
// tile cut into 16 16 16 8 lanes at 213 (2-thread Zen 4, one process).
inline std::vector<int> vector_chunks(int64_t extent) {
  if ((extent & (extent - 1)) == 0) return {static_cast<int>(extent)};
  std::vector<int> chunks;
  for (int64_t left = extent; left > 0;) {
    int lanes = 16;
    while (lanes > left) lanes /= 2;
    chunks.push_back(lanes);
    left -= lanes;
  }
  return chunks;
}

class vectorize_pass : public ir::StmtMutator {
 protected:
  ir::Stmt visit_For(const ir::For* op, const ir::Stmt& self) override {
    ir::Stmt body = mutate(op->body);
    auto* cext = ir::as_const_int(op->extent);
    if (op->for_kind == ir::ForKind::Vectorized) {
      // A body that already holds vectors (an inner vectorized loop) stays serial here: loom's
      // vectors have one level of lanes.
      bool has_vectors = false;
      struct vector_finder : ir::StmtVisitor {
        bool* found;
        using ir::StmtVisitor::visit;
        void visit(const ir::Expr& e) override {
          if (e.dtype().lanes > 1) *found = true;
          if (!*found) ir::StmtVisitor::visit(e);
        }
      } finder;
      finder.found = &has_vectors;
      finder.visit(body);
      if (!has_vectors && cext && *cext >= 2 && *cext <= max_vectorized_extent) {
        std::vector<ir::Stmt> chunks;
        bool failed = false;
        int64_t done = 0;
        for (int lanes : vector_chunks(*cext)) {
          const ir::Expr base = done == 0 ? op->min : op->min + ir::Expr(done);
          if (lanes == 1) {
            chunks.push_back(ir::substitute(body, {{op->variable(), base}}));
          } else {
            loop_vectorizer v(op->variable(), base, lanes);
            chunks.push_back(v.mutate(body));
            failed = failed || v.failed;
          }
          done += lanes;
        }
        if (!failed) return chunks.size() == 1 ? chunks[0] : ir::Block::make(chunks);
      }
      return ir::For::make(op->var, op->min, op->extent, ir::ForKind::Serial, body);
    }
    if (body.same_as(op->body)) return self;
    return ir::For::make(op->var, op->min, op->extent, op->for_kind, body);
  }
};

}  // namespace detail_lower

LOOM_DECL ir::Stmt simplify_loops(const ir::Stmt& s) {
  detail_lower::loop_simplifier p;
  return p.mutate(s);
}

LOOM_DECL ir::Stmt unroll_loops(const ir::Stmt& s, int max_extent) {
  detail_lower::loop_unroller p(max_extent);
  return p.mutate(s);
}

LOOM_DECL ir::Stmt partition_loops(const ir::Stmt& s) {
  detail_lower::loop_partitioner p;
  return p.mutate(s);
}

LOOM_DECL ir::Stmt vectorize_loops(const ir::Stmt& s) {
  detail_lower::vectorize_pass p;
  return p.mutate(s);
}

}  // namespace lower
LOOM_END_NAMESPACE
