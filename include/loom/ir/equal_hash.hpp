/// \file
/// Structural equality and hashing of expressions (layer ir/): the keys of kernel caches, search
/// de-duplication and (through the DAG) tuning records.
#ifndef LOOM_IR_EQUAL_HASH_HPP
#define LOOM_IR_EQUAL_HASH_HPP

#include "loom/detail/hash.hpp"
#include "loom/ir/expr.hpp"

#include <functional>
#include <unordered_map>

LOOM_BEGIN_NAMESPACE
namespace ir {

/// Whether two expressions have the same structure. Variables bound by a Reduce are matched by
/// position. Free variables must be the same node, unless `map_free_vars` is set: then they are
/// matched by order of first appearance (alpha-equivalence). Tensors must be the same tensor.
bool structural_equal(const Expr& a, const Expr& b, bool map_free_vars = false);

/// The inverse of reduce_combine (ir/expr.hpp): when `e` is `reduce_combine(op, acc, value)` for
/// some op and value (`acc` compared structurally), sets `op` and `value` and returns true.
bool as_reduce_combine(const Expr& e, const Expr& acc, ReduceOp& op, Expr& value);

/// A hash consistent with structural_equal in both modes: variables (free or bound) are numbered
/// by first appearance and names are ignored. The hash is stable across runs and machines.
class StructuralHasher {
 public:
  /// How a tensor read contributes: by default its dtype, shape and kind (not its name). The DAG
  /// passes its topological position instead.
  std::function<uint64_t(const TensorNode*)> tensor_id;

  uint64_t hash(const Expr& e);

 private:
  uint64_t var_id(const Variable* v);
  std::unordered_map<const Variable*, uint64_t> vars_;
};

uint64_t structural_hash(const Expr& e);

}  // namespace ir
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/ir/impl/equal_hash.ipp"
#endif

#endif  // LOOM_IR_EQUAL_HASH_HPP
