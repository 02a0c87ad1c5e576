// Body of loom/lower/auto_unroll.hpp.
#include "loom/lower/auto_unroll.hpp"

#include <cstdint>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace lower {

namespace detail {

// `s` marked; `steps` receives the number of statement instances it runs.
inline ir::Stmt mark(const ir::Stmt& s, int max_step, int64_t& steps) {
  using namespace ir;
  if (auto* f = s.as<For>()) {
    int64_t inner = 0;
    Stmt body = mark(f->body, max_step, inner);
    auto* e = as_const_int(f->extent);
    steps = e ? *e * inner : INT64_MAX / 4;
    ForKind k = f->for_kind;
    if (k == ForKind::Serial && e && steps <= max_step) k = ForKind::Unrolled;
    if (k == f->for_kind && body.same_as(f->body)) return s;
    return For::make(f->var, f->min, f->extent, k, body);
  }
  if (auto* b = s.as<Block>()) {
    std::vector<Stmt> out;
    steps = 0;
    for (auto& x : b->stmts) {
      int64_t k = 0;
      out.push_back(mark(x, max_step, k));
      steps += k;
    }
    return Block::make(out);
  }
  if (auto* a = s.as<Allocate>()) {
    Stmt body = mark(a->body, max_step, steps);
    return Allocate::make(a->buffer, body);
  }
  if (auto* i = s.as<IfThenElse>()) {
    int64_t k1 = 0, k2 = 0;
    Stmt t = mark(i->then_case, max_step, k1);
    Stmt e = i->else_case.defined() ? mark(i->else_case, max_step, k2) : Stmt();
    steps = k1 + k2;
    return IfThenElse::make(i->condition, t, e);
  }
  steps = 1;
  return s;
}

}  // namespace detail

LOOM_DECL ir::Stmt auto_unroll(const ir::Stmt& nest, int max_step) {
  int64_t steps = 0;
  return detail::mark(nest, max_step, steps);
}

}  // namespace lower
LOOM_END_NAMESPACE
