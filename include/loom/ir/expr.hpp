/// \file
/// Immutable expression nodes, their handle `Expr`, iteration variables and tensors (layer ir/).
///
/// Nodes are plain final structs with public fields that never change after `make()`; `make()`
/// validates types and arity and throws loom::user_error on misuse. Handles share nodes by an
/// intrusive reference count, so IR is cheap to copy and safe to share between threads.
#ifndef LOOM_IR_EXPR_HPP
#define LOOM_IR_EXPR_HPP

#include "loom/detail/intrusive_ptr.hpp"
#include "loom/error.hpp"
#include "loom/ir/dtype.hpp"
#include "loom/ir/node_kinds.hpp"

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace ir {

/// Base of every expression node: a kind tag (used instead of RTTI) and a type.
struct ExprNode : ::loom::detail::ref_counted {
  NodeKind kind;
  DType dtype;
  ExprNode(NodeKind k, DType t) : kind(k), dtype(t) {}
};

/// Handle to an immutable expression node. Default-constructed handles are "undefined".
class Expr {
 public:
  Expr() = default;
  Expr(const ExprNode* n) : node_(n) {}  // NOLINT: nodes convert to handles
  /// Integer and float literals become IntImm(int64) / FloatImm(float32) / FloatImm(float64).
  Expr(int v);      // NOLINT
  Expr(int64_t v);  // NOLINT
  Expr(float v);    // NOLINT
  Expr(double v);   // NOLINT

  bool defined() const { return static_cast<bool>(node_); }
  const ExprNode* get() const { return node_.get(); }
  const ExprNode* operator->() const { return node_.get(); }
  NodeKind kind() const { return node_->kind; }
  DType dtype() const { return node_->dtype; }
  /// Same node (identity), not structural equality; see structural_equal.
  bool same_as(const Expr& o) const { return node_.get() == o.node_.get(); }
  /// The node as T when its kind matches, otherwise nullptr.
  template <class T>
  const T* as() const {
    return node_ && node_->kind == T::node_kind ? static_cast<const T*>(node_.get()) : nullptr;
  }

 private:
  ::loom::detail::intrusive_ptr<const ExprNode> node_;
};

/// A loop/axis variable. Two variables are the same only if they are the same node.
struct Variable final : ExprNode {
  static constexpr NodeKind node_kind = NodeKind::Variable;
  std::string name;
  Variable(std::string n, DType t) : ExprNode(node_kind, t), name(std::move(n)) {}
  static Expr make(std::string name, DType t = DType::index());
};

/// A variable with a range [0, extent) and a kind: an axis of a compute or a reduction.
struct IterVar {
  Expr var;  ///< always a Variable
  int64_t extent = 0;
  IterKind kind = IterKind::Spatial;
  const Variable* variable() const { return var.as<Variable>(); }
  const std::string& name() const { return variable()->name; }
};

struct IntImm final : ExprNode {
  static constexpr NodeKind node_kind = NodeKind::IntImm;
  int64_t value;
  IntImm(DType t, int64_t v) : ExprNode(node_kind, t), value(v) {}
  /// The value is wrapped to the width of `t` (int32 constants wrap like int32 arithmetic).
  static Expr make(DType t, int64_t value);
};

struct FloatImm final : ExprNode {
  static constexpr NodeKind node_kind = NodeKind::FloatImm;
  double value;
  FloatImm(DType t, double v) : ExprNode(node_kind, t), value(v) {}
  /// A float32 constant is rounded to float32 on construction.
  static Expr make(DType t, double value);
};

struct Cast final : ExprNode {
  static constexpr NodeKind node_kind = NodeKind::Cast;
  Expr value;
  Cast(DType t, Expr v) : ExprNode(node_kind, t), value(std::move(v)) {}
  static Expr make(DType t, Expr value);
};

/// All binary nodes share one layout. Arithmetic ones require equal operand types and return it;
/// comparisons return bool; And/Or take and return bool.
template <NodeKind K>
struct BinaryNode final : ExprNode {
  static constexpr NodeKind node_kind = K;
  Expr a, b;
  BinaryNode(DType t, Expr x, Expr y) : ExprNode(K, t), a(std::move(x)), b(std::move(y)) {}
  static Expr make(Expr a, Expr b);
};
#define LOOM_X(name) using name = BinaryNode<NodeKind::name>;
LOOM_FOR_EACH_BINARY(LOOM_X)
#undef LOOM_X

/// True for the binary kinds listed in LOOM_FOR_EACH_BINARY.
constexpr bool is_binary(NodeKind k) {
  switch (k) {
#define LOOM_X(name) case NodeKind::name:
    LOOM_FOR_EACH_BINARY(LOOM_X)
#undef LOOM_X
    return true;
    default: return false;
  }
}
constexpr bool is_comparison(NodeKind k) {
  return k == NodeKind::EQ || k == NodeKind::NE || k == NodeKind::LT || k == NodeKind::LE ||
         k == NodeKind::GT || k == NodeKind::GE;
}
/// The two operands of any binary node (kind-checked).
std::pair<const Expr*, const Expr*> binary_operands(const Expr& e);
/// Builds the binary node of kind `k` (which must satisfy is_binary).
Expr make_binary(NodeKind k, Expr a, Expr b);

struct Not final : ExprNode {
  static constexpr NodeKind node_kind = NodeKind::Not;
  Expr a;
  Not(DType t, Expr x) : ExprNode(node_kind, t), a(std::move(x)) {}
  static Expr make(Expr a);
};

/// Lazy conditional: only the branch that is taken is evaluated (padding reads rely on it).
struct Select final : ExprNode {
  static constexpr NodeKind node_kind = NodeKind::Select;
  Expr condition, true_value, false_value;
  Select(DType t, Expr c, Expr x, Expr y)
      : ExprNode(node_kind, t),
        condition(std::move(c)),
        true_value(std::move(x)),
        false_value(std::move(y)) {}
  static Expr make(Expr condition, Expr true_value, Expr false_value);
};

/// A math intrinsic: exp, log, sqrt, ... (see LOOM_FOR_EACH_CALL_OP).
struct Call final : ExprNode {
  static constexpr NodeKind node_kind = NodeKind::Call;
  CallOp op;
  std::vector<Expr> args;
  Call(DType t, CallOp o, std::vector<Expr> a)
      : ExprNode(node_kind, t), op(o), args(std::move(a)) {}
  static Expr make(CallOp op, std::vector<Expr> args);
};

class Tensor;
struct TensorNode;

/// Reads one element of a tensor: `A[i, k]`. Indices are integral and as many as the rank.
struct TensorRead final : ExprNode {
  static constexpr NodeKind node_kind = NodeKind::TensorRead;
  ::loom::detail::intrusive_ptr<const TensorNode> tensor;
  std::vector<Expr> indices;
  TensorRead(DType t, ::loom::detail::intrusive_ptr<const TensorNode> x, std::vector<Expr> i)
      : ExprNode(node_kind, t), tensor(std::move(x)), indices(std::move(i)) {}
  static Expr make(const Tensor& tensor, std::vector<Expr> indices);
};

/// A reduction over `axes` of `source`, counting only points where `condition` holds (undefined
/// condition = always). It may only appear as the whole body of a compute.
struct Reduce final : ExprNode {
  static constexpr NodeKind node_kind = NodeKind::Reduce;
  ReduceOp op;
  Expr source;
  std::vector<IterVar> axes;
  Expr condition;
  Reduce(DType t, ReduceOp o, Expr s, std::vector<IterVar> a, Expr c)
      : ExprNode(node_kind, t),
        op(o),
        source(std::move(s)),
        axes(std::move(a)),
        condition(std::move(c)) {}
  static Expr make(ReduceOp op, Expr source, std::vector<IterVar> axes, Expr condition = Expr());
};

/// Where a buffer of the lowered loop nest lives.
enum class MemoryScope : uint8_t {
  Global,  ///< a kernel argument or a heap allocation visible to all threads
  Local,   ///< private to one thread: stack / registers (cache_write "local" stages)
  Shared   ///< GPU shared memory of one thread block
};

/// A flat, row-major array of the lowered loop nest: a kernel argument or an allocation.
struct BufferNode final : ::loom::detail::ref_counted {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  MemoryScope scope = MemoryScope::Global;
  int arg_index = -1;  ///< position among the kernel arguments, or -1 for an allocation
  int64_t num_elements() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
};
using Buffer = ::loom::detail::intrusive_ptr<const BufferNode>;
Buffer make_buffer(std::string name, DType dtype, std::vector<int64_t> shape,
                   MemoryScope scope = MemoryScope::Global, int arg_index = -1);

/// Reads `buffer[index]` (flat index). A vector index (Ramp) reads `lanes` elements.
struct Load final : ExprNode {
  static constexpr NodeKind node_kind = NodeKind::Load;
  Buffer buffer;
  Expr index;
  Load(DType t, Buffer b, Expr i)
      : ExprNode(node_kind, t), buffer(std::move(b)), index(std::move(i)) {}
  static Expr make(Buffer buffer, Expr index);
};

/// The vector `base + stride * {0, 1, ..., lanes-1}` (vectorized loop indices).
struct Ramp final : ExprNode {
  static constexpr NodeKind node_kind = NodeKind::Ramp;
  Expr base, stride;
  int lanes;
  Ramp(DType t, Expr b, Expr s, int l)
      : ExprNode(node_kind, t), base(std::move(b)), stride(std::move(s)), lanes(l) {}
  static Expr make(Expr base, Expr stride, int lanes);
};

/// A scalar repeated in `lanes` lanes.
struct Broadcast final : ExprNode {
  static constexpr NodeKind node_kind = NodeKind::Broadcast;
  Expr value;
  int lanes;
  Broadcast(DType t, Expr v, int l) : ExprNode(node_kind, t), value(std::move(v)), lanes(l) {}
  static Expr make(Expr value, int lanes);
};

/// The neutral element of a reduction: 0 for sum, 1 for prod, the type's max for min, ...
Expr reduce_identity(ReduceOp op, DType t);

/// One step of a reduction: `acc` combined with `value`. A float min/max is
/// `select(value < acc, value, acc)` (or `>`): an accumulator that starts at its identity (+-inf)
/// only takes values that compare less/greater, so it never holds NaN, and the select is
/// fmin/fmax's NaN-ignoring result in one vector instruction.
Expr reduce_combine(ReduceOp op, const Expr& acc, const Expr& value);

/// Its inverse, as_reduce_combine, is a structural match: ir/equal_hash.hpp.

/// Whether a tensor is an input (placeholder) or computed from other tensors.
enum class OpKind : uint8_t { Placeholder, Compute };

/// A tensor and the operation that produces it: a placeholder (input) or a compute whose value at
/// `axes` is `body`. Shapes are constant. Identity matters: two computes with equal bodies are
/// still two different tensors.
struct TensorNode final : ::loom::detail::ref_counted {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  OpKind op = OpKind::Placeholder;
  std::vector<IterVar> axes;  ///< compute: one spatial axis per dimension (extent == shape[d])
  Expr body;                  ///< compute: value at `axes`; a Reduce only at the top
  std::string tag;            ///< informational operator name, e.g. "matmul"
};

/// Handle to a TensorNode. The DSL's typed `loom::Tensor<T, Rank>` converts to it.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(::loom::detail::intrusive_ptr<const TensorNode> n) : node_(std::move(n)) {}
  bool defined() const { return static_cast<bool>(node_); }
  const TensorNode* get() const { return node_.get(); }
  const TensorNode* operator->() const { return node_.get(); }
  const ::loom::detail::intrusive_ptr<const TensorNode>& ptr() const { return node_; }
  const std::string& name() const { return node_->name; }
  DType dtype() const { return node_->dtype; }
  const std::vector<int64_t>& shape() const { return node_->shape; }
  int rank() const { return static_cast<int>(node_->shape.size()); }
  bool is_placeholder() const { return node_->op == OpKind::Placeholder; }
  /// Product of the shape.
  int64_t num_elements() const;
  bool same_as(const Tensor& o) const { return node_.get() == o.node_.get(); }
  friend bool operator==(const Tensor& a, const Tensor& b) { return a.same_as(b); }

 private:
  ::loom::detail::intrusive_ptr<const TensorNode> node_;
};

