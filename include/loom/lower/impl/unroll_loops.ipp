// Body of loom/lower/unroll_loops.hpp.
#include "loom/lower/unroll_loops.hpp"

#include <vector>

LOOM_BEGIN_NAMESPACE
namespace lower {

namespace detail {

class loop_unroller : public ir::StmtMutator {
 public:
  explicit loop_unroller(int max_extent) : max_extent_(max_extent) {}

 protected:
  ir::Stmt visit_For(const ir::For* op, const ir::Stmt& self) override {
    ir::Stmt body = mutate(op->body);
    auto *cmin = ir::as_const_int(op->min), *cext = ir::as_const_int(op->extent);
    if (op->for_kind == ir::ForKind::Unrolled && cmin && cext && *cext <= max_extent_) {
      std::vector<ir::Stmt> copies;
      for (int64_t i = 0; i < *cext; ++i)
        copies.push_back(ir::substitute(body, {{op->variable(), ir::Expr(*cmin + i)}}));
      return ir::Block::make(copies);
    }
    if (body.same_as(op->body)) return self;
    return ir::For::make(op->var, op->min, op->extent, op->for_kind, body);
  }

 private:
  int max_extent_;
};

}  // namespace detail

LOOM_DECL ir::Stmt unroll_loops(const ir::Stmt& s, int max_extent) {
  detail::loop_unroller p(max_extent);
  return p.mutate(s);
}

}  // namespace lower
LOOM_END_NAMESPACE
