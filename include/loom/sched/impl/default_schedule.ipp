// Bodies of loom/sched/default_schedule.hpp.
#include "loom/sched/default_schedule.hpp"

#include <algorithm>

LOOM_BEGIN_NAMESPACE
namespace sched {
namespace detail {

// One thread per output element of every root stage: its spatial loops fused and split over
// blocks of up to 256 threads, its reduction loops serial inside the thread. Slow but simple
// enough to serve as the GPU measurer's reference.
inline State bind_naive_gpu_threads(State s, const Target& target) {
  const int64_t block = std::min<int64_t>(256, target.max_threads_per_block);
  for (const Stage& st0 : std::vector<Stage>(s.stages())) {
    if (st0.is_placeholder || st0.location != ComputeLocation::Root) continue;
    const std::string name = st0.name;
    const int ns = st0.num_spatial_axes;
    if (ns == 0) continue;  // a scalar result: lower_gpu refuses it, as it refuses to guess
    int64_t extent = 1;
    for (int p = 0; p < ns; ++p) extent *= st0.leaf(p).extent;
    if (ns > 1) {
      std::vector<int> all(ns);
      for (int p = 0; p < ns; ++p) all[p] = p;
      s.fuse(name, all);
    }
    if (extent <= block) {
      s.annotate(name, 0, Annotation::ThreadIdxX);
    } else {
      s.split(name, 0, {block});
      s.annotate(name, 0, Annotation::BlockIdxX);
      s.annotate(name, 1, Annotation::ThreadIdxX);
    }
  }
  return s;
}

}  // namespace detail

LOOM_DECL State default_schedule(std::shared_ptr<const ComputeDAG> dag, const Target& target) {
  State s(dag);
  // Inline element-wise ops that read simply (no transposes, no exp): their consumers recompute
  // them for free instead of round-tripping through memory.
  for (int i = 0; i < dag->num_ops(); ++i) {
    const OpInfo& info = dag->info(i);
    if (!info.is_placeholder && !info.is_output && info.is_strictly_inlineable)
      s.compute_inline(s.stages()[s.stage_of(dag->ops()[i].get())].name);
  }
  if (target.is_cuda()) return detail::bind_naive_gpu_threads(std::move(s), target);
  for (const Stage& st0 : std::vector<Stage>(s.stages())) {
    if (st0.is_placeholder || st0.location != ComputeLocation::Root) continue;
    const std::string name = st0.name;
    const Stage& st = s.stage(name);
    const int ns = st.num_spatial_axes;
    const int nr = static_cast<int>(st.leaves.size()) - ns;
    // Reduction loops go outside the innermost spatial loop: `i, k, j` for a matmul, so that the
    // innermost loop walks the output and the reused input contiguously.
    if (ns >= 1 && nr >= 1) {
      std::vector<int> order;
      for (int p = 0; p < ns - 1; ++p) order.push_back(p);
      for (int p = ns; p < ns + nr; ++p) order.push_back(p);
      order.push_back(ns - 1);
      s.reorder(name, order);
    }
    // Vectorise the innermost spatial loop by whole vectors; a tail keeps it correct.
    const int lanes = target.vector_lanes(st.op.dtype().bytes());
    int inner = static_cast<int>(s.stage(name).leaves.size()) - 1;
    if (ns >= 1 && lanes > 1 && s.stage(name).leaf(inner).extent >= lanes &&
        s.stage(name).leaf(inner).kind == IterKind::Spatial) {
      if (s.stage(name).leaf(inner).extent % lanes == 0) {
        s.split(name, inner, {lanes});
        s.annotate(name, inner + 1, Annotation::Vectorized);
      }
    }
    // Parallelise: fuse outer spatial loops until there is work for every core several times
    // over (but leave the vectorised loop alone).
    int fused = 0;
    int64_t work = 1;
    const Stage& cur = s.stage(name);
    while (fused < ns - 1 && fused < static_cast<int>(cur.leaves.size()) - 1 &&
           cur.leaf(fused).kind == IterKind::Spatial && work < 4 * target.num_cores) {
      work *= cur.leaf(fused).extent;
      ++fused;
    }
    if (fused >= 2) {
      std::vector<int> ids;
      for (int p = 0; p < fused; ++p) ids.push_back(p);
      s.fuse(name, ids);
    }
    if (fused >= 1 && work >= 2 && target.num_cores > 1) s.annotate(name, 0, Annotation::Parallel);
  }
  return s;
}

}  // namespace sched
LOOM_END_NAMESPACE
