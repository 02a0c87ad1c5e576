// Bodies of loom/lower/inline_stages.hpp.
#include "loom/lower/inline_stages.hpp"

#include "loom/ir/visitor.hpp"

#include <unordered_map>

LOOM_BEGIN_NAMESPACE
namespace lower {

namespace detail {

class inliner : public ir::ExprMutator {
 public:
  explicit inliner(const sched::State& st) : st_(st) {}

 protected:
  ir::Expr visit_TensorRead(const ir::TensorRead* op, const ir::Expr& self) override {
    ir::Expr e = ir::ExprMutator::visit_TensorRead(op, self);
    const auto* r = e.as<ir::TensorRead>();
    const int si = st_.stage_of(r->tensor.get());
    LOOM_INTERNAL_CHECK(si >= 0) << "read of tensor '" << r->tensor->name << "' with no stage";
    if (st_.stages()[si].location != sched::ComputeLocation::Inlined) return e;
    return mutate(inline_read(st_, *r));
  }

 private:
  const sched::State& st_;
};

}  // namespace detail

LOOM_DECL ir::Expr inline_read(const sched::State& state, const ir::TensorRead& read) {
  const sched::Stage& s = state.stages()[state.stage_of(read.tensor.get())];
  std::unordered_map<const ir::Variable*, ir::Expr> sub;
  for (size_t d = 0; d < s.op->axes.size(); ++d) sub[s.op->axes[d].variable()] = read.indices[d];
  return ir::substitute(s.op->body, sub);
}

LOOM_DECL std::vector<ir::Expr> inline_stages(const sched::State& state) {
  std::vector<ir::Expr> bodies(state.stages().size());
  detail::inliner in(state);
  for (size_t si = 0; si < bodies.size(); ++si) {
    const sched::Stage& s = state.stages()[si];
    if (s.is_placeholder || s.location == sched::ComputeLocation::Inlined) continue;
    bodies[si] = in.mutate(s.op->body);
  }
  return bodies;
}

}  // namespace lower
LOOM_END_NAMESPACE
