/// \file
/// The list of IR node kinds (X-macros) and the semantic contract of loom's IR (layer ir/).
///
/// Semantic contract:
/// - Integer arithmetic wraps (two's complement) at the width of its type; there is no undefined
///   behaviour on overflow. Index arithmetic is int64.
/// - Div and Mod truncate towards zero (C semantics); FloorDiv and FloorMod round towards negative
///   infinity (index arithmetic; the simplifier prefers them). Integer division by zero is an
///   error in the interpreter and undefined in generated code.
/// - The operands of an expression have no evaluation order and no side effects.
/// - Select(c, t, f) evaluates only the branch that is taken: a branch may read out of bounds when
///   it is not taken (this is how padding is written).
/// - Float arithmetic is IEEE in the interpreter (rounded to the expression's type after every
///   operation). Generated code may reassociate reductions (vectorize, rfactor, reorder), so
///   correctness checks compare floats with a tolerance that scales with the reduction length.
///   Generated code may also compute a float division `a / b` as `a * (1 / b)` (one reciprocal
///   for a divisor that does not change in a loop), which moves the result by an ulp or two.
/// - An expression of `lanes > 1` applies its operation lane by lane.
///
/// How to add a new expression node:
///  1. Add it at the end of LOOM_FOR_EACH_EXPR (and at the end of LOOM_FOR_EACH_BINARY if it is
///     a plain binary op): an earlier place renumbers the kinds after it, which changes every
///     workload key and orphans the records on disk.
///  2. Declare the node in ir/expr.hpp with a validating static make().
///  3. Teach the printer (ir/impl/printer.ipp), structural equality and hashing
///     (ir/impl/equal_hash.ipp), the mutator (ir/impl/visitor.ipp), the simplifier where it can
///     fold it, and the reference interpreter (dag/impl/evaluate.ipp).
///  4. Add tests: printing (golden), equality/hash, interpreter.
/// Load, Ramp and Broadcast appear only in lowered loop nests (after lower/), never in a compute
/// body; statements (LOOM_FOR_EACH_STMT, ir/stmt.hpp) likewise.
#ifndef LOOM_IR_NODE_KINDS_HPP
#define LOOM_IR_NODE_KINDS_HPP

#include "loom/config.hpp"

#include <cstdint>

/// Binary nodes that share the layout {a, b}: arithmetic, comparisons and logic.
#define LOOM_FOR_EACH_BINARY(X) \
  LOOM_FOR_EACH_FIRST_BINARY(X) \
  X(BitXor)

/// The binary nodes of the first releases, in their order. Kinds are numbered in
/// LOOM_FOR_EACH_EXPR's order and the numbers enter workload keys (structural hashes) and so
/// the records on disk: a new kind goes last there, never between.
#define LOOM_FOR_EACH_FIRST_BINARY(X) \
  X(Add)                              \
  X(Sub)                              \
  X(Mul)                              \
  X(Div)                              \
  X(Mod)                              \
  X(FloorDiv)                         \
  X(FloorMod)                         \
  X(Min)                              \
  X(Max)                              \
  X(EQ)                               \
  X(NE)                               \
  X(LT)                               \
  X(LE)                               \
  X(GT)                               \
  X(GE)                               \
  X(And)                              \
  X(Or)

/// Every expression node kind, each listed once (new kinds last: see above).
#define LOOM_FOR_EACH_EXPR(X)   \
  X(IntImm)                     \
  X(FloatImm)                   \
  X(Variable)                   \
  X(Cast)                       \
  LOOM_FOR_EACH_FIRST_BINARY(X) \
  X(Not)                        \
  X(Select)                     \
  X(Call)                       \
  X(TensorRead)                 \
  X(Reduce)                     \
  X(Load)                       \
  X(Ramp)                       \
  X(Broadcast)                  \
  X(BitXor)

/// Every statement node kind of the lowered loop-nest IR.
#define LOOM_FOR_EACH_STMT(X) \
  X(For)                      \
  X(Store)                    \
  X(Allocate)                 \
  X(Block)                    \
  X(IfThenElse)               \
  X(Barrier)                  \
  X(AllReduce)                \
  X(CopyAsync)

