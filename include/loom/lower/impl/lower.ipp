// Body of loom/lower/lower.hpp: the table of contents of lowering.
#include "loom/lower/lower.hpp"

#include "loom/ir/verify.hpp"
#include "loom/lower/build_loop_nests.hpp"
#include "loom/lower/infer_regions.hpp"
#include "loom/lower/inline_stages.hpp"
#include "loom/lower/plan_buffers.hpp"

#include <utility>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace lower {

namespace detail {

inline void check_complete(const sched::State& st) {
  for (auto& s : st.stages())
    for (int leaf : s.leaves)
      LOOM_USER_CHECK(s.iters[leaf].extent > 0, "loom.lower.E410")
          << "stage '" << s.name << "' has loop '" << s.iters[leaf].name
          << "' with an unknown extent: the schedule is a sketch; fill its split lengths first";
}

// ir::verify after each pass when options.verify is set, with what the passes so far guarantee.
class pass_checker {
 public:
  explicit pass_checker(const LowerOptions& options) : on_(options.verify) { facts_.scalar = true; }
  ir::Stmt operator()(const char* pass, ir::Stmt s) {
    if (on_) {
      facts_.after = pass;
      ir::verify(s, facts_);
    }
    return s;
  }
  /// Only right after unroll_loops: partition_loops may peel an Unrolled loop just over the
  /// limit down to it.
  ir::Stmt unrolled(const char* pass, ir::Stmt s, int max_extent) {
    facts_.max_unrolled_extent = max_extent;
    s = (*this)(pass, std::move(s));
    facts_.max_unrolled_extent = -1;
    return s;
  }
  ir::Stmt vectorized(const char* pass, ir::Stmt s) {
    facts_.scalar = false;
    facts_.no_vectorized_loops = true;
    return (*this)(pass, std::move(s));
  }

 private:
  bool on_;
  ir::VerifyOptions facts_;
};

}  // namespace detail

LOOM_DECL ir::LoweredFunc lower(const sched::State& state, const std::string& name,
                                const LowerOptions& options) {
  detail::check_complete(state);
  const std::vector<ir::Expr> bodies = inline_stages(state);
  const std::vector<StageRegion> regions = infer_regions(state);
  const BufferPlan buffers = plan_buffers(state, regions);
  detail::pass_checker checked(options);
  ir::Stmt s = checked("build_loop_nests", build_loop_nests(state, bodies, regions, buffers));
  if (options.simplify) s = checked("simplify_loops", simplify_loops(s));
  if (options.unroll)
    s = checked.unrolled("unroll_loops", unroll_loops(s, options.max_unroll_extent),
                         options.max_unroll_extent);
  if (options.partition) s = checked("partition_loops", partition_loops(s));
  if (options.simplify && options.partition) s = checked("simplify_loops", simplify_loops(s));
  if (options.vectorize) s = checked.vectorized("vectorize_loops", vectorize_loops(s));
  // The last pass cleans up after unrolling, partitioning and vectorizing; with all three off
  // it would only repeat the first (simplify_loops is idempotent on lowering's nests), which
  // feature extraction, lowering thousands of candidates, cannot afford.
  if (options.simplify && (options.unroll || options.partition || options.vectorize))
    s = checked("simplify_loops", simplify_loops(s));
  return ir::LoweredFunc{name, buffers.args, s};
}

}  // namespace lower
LOOM_END_NAMESPACE
