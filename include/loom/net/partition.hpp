/// \file
/// Fusion groups of a network (layer net/, above ops/ and dag/, below search/): a network is
/// one ComputeDAG of every layer's computes (inputs and weights as placeholders); `partition`
/// cuts it into the groups that become one kernel each, the way TVM's Relay FuseOps does, and
/// `extract_tasks` turns the groups into tuning tasks, one per distinct workload.
///
/// Each compute op has a pattern (Relay's OpPatternKind, from the DAG's own analysis):
///
/// | pattern     | ops                                                  | Relay            |
/// |-------------|------------------------------------------------------|------------------|
/// | ElementWise | reads every input at its own point (add, relu, exp)  | kElemWise        |
/// | Broadcast   | plain axes, some missing (bias add, scale by gamma)  | kBroadcast       |
/// | Injective   | any other gather: padding, transpose, reshape        | kInjective       |
/// | Reduction   | a reduction without data reuse (row max, mean, pool) | kCommReduce      |
/// | Anchor      | a reduction with data reuse (conv, matmul, dense)    | kOutEWiseFusable |
///
/// Groups grow along post-dominators (the op every path from an op to the network's outputs
/// goes through): an op joins the group of its post-dominator when the ops in between allow it.
///  - An anchor takes the element-wise and broadcast ops after it (bias, batch norm scale,
///    ReLU, the residual add): `conv -> bias -> relu` is one group.
///  - An element-wise, broadcast or injective op joins what follows it when everything in
///    between is injective (padding into its convolution, a chain of element-wise ops).
///  - A reduction, unlike in Relay, joins what follows it when everything in between is
///    injective or reduces the same rows and what follows is injective: a softmax (row maximum,
///    exponentials, row sum, division) or a layer norm (mean, variance, result) stays one group,
///    the unit loom's sketch rules schedule row by row (MemoryBoundReduction,
///    CrossThreadReduction). Relay keeps softmax one opaque op for the same reason.
/// Anchors run first: an injective op next to an anchor joins the anchor's group only once
/// the anchor has taken what follows it (Relay's phases 0 and 1).
///
/// A network's output, and any op read by ops of two groups, is a group's output: groups have
/// exactly one output each, computed by their last op.
#ifndef LOOM_NET_PARTITION_HPP
#define LOOM_NET_PARTITION_HPP

#include "loom/config.hpp"
#include "loom/dag/compute_dag.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace net {

/// How an op fuses, weakest first (the order matters: a group's pattern is its strongest op's).
enum class OpPattern : uint8_t { ElementWise, Broadcast, Injective, Reduction, Anchor };

const char* pattern_name(OpPattern p);

/// The pattern of op `op` of `dag` (a compute op; placeholders have none).
OpPattern op_pattern(const ComputeDAG& dag, int op);

/// One group of a partition: the ops that become one kernel.
struct FusedGroup {
  /// The network's ops in the group (indices into the network's ops()), in topological order;
  /// the last one is the group's output.
  std::vector<int> ops;
  /// The strongest pattern of its ops.
  OpPattern pattern = OpPattern::ElementWise;
  /// The tensors of the network the group reads: network inputs, weights, other groups'
  /// outputs; in the order of `dag`'s inputs.
  std::vector<ir::Tensor> inputs;
  /// The group on its own: a placeholder of the same name, type and shape for each of `inputs`,
  /// the group's computes rebuilt on them, the output last. Its workload key is the task's.
  std::shared_ptr<const ComputeDAG> dag;

  int output() const { return ops.back(); }
};

/// Cuts `network` into fusion groups (see the top of this file), in topological order of
/// their outputs: a group comes after every group whose output it reads.
std::vector<FusedGroup> partition(const ComputeDAG& network);

/// A tuning task of a network: the groups with one workload (equal workload keys), and how
/// often it runs per inference.
struct NetworkTask {
  std::shared_ptr<const ComputeDAG> dag;  ///< the first group's
  std::vector<int> groups;                ///< indices into the partition
  int weight() const { return static_cast<int>(groups.size()); }
};

/// One task per distinct workload key among `groups`, in order of first appearance.
std::vector<NetworkTask> extract_tasks(const std::vector<FusedGroup>& groups);

}  // namespace net
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/net/impl/partition.ipp"
#endif

#endif  // LOOM_NET_PARTITION_HPP