LOOM_BEGIN_NAMESPACE
namespace ir {

enum class NodeKind : uint8_t {
#define LOOM_X(name) name,
  LOOM_FOR_EACH_EXPR(LOOM_X)
#undef LOOM_X
};

/// "Add", "TensorRead", ...
constexpr const char* node_kind_name(NodeKind k) {
  switch (k) {
#define LOOM_X(name) \
  case NodeKind::name: return #name;
    LOOM_FOR_EACH_EXPR(LOOM_X)
#undef LOOM_X
  }
  return "?";
}

enum class StmtKind : uint8_t {
#define LOOM_X(name) name,
  LOOM_FOR_EACH_STMT(LOOM_X)
#undef LOOM_X
};

constexpr const char* stmt_kind_name(StmtKind k) {
  switch (k) {
#define LOOM_X(name) \
  case StmtKind::name: return #name;
    LOOM_FOR_EACH_STMT(LOOM_X)
#undef LOOM_X
  }
  return "?";
}

/// How a loop runs. Serial loops run in order; Parallel loops split their iterations over threads;
/// Vectorized loops become vector code (the vectorizer falls back to Serial where it cannot);
/// Unrolled loops are replicated by the unroller. GPU bindings map a loop to a hardware index.
/// A Tensorized loop and the loops inside it are one tensor-core instruction on a GPU
/// (lower/mma.hpp); a Pipelined loop fetches the shared-memory tiles of its next iterations while
/// it computes with those of this one, in 2 (Pipelined: double buffering), 3 or 4 slots
/// (pipeline_stages, lower/gpu.hpp). Everywhere else, the interpreter included, they are serial
/// loops.
enum class ForKind : uint8_t {
  Serial,
  Parallel,
  Vectorized,
  Unrolled,
  BlockIdxX,
  BlockIdxY,
  BlockIdxZ,
  VThread,
  ThreadIdxX,
  ThreadIdxY,
  ThreadIdxZ,
  Tensorized,
  Pipelined,
  Pipelined3,
  Pipelined4
};

constexpr const char* for_kind_name(ForKind k) {
  switch (k) {
    case ForKind::Serial: return "for";
    case ForKind::Parallel: return "parallel";
    case ForKind::Vectorized: return "vectorized";
    case ForKind::Unrolled: return "unrolled";
    case ForKind::BlockIdxX: return "blockIdx.x";
    case ForKind::BlockIdxY: return "blockIdx.y";
    case ForKind::BlockIdxZ: return "blockIdx.z";
    case ForKind::VThread: return "vthread";
    case ForKind::ThreadIdxX: return "threadIdx.x";
    case ForKind::ThreadIdxY: return "threadIdx.y";
    case ForKind::ThreadIdxZ: return "threadIdx.z";
    case ForKind::Tensorized: return "tensorized";
    case ForKind::Pipelined: return "pipelined";
    case ForKind::Pipelined3: return "pipelined3";
    case ForKind::Pipelined4: return "pipelined4";
  }
  return "?";
}

/// The most slots a pipelined loop keeps of each array it fetches.
inline constexpr int kMaxPipelineStages = 4;

/// The slots (pipeline stages) a pipelined loop keeps of each shared array it fetches: the one
/// its iteration computes with and those its next iterations are copied into. 0 for a loop that
/// is not pipelined.
constexpr int pipeline_stages(ForKind k) {
  switch (k) {
    case ForKind::Pipelined: return 2;
    case ForKind::Pipelined3: return 3;
    case ForKind::Pipelined4: return 4;
    default: return 0;
  }
}

constexpr bool is_pipelined(ForKind k) { return pipeline_stages(k) > 0; }

/// The kind of a loop pipelined in `stages` slots, 2 to kMaxPipelineStages.
constexpr ForKind pipelined_kind(int stages) {
  return stages <= 2 ? ForKind::Pipelined : stages == 3 ? ForKind::Pipelined3 : ForKind::Pipelined4;
}
static_assert(pipeline_stages(pipelined_kind(kMaxPipelineStages)) == kMaxPipelineStages);

/// Intrinsic functions of a Call node.
#define LOOM_FOR_EACH_CALL_OP(X) \
  X(exp)                         \
  X(log)                         \
  X(sqrt)                        \
  X(rsqrt)                       \
  X(tanh)                        \
  X(sigmoid)                     \
  X(erf)                         \
  X(pow)                         \
  X(abs)                         \
  X(floor)                       \
  X(ceil)                        \
  X(round)                       \
  X(sin)                         \
  X(cos)

enum class CallOp : uint8_t {
#define LOOM_X(name) name,
  LOOM_FOR_EACH_CALL_OP(LOOM_X)
#undef LOOM_X
};

constexpr const char* call_op_name(CallOp op) {
  switch (op) {
#define LOOM_X(name) \
  case CallOp::name: return #name;
    LOOM_FOR_EACH_CALL_OP(LOOM_X)
#undef LOOM_X
  }
  return "?";
}

/// Number of arguments an intrinsic takes.
constexpr int call_op_arity(CallOp op) { return op == CallOp::pow ? 2 : 1; }

/// The combiner of a Reduce node.
enum class ReduceOp : uint8_t { Sum, Prod, Min, Max };

constexpr const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

/// Whether an iterator walks the output (spatial) or is summed over (reduce).
enum class IterKind : uint8_t { Spatial, Reduce };

}  // namespace ir
LOOM_END_NAMESPACE

#endif  // LOOM_IR_NODE_KINDS_HPP
