// Body of loom/lower/vectorize_loops.hpp.
#include "loom/lower/vectorize_loops.hpp"

#include <vector>

LOOM_BEGIN_NAMESPACE
namespace lower {

namespace detail {

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
  LOOM_VEC_BINARY(BitXor)
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

}  // namespace detail

LOOM_DECL ir::Stmt vectorize_loops(const ir::Stmt& s) {
  detail::vectorize_pass p;
  return p.mutate(s);
}

}  // namespace lower
LOOM_END_NAMESPACE
