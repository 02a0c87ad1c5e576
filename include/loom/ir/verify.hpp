/// \file
/// The loop-nest verifier (layer ir/): checks the invariants of ir/stmt.hpp that lowering's
/// passes and the backends rely on, so that a pass that breaks one fails where it broke it,
/// naming the pass, instead of as wrong code or a crash several passes later. lower() runs it
/// after every pass when LowerOptions::verify is set (by default when LOOM_ENABLE_ASSERTS is);
/// tests call it directly.
///
/// Every loop nest keeps these (each failure is a loom::internal_error, a bug in the pass that
/// made the statement, with its id):
/// - `[loom.ir.E050]` every variable is bound by an enclosing For (loom's loop nests have no
///   Let and no scalar parameters), and no For binds the variable of a For around it;
/// - `[loom.ir.E051]` every Load, Store and AllReduce names a kernel argument (arg_index >= 0)
///   or a buffer an enclosing Allocate makes, and no Allocate makes an argument;
/// - `[loom.ir.E052]` a For runs an index Variable over scalar index bounds, and a constant
///   extent is not negative;
/// - `[loom.ir.E053]` a Store's value has its index's lanes and its buffer's element type, a
///   Load has its buffer's element type with its index's lanes, and an IfThenElse's condition
///   is one bool (vector code has no lane-dependent branches);
/// - `[loom.ir.E054]` no TensorRead or Reduce: lowering turns reads into loads and reductions
///   into init and update nests.
///
/// and, as `VerifyOptions` says, what the passes that ran guarantee:
/// - `[loom.ir.E055]` every expression is scalar (before vectorize_loops);
/// - `[loom.ir.E056]` no Unrolled loop of constant min and of constant extent up to the
///   unroller's limit is left (right after unroll_loops: partition_loops may then peel a loop
///   just over the limit down to it);
/// - `[loom.ir.E057]` no Vectorized loop is left (after vectorize_loops).
#ifndef LOOM_IR_VERIFY_HPP
#define LOOM_IR_VERIFY_HPP

#include "loom/ir/stmt.hpp"

#include <cstdint>
#include <string>

LOOM_BEGIN_NAMESPACE
namespace ir {

/// What the passes that made a statement guarantee beyond the invariants every loop nest keeps.
struct VerifyOptions {
  /// The pass that made the statement, named in the error ("after unroll_loops: ...").
  std::string after;
  /// No expression has more than one lane (vectorize_loops has not run).
  bool scalar = false;
  /// When >= 0: no Unrolled loop of constant min and of constant extent up to this is left.
  int64_t max_unrolled_extent = -1;
  /// No loop is Vectorized.
  bool no_vectorized_loops = false;
};

/// Throws loom::internal_error `[loom.ir.E050]`...`[loom.ir.E057]` (see above) for the first
/// broken invariant of `s`, naming `options.after`.
void verify(const Stmt& s, const VerifyOptions& options = {});

}  // namespace ir
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/ir/impl/verify.ipp"
#endif

#endif  // LOOM_IR_VERIFY_HPP
