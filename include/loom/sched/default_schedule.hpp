/// \file
/// The default schedule (layer sched/): untuned but not naive. Inlines strictly inlineable ops,
/// puts the reduction loops of each stage outside its innermost spatial loop, parallelises the
/// outer spatial loops and vectorises the innermost spatial loop when it is long enough.
///
/// For a CUDA target: the same inlining, then one thread per output element of every root stage
/// (spatial loops fused, split over blocks of 256 threads, reductions serial in the thread). It
/// is far from fast; the GPU measurer uses it as the reference of workloads too large for the
/// interpreter.
#ifndef LOOM_SCHED_DEFAULT_SCHEDULE_HPP
#define LOOM_SCHED_DEFAULT_SCHEDULE_HPP

#include "loom/sched/state.hpp"
#include "loom/target.hpp"

LOOM_BEGIN_NAMESPACE
namespace sched {

State default_schedule(std::shared_ptr<const ComputeDAG> dag, const Target& target);

}  // namespace sched
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/sched/impl/default_schedule.ipp"
#endif

#endif  // LOOM_SCHED_DEFAULT_SCHEDULE_HPP
