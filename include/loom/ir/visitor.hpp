/// \file
/// Traversals over expressions (layer ir/): a read-only `ExprVisitor`, an `ExprMutator` that
/// rebuilds a node only when a child changed (so identity is kept when nothing changes), and
/// small helpers built on them (post-order walks, substitution, free variables).
#ifndef LOOM_IR_VISITOR_HPP
#define LOOM_IR_VISITOR_HPP

#include "loom/ir/expr.hpp"

#include <functional>
#include <unordered_map>
#include <unordered_set>

LOOM_BEGIN_NAMESPACE
namespace ir {

/// Read-only traversal. Override the visit_X you care about and call the base to recurse.
class ExprVisitor {
 public:
  virtual ~ExprVisitor() = default;
  virtual void visit(const Expr& e);

 protected:
#define LOOM_X(name) virtual void visit_##name(const name* op);
  LOOM_FOR_EACH_EXPR(LOOM_X)
#undef LOOM_X
  void visit_iter_vars(const std::vector<IterVar>& axes);
};

/// Rewriting traversal. Each visit_X returns the (possibly) new expression; the defaults rebuild a
/// node only if a child changed and otherwise return `self`, keeping identity.
class ExprMutator {
 public:
  virtual ~ExprMutator() = default;
  virtual Expr mutate(const Expr& e);

 protected:
#define LOOM_X(name) virtual Expr visit_##name(const name* op, const Expr& self);
  LOOM_FOR_EACH_EXPR(LOOM_X)
#undef LOOM_X
};

/// Reads of some tensors turned into reads of others (`map`), the indices of the reads of one of
/// them (`reindexed`) passed through `reindex` (a layout change), and computes rebuilt on the
/// replacements: what a pass that swaps tensors under a DAG (a packed weight, a folded batch
/// norm) walks the DAG's computes with, in topological order.
class TensorRedirector : public ExprMutator {
 public:
  std::unordered_map<const TensorNode*, Tensor> map;
  const TensorNode* reindexed = nullptr;
  std::function<std::vector<Expr>(const std::vector<Expr>&)> reindex;

  /// Rebuilds compute `op` on the replacements, and maps `op` to the new compute so that its
  /// readers follow; nothing when its body reads none of them.
  void rebuild(const Tensor& op);
  /// What `t` became (`t` itself when nothing replaced it).
  Tensor current(const Tensor& t) const;

 protected:
  Expr visit_TensorRead(const TensorRead* op, const Expr& self) override;
};

/// Calls `f` on every sub-expression, children before parents.
void post_order_visit(const Expr& e, const std::function<void(const Expr&)>& f);

/// Replaces variables by expressions (keys are Variable nodes).
Expr substitute(const Expr& e, const std::unordered_map<const Variable*, Expr>& replacements);

/// Variables used in `e` that no Reduce inside `e` binds, in order of first use.
std::vector<const Variable*> free_vars(const Expr& e);

/// Whether `e` uses the variable `v`.
bool uses_var(const Expr& e, const Variable* v);

}  // namespace ir
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/ir/impl/visitor.ipp"
#endif

#endif  // LOOM_IR_VISITOR_HPP
