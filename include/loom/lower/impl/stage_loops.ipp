// Body of loom/lower/stage_loops.hpp.
#include "loom/lower/stage_loops.hpp"

#include <algorithm>
#include <utility>

LOOM_BEGIN_NAMESPACE
namespace lower {

LOOM_DECL StageLoops stage_loops(const sched::Stage& s, const std::vector<int64_t>& root_extent) {
  using ir::Expr;
  StageLoops l;
  const size_t n = s.iters.size();
  l.extent.assign(n, -1);
  l.var.assign(n, Expr());
  l.rel.assign(n, Expr());
  for (size_t r = 0; r < root_extent.size(); ++r) l.extent[r] = root_extent[r];
  // Iterators are created in order: a split's or fuse's results always have larger ids than
  // their sources, so one pass in id order sees sources first.
  std::vector<int> split_of(n, -1), fuse_of(n, -1);
  for (size_t k = 0; k < s.splits.size(); ++k)
    for (int c : s.splits[k].children) split_of[c] = static_cast<int>(k);
  for (size_t k = 0; k < s.fuses.size(); ++k) fuse_of[s.fuses[k].result] = static_cast<int>(k);
  for (size_t id = root_extent.size(); id < n; ++id) {
    if (split_of[id] >= 0) {
      const auto& split = s.splits[split_of[id]];
      // Shrinking keeps the mixed-radix values: a part only shrinks below its length when every
      // part outside it has a single iteration (value 0), whatever its radix.
      int64_t inner = 1;
      bool seen = false;
      for (int c : split.children) {
        if (seen) inner *= s.iters[c].extent;
        seen = seen || c == static_cast<int>(id);
      }
      const int64_t needed = (l.extent[split.parent] + inner - 1) / inner;
      l.extent[id] = static_cast<int>(id) == split.children[0]
                         ? needed
                         : std::min<int64_t>(s.iters[id].extent, needed);
    } else if (fuse_of[id] >= 0) {
      int64_t e = 1;
      for (int f : s.fuses[fuse_of[id]].fused) e *= l.extent[f];
      l.extent[id] = e;
    }
  }
  for (int leaf : s.leaves) l.rel[leaf] = l.var[leaf] = ir::Variable::make(s.iters[leaf].name);
  // Values flow from the leaves back to the roots.
  std::vector<std::pair<int, Expr>> tails;
  for (size_t r = 0; r < root_extent.size(); ++r)
    sched::iterator_value(s, static_cast<int>(r), l.extent, l.rel, tails);
  for (auto& [id, g] : tails)
    (s.iters[id].kind == sched::IterKind::Spatial ? l.guards : l.reduce_guards).push_back(g);
  return l;
}

}  // namespace lower
LOOM_END_NAMESPACE
