/// \file
/// A network (layer net/): the operator library's computes over placeholders of three kinds,
/// the network's inputs (given at every run), its constants (weights, bound to data once) and
/// what it computes (its outputs); cut into fusion groups (net/partition.hpp), each group one
/// kernel, with a memory plan for the tensors that pass between groups.
///
/// ```cpp
/// auto x = placeholder<float>("x", {1, 3, 32, 32});
/// auto w = placeholder<float>("w", {16, 3, 3, 3});
/// auto y = ops::relu(ops::conv2d_nchw(x, w, {.padding = {1, 1}}));
/// net::Network n({x}, {net::constant(w, weights)}, {y});
/// CompiledNetwork c = compile(n);             // loom/network.hpp: the CPU executor
/// c.run({x_view, y_view});
/// ```
///
/// The memory plan gives every intermediate (a group's output that is not a network output) an
/// offset in one arena: a tensor lives from the group that writes it to the last group that
/// reads it, and one whose life is over gives its bytes to the next (first fit, each block on
/// a cache line). `peak_bytes` is the arena's size, `total_bytes` what separate buffers would
/// take.
#ifndef LOOM_NET_NETWORK_HPP
#define LOOM_NET_NETWORK_HPP

#include "loom/config.hpp"
#include "loom/dag/compute_dag.hpp"
#include "loom/net/partition.hpp"

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace net {

/// A placeholder bound to its data (a weight). The bytes are shared, never copied again.
struct Constant {
  ir::Tensor tensor;
  std::shared_ptr<const std::vector<unsigned char>> bytes;
};

/// Binds float32 placeholder `tensor` to `values` (as many as its elements). Throws
/// loom::user_error `[loom.net.E1002]` when the count or the type differs.
Constant constant(const ir::Tensor& tensor, const std::vector<float>& values);

/// An inference batch norm as one scale and shift per channel, in double:
/// `scale = gamma / sqrt(var + eps)`, `shift = beta - mean * scale`. The importers and
/// fold_batch_norm share it.
struct ChannelAffine {
  std::vector<double> scale, shift;
};
ChannelAffine batch_norm_affine(const std::vector<double>& gamma, const std::vector<double>& beta,
                                const std::vector<double>& mean, const std::vector<double>& var,
                                double eps);

/// A network's constants and outputs after fold_batch_norm, and how many it folded.
struct FoldedBatchNorms {
  std::vector<Constant> constants;
  std::vector<ir::Tensor> outputs;
  int folded = 0;
};

/// Folds every ops::batch_norm (tag "batch_norm", float32, its four parameters constants) that
/// reads the output of a convolution into that convolution: the weight, a float32 constant read
/// by that convolution alone with one index that is the output channel, is scaled per output
/// channel, and the batch norm becomes the addition of a constant shift (tag "bias_add"). The
/// convolution's output must be read by the batch norm alone. Everything downstream is rebuilt
/// on the new tensors (same names); the constants are those the new outputs read. Anything
/// else is left as it is: folding is an optimization, never an error.
FoldedBatchNorms fold_batch_norm(const std::vector<ir::Tensor>& inputs,
                                 const std::vector<Constant>& constants,
                                 const std::vector<ir::Tensor>& outputs);

/// How a Network is built.
struct NetworkOptions {
  /// Run fold_batch_norm first (the result then differs from the unfolded computation by
  /// float32 rounding only).
  bool fold_batch_norm = true;
};

/// Where the intermediates live (see the top of this file).
struct MemoryPlan {
  /// Per group (partition order): the byte offset of its output in the arena, or -1 when the
  /// output is a network output (the caller's buffer).
  std::vector<int64_t> offset;
  int64_t peak_bytes = 0;
  int64_t total_bytes = 0;
};

/// Plans the intermediates of `groups` (a partition of `dag`).
MemoryPlan plan_memory(const ComputeDAG& dag, const std::vector<FusedGroup>& groups);

/// A network: its DAG (arguments: inputs, then constants, then outputs), groups, tasks and
/// memory plan, all computed once here.
class Network {
 public:
  /// Throws loom::user_error `[loom.net.E1003]` when there are no outputs, `[loom.net.E1004]`
  /// when an input is also a constant, and what ComputeDAG throws (an output reading a
  /// placeholder that is neither an input nor a constant, a placeholder given twice). With
  /// `options.fold_batch_norm`, constants() and outputs() are those fold_batch_norm returns.
  Network(std::vector<ir::Tensor> inputs, std::vector<Constant> constants,
          std::vector<ir::Tensor> outputs, NetworkOptions options = {});

  const std::vector<ir::Tensor>& inputs() const { return inputs_; }
  const std::vector<Constant>& constants() const { return constants_; }
  const std::vector<ir::Tensor>& outputs() const { return outputs_; }
  const ComputeDAG& dag() const { return *dag_; }
  const std::vector<FusedGroup>& groups() const { return groups_; }
  const std::vector<NetworkTask>& tasks() const { return tasks_; }
  const MemoryPlan& memory() const { return memory_; }
  /// Arithmetic operations of one run.
  double flop_count() const { return dag_->flop_count(); }
  /// Batch norms folded into convolutions when the network was built.
  int folded_batch_norms() const { return folded_batch_norms_; }

 private:
  std::vector<ir::Tensor> inputs_;
  std::vector<Constant> constants_;
  std::vector<ir::Tensor> outputs_;
  std::shared_ptr<const ComputeDAG> dag_;
  std::vector<FusedGroup> groups_;
  std::vector<NetworkTask> tasks_;
  MemoryPlan memory_;
  int folded_batch_norms_ = 0;
};

/// A readable summary: op, group and task counts, FLOPs, the memory plan, then a line per group
/// (its pattern, ops, what it reads, its task) and per task (its weight and FLOPs).
std::ostream& operator<<(std::ostream& os, const Network& network);

}  // namespace net
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/net/impl/network.ipp"
#endif

#endif  // LOOM_NET_NETWORK_HPP
