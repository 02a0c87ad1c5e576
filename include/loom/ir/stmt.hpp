/// \file
/// Statements of the lowered loop-nest IR (layer ir/): loops, stores, allocations, blocks and
/// conditionals, with their traversals and printer. Lowering (lower/) produces them from a
/// schedule; backends (backend/llvm, backend/cuda) and the loop-nest interpreter consume them.
///
/// Contract: buffers are flat and row-major; `Store(b, i, v)` with a vector index writes `lanes`
/// elements; loop variables are int64 and every `For` runs `var` over [min, min + extent).
/// Allocate scopes its buffer to its body. A Parallel loop's iterations must be independent.
#ifndef LOOM_IR_STMT_HPP
#define LOOM_IR_STMT_HPP

#include "loom/ir/visitor.hpp"

#include <iosfwd>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace ir {

struct StmtNode : ::loom::detail::ref_counted {
  StmtKind kind;
  explicit StmtNode(StmtKind k) : kind(k) {}
};

/// Handle to an immutable statement node.
class Stmt {
 public:
  Stmt() = default;
  Stmt(const StmtNode* n) : node_(n) {}  // NOLINT
  bool defined() const { return static_cast<bool>(node_); }
  const StmtNode* get() const { return node_.get(); }
  StmtKind kind() const { return node_->kind; }
  bool same_as(const Stmt& o) const { return node_.get() == o.node_.get(); }
  template <class T>
  const T* as() const {
    return node_ && node_->kind == T::node_kind ? static_cast<const T*>(node_.get()) : nullptr;
  }

 private:
  ::loom::detail::intrusive_ptr<const StmtNode> node_;
};

struct For final : StmtNode {
  static constexpr StmtKind node_kind = StmtKind::For;
  Expr var;  ///< a Variable of index type
  Expr min, extent;
  ForKind for_kind;
  Stmt body;
  For(Expr v, Expr mn, Expr ext, ForKind k, Stmt b)
      : StmtNode(node_kind),
        var(std::move(v)),
        min(std::move(mn)),
        extent(std::move(ext)),
        for_kind(k),
        body(std::move(b)) {}
  static Stmt make(Expr var, Expr min, Expr extent, ForKind kind, Stmt body);
  const Variable* variable() const { return var.as<Variable>(); }
};

struct Store final : StmtNode {
  static constexpr StmtKind node_kind = StmtKind::Store;
  Buffer buffer;
  Expr index, value;
  Store(Buffer b, Expr i, Expr v)
      : StmtNode(node_kind), buffer(std::move(b)), index(std::move(i)), value(std::move(v)) {}
  static Stmt make(Buffer buffer, Expr index, Expr value);
};

/// Makes `buffer` (an allocation, not an argument) exist for the duration of `body`.
struct Allocate final : StmtNode {
  static constexpr StmtKind node_kind = StmtKind::Allocate;
  Buffer buffer;
  Stmt body;
  Allocate(Buffer b, Stmt s) : StmtNode(node_kind), buffer(std::move(b)), body(std::move(s)) {}
  static Stmt make(Buffer buffer, Stmt body);
};

struct Block final : StmtNode {
  static constexpr StmtKind node_kind = StmtKind::Block;
  std::vector<Stmt> stmts;
  explicit Block(std::vector<Stmt> s) : StmtNode(node_kind), stmts(std::move(s)) {}
  /// Flattens nested blocks; a single statement is returned as is.
  static Stmt make(std::vector<Stmt> stmts);
};

struct IfThenElse final : StmtNode {
  static constexpr StmtKind node_kind = StmtKind::IfThenElse;
  Expr condition;
  Stmt then_case, else_case;  ///< else_case may be undefined
  IfThenElse(Expr c, Stmt t, Stmt e)
      : StmtNode(node_kind),
        condition(std::move(c)),
        then_case(std::move(t)),
        else_case(std::move(e)) {}
  static Stmt make(Expr condition, Stmt then_case, Stmt else_case = Stmt());
};

