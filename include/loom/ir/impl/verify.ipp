// Body of loom/ir/verify.hpp.
#include "loom/ir/verify.hpp"

#include "loom/error.hpp"
#include "loom/ir/printer.hpp"

#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>

// LOOM_INTERNAL_CHECK with the verifier's ids, its message prefixed with the pass that ran.
#define LOOM_VERIFY_CHECK(cond, id)                                                                \
  for (bool loom_check_ok_ = static_cast<bool>(cond); !loom_check_ok_; loom_check_ok_ = true)      \
    for (::loom::detail::error_reporter loom_reporter_(true, ::loom::detail::error_tier::internal, \
                                                       id, __FILE__, __LINE__, #cond);             \
         loom_reporter_.active(); loom_reporter_.issue())                                          \
  loom_reporter_.stream() << after_

LOOM_BEGIN_NAMESPACE
namespace ir {

namespace detail {

class verifier : public StmtVisitor {
 public:
  explicit verifier(const VerifyOptions& o)
      : options_(o), after_(o.after.empty() ? std::string() : "after " + o.after + ": ") {}

  using StmtVisitor::visit;
  void visit(const Expr& e) override {
    if (!e.defined()) return;
    LOOM_VERIFY_CHECK(e.kind() != NodeKind::TensorRead && e.kind() != NodeKind::Reduce,
                      "loom.ir.E054")
        << "a " << node_kind_name(e.kind()) << " is left in the loop nest: `" << e << "` "
        << where();
    LOOM_VERIFY_CHECK(!options_.scalar || e.dtype().lanes == 1, "loom.ir.E055")
        << "a vector expression before vectorization: `" << e << "` " << where();
    StmtVisitor::visit(e);
  }

 protected:
  void visit_Variable(const Variable* op) override {
    LOOM_VERIFY_CHECK(bound_.count(op), "loom.ir.E050")
        << "variable '" << op->name << "' is used outside the loops that bind it, " << where();
  }
  void visit_Load(const Load* op) override {
    check_buffer(op->buffer, "read");
    LOOM_VERIFY_CHECK(op->index.dtype().element_of() == DType::index() &&
                          op->dtype == op->buffer->dtype.with_lanes(op->index.dtype().lanes),
                      "loom.ir.E053")
        << "a load of " << to_string(op->dtype) << " from " << op->buffer->name << " ("
        << to_string(op->buffer->dtype) << ") at an index of type " << to_string(op->index.dtype())
        << ", " << where();
    StmtVisitor::visit_Load(op);
  }

  void visit_For(const For* op) override {
    const Variable* v = op->variable();
    LOOM_VERIFY_CHECK(v && op->var.dtype() == DType::index(), "loom.ir.E052")
        << "a loop over `" << op->var << "`, which is not an index variable";
    at scope(this, op);
    LOOM_VERIFY_CHECK(op->min.dtype() == DType::index() && op->extent.dtype() == DType::index(),
                      "loom.ir.E052")
        << "bounds of type " << to_string(op->min.dtype()) << " and "
        << to_string(op->extent.dtype()) << ' ' << where();
    const int64_t *mn = as_const_int(op->min), *ext = as_const_int(op->extent);
    LOOM_VERIFY_CHECK(!ext || *ext >= 0, "loom.ir.E052") << "a negative extent " << where();
    LOOM_VERIFY_CHECK(!options_.no_vectorized_loops || op->for_kind != ForKind::Vectorized,
                      "loom.ir.E057")
        << "a Vectorized loop is left, " << where();
    LOOM_VERIFY_CHECK(options_.max_unrolled_extent < 0 || op->for_kind != ForKind::Unrolled ||
                          !mn || !ext || *ext > options_.max_unrolled_extent,
                      "loom.ir.E056")
        << "an Unrolled loop of " << (ext ? *ext : 0) << " iterations (at most "
        << options_.max_unrolled_extent << " are expanded) is left, " << where();
    visit(op->min);
    visit(op->extent);
    LOOM_VERIFY_CHECK(!bound_.count(v), "loom.ir.E050")
        << "the variable of an enclosing loop is bound again, " << where();
    bound_.insert(v);
    scope.done();
    visit(op->body);
    bound_.erase(v);
  }
  void visit_Store(const Store* op) override {
    at scope(this, op);
    check_buffer(op->buffer, "written");
    LOOM_VERIFY_CHECK(
        op->index.dtype().element_of() == DType::index() &&
            op->value.dtype() == op->buffer->dtype.with_lanes(op->index.dtype().lanes),
        "loom.ir.E053")
        << "a store of " << to_string(op->value.dtype()) << " into " << op->buffer->name << " ("
        << to_string(op->buffer->dtype) << ") at an index of type " << to_string(op->index.dtype())
        << ", " << where();
    StmtVisitor::visit_Store(op);
  }
  void visit_Allocate(const Allocate* op) override {
    LOOM_VERIFY_CHECK(op->buffer && op->buffer->arg_index < 0, "loom.ir.E051")
        << "an Allocate of kernel argument '" << (op->buffer ? op->buffer->name : "?") << "'";
    ++allocated_[op->buffer.get()];
    StmtVisitor::visit_Allocate(op);
    if (--allocated_[op->buffer.get()] == 0) allocated_.erase(op->buffer.get());
  }
  void visit_IfThenElse(const IfThenElse* op) override {
    {
      at scope(this, op);
      LOOM_VERIFY_CHECK(op->condition.dtype() == DType::boolean(), "loom.ir.E053")
          << "a condition of type " << to_string(op->condition.dtype()) << ' ' << where();
      visit(op->condition);
    }
    visit(op->then_case);
    visit(op->else_case);
  }
  void visit_AllReduce(const AllReduce* op) override {
    at scope(this, op);
    check_buffer(op->buffer, "reduced");
  }

 private:
  // The statement whose own expressions are being visited, for the messages.
  struct at {
    verifier* v;
    const StmtNode* saved;
    at(verifier* self, const StmtNode* s) : v(self), saved(self->at_) { v->at_ = s; }
    void done() { v->at_ = saved; }
    ~at() { v->at_ = saved; }
  };

  void check_buffer(const Buffer& b, const char* how) {
    LOOM_VERIFY_CHECK(b && (b->arg_index >= 0 || allocated_.count(b.get())), "loom.ir.E051")
        << "buffer '" << (b ? b->name : "?") << "' is " << how
        << " but is neither a kernel argument nor allocated around its use, " << where();
  }

  std::string where() const {
    std::ostringstream os;
    if (!at_) return "outside every statement";
    switch (at_->kind) {
      case StmtKind::For:
        os << "in the bounds of loop '" << static_cast<const For*>(at_)->var << "'";
        break;
      case StmtKind::Store: {
        auto* s = static_cast<const Store*>(at_);
        os << "in `" << s->buffer->name << '[' << s->index << "] = " << s->value << '`';
        break;
      }
      case StmtKind::IfThenElse:
        os << "in the condition `" << static_cast<const IfThenElse*>(at_)->condition << '`';
        break;
      case StmtKind::AllReduce:
        os << "in an all_reduce of '" << static_cast<const AllReduce*>(at_)->buffer->name << "'";
        break;
      case StmtKind::Allocate:
      case StmtKind::Block:
      case StmtKind::Barrier:
      case StmtKind::CopyAsync: os << "in a " << stmt_kind_name(at_->kind); break;
    }
    return os.str();
  }

  const VerifyOptions& options_;
  const std::string after_;
  const StmtNode* at_ = nullptr;
  std::unordered_set<const Variable*> bound_;
  std::unordered_map<const BufferNode*, int> allocated_;
};

}  // namespace detail

LOOM_DECL void verify(const Stmt& s, const VerifyOptions& options) {
  detail::verifier v(options);
  v.visit(s);
}

}  // namespace ir
LOOM_END_NAMESPACE

#undef LOOM_VERIFY_CHECK