/// A new input tensor.
Tensor make_placeholder(std::string name, DType dtype, std::vector<int64_t> shape);

/// A new computed tensor. Checks that the axes match the shape, that every free variable of the
/// body is an axis, that a Reduce appears only at the top, and that reads have the right rank.
Tensor make_compute(std::string name, std::vector<IterVar> axes, Expr body, std::string tag = "");

/// The tensors a compute reads directly, in order of first appearance, without duplicates.
std::vector<Tensor> input_tensors(const Tensor& t);

// Convenience operators for writing IR by hand (lowering passes, tests). They follow make()'s
// type rules; integer literals adopt the type of the other operand.
Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);
Expr operator<(Expr a, Expr b);
Expr operator<=(Expr a, Expr b);
Expr operator>(Expr a, Expr b);
Expr operator>=(Expr a, Expr b);
Expr operator&&(Expr a, Expr b);
Expr operator||(Expr a, Expr b);
Expr floordiv(Expr a, Expr b);
Expr floormod(Expr a, Expr b);
/// Bitwise exclusive or of two integers (a swizzled shared-memory layout's address bits).
Expr bitxor(Expr a, Expr b);
Expr min(Expr a, Expr b);
Expr max(Expr a, Expr b);
Expr make_const(DType t, double value);
/// Integer value of an IntImm (or a bool/int constant); nullptr when not constant.
const int64_t* as_const_int(const Expr& e);
bool is_const_int(const Expr& e, int64_t v);

}  // namespace ir
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/ir/impl/expr.ipp"
#endif

#endif  // LOOM_IR_EXPR_HPP