/// GPU kernels only (lower/gpu.hpp): every thread of the block waits here until all have
/// arrived, and the shared-memory writes made before it are visible to every thread after it
/// (CUDA's `__syncthreads()`). It must be reached by all threads of a block or by none; the
/// loop-nest interpreter treats it as a no-op (it runs one thread at a time). With
/// `wait_async`, each thread first waits until no more than `pending_groups` of its own
/// `CopyAsync` groups, the ones it started last, are still in flight (CUDA's
/// `cp.async.wait_group`), so that after the barrier every thread sees every thread's copies of
/// the older groups.
struct Barrier final : StmtNode {
  static constexpr StmtKind node_kind = StmtKind::Barrier;
  bool wait_async = false;
  int pending_groups = 0;
  Barrier(bool w, int pending) : StmtNode(node_kind), wait_async(w), pending_groups(pending) {}
  static Stmt make(bool wait_async = false, int pending_groups = 0);
};

/// GPU kernels only (lower/gpu.hpp): a reduction across the threads of a block. Every thread
/// holds one value in `buffer[0]`, an array of its own; afterwards each holds the combination
/// (`op`) of the values of all the block's threads that share its threadIdx.y and threadIdx.z
/// (CUDA prints warp shuffles and, past one warp, a shared-memory step). Like a Barrier it must
/// be reached by all threads of a block or by none. The loop-nest interpreter refuses it:
/// `lower::emulation_func` expands it into shared memory and barriers.
struct AllReduce final : StmtNode {
  static constexpr StmtKind node_kind = StmtKind::AllReduce;
  ReduceOp op;
  Buffer buffer;
  AllReduce(ReduceOp o, Buffer b) : StmtNode(node_kind), op(o), buffer(std::move(b)) {}
  static Stmt make(ReduceOp op, Buffer buffer);
};

/// GPU kernels only (lower/gpu.hpp): the stores of `body` that copy global memory into shared
/// memory may land at any time after the statement has started, up to the first Barrier with
/// `wait_async` that waits for their group; the copies of one CopyAsync are one group, committed
/// even when the body copies nothing (CUDA prints `cp.async` and `cp.async.commit_group`, sm_80
/// and later). Nothing may read or write what they write until that barrier. The loop-nest
/// interpreter runs `body` as it stands; the GPU emulation (lower::emulation_func) lands the
/// copies as late as allowed and poisons their destinations until then.
struct CopyAsync final : StmtNode {
  static constexpr StmtKind node_kind = StmtKind::CopyAsync;
  Stmt body;
  explicit CopyAsync(Stmt b) : StmtNode(node_kind), body(std::move(b)) {}
  static Stmt make(Stmt body);
};

/// A lowered kernel: its arguments (buffers with arg_index 0..n-1, in the ComputeDAG's argument
/// order: inputs then outputs) and its body. The unit that backends compile.
struct LoweredFunc {
  std::string name;
  std::vector<Buffer> args;
  Stmt body;
};

/// Read-only traversal of statements and the expressions inside them.
class StmtVisitor : public ExprVisitor {
 public:
  using ExprVisitor::visit;
  virtual void visit(const Stmt& s);

 protected:
#define LOOM_X(name) virtual void visit_##name(const name* op);
  LOOM_FOR_EACH_STMT(LOOM_X)
#undef LOOM_X
};

/// Rewriting traversal of statements; rebuilds a node only when a child changed.
class StmtMutator : public ExprMutator {
 public:
  using ExprMutator::mutate;
  virtual Stmt mutate(const Stmt& s);

 protected:
#define LOOM_X(name) virtual Stmt visit_##name(const name* op, const Stmt& self);
  LOOM_FOR_EACH_STMT(LOOM_X)
#undef LOOM_X
};

/// C-like pseudo code, one statement per line, two spaces per nesting level.
std::ostream& operator<<(std::ostream& os, const Stmt& s);
std::string to_string(const Stmt& s);
/// `kernel name(float32* A[64, 32], ...) {` + body + `}`.
std::ostream& operator<<(std::ostream& os, const LoweredFunc& f);

/// Replaces variables in every expression of a statement.
Stmt substitute(const Stmt& s, const std::unordered_map<const Variable*, Expr>& replacements);

}  // namespace ir
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/ir/impl/stmt.ipp"
#endif

#endif  // LOOM_IR_STMT_HPP
