/// \file
/// The compute DAG (layer dag/): the ops of a computation in topological order, with the static
/// analysis the schedule search needs (Ansor's AccessAnalyzer), a FLOP count and a workload key.
#ifndef LOOM_DAG_COMPUTE_DAG_HPP
#define LOOM_DAG_COMPUTE_DAG_HPP

#include "loom/ir/expr.hpp"

#include <iosfwd>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE

/// Static facts about one op of a DAG, computed once when the DAG is built.
struct OpInfo {
  bool is_placeholder = false;
  bool is_output = false;
  /// No reduction: every output element depends on inputs pointwise (gathers allowed).
  bool is_injective = false;
  /// Injective, and every read is a simple access of the same shape with all axes in order (the
  /// op can fuse element by element into its producer or consumer).
  bool is_elementwise = false;
  /// Ansor's IsStrictInlinable: every read is a simple access (each index an output axis plus a
  /// constant, or a constant), axes keep their order and are not repeated, and the body has no
  /// expensive call (exp, log, ...) and no branch. Such ops are always inlined.
  bool is_strictly_inlineable = false;
  /// Ansor's HasDataReuse: at least two inputs miss an output axis of extent > 1, or one does and
  /// the op reduces. Such ops get multi-level tiling.
  bool needs_multi_level_tiling = false;
  bool has_reduce = false;
  int64_t spatial_size = 1;    ///< product of the output shape
  int64_t reduce_size = 1;     ///< product of the reduce axes' extents
  double flops = 0;            ///< arithmetic operations to compute the whole tensor
  std::vector<int> producers;  ///< ops this op reads (indices into ops())
  std::vector<int> consumers;  ///< ops that read this op
};

/// A computation: the ops reachable from `outputs`, in topological order (every op after the ops
/// it reads). Kernel arguments are `inputs` followed by `outputs`, in the order given.
class ComputeDAG {
 public:
  /// Throws loom::user_error if an input is not a placeholder, an output is a placeholder, a
  /// tensor appears twice among the arguments, an output reads a placeholder that is not
  /// among `inputs`, a compute computes on 16-bit floats (E218), or a tensor's element count or
  /// a compute's iteration space overflows int64_t (E219).
  ComputeDAG(std::vector<ir::Tensor> inputs, std::vector<ir::Tensor> outputs);

  const std::vector<ir::Tensor>& ops() const { return ops_; }
  const std::vector<ir::Tensor>& inputs() const { return inputs_; }
  const std::vector<ir::Tensor>& outputs() const { return outputs_; }
  /// Inputs then outputs: the order of a kernel's arguments.
  std::vector<ir::Tensor> arguments() const;
  int num_ops() const { return static_cast<int>(ops_.size()); }

  const OpInfo& info(int op) const { return infos_.at(op); }
  const OpInfo& info(const ir::Tensor& t) const { return infos_.at(op_index(t)); }
  /// Position of `t` in ops(); throws loom::user_error if `t` is not part of this DAG.
  int op_index(const ir::Tensor& t) const;

  /// Total arithmetic operations of all ops (multiply-add = 2).
  double flop_count() const { return flops_; }

  /// A stable structural hash of the computation: equal for the same computation written with
  /// other tensor and variable names, different for other shapes, types or bodies; the same on
  /// every run and machine. Tuning records are keyed on it.
  const std::string& workload_key() const { return key_; }
  /// The computation up to its extents ("st-..."): equal for DAGs whose ops have the same names,
  /// kinds, tags, element types and ranks, read each other the same way and take the same
  /// arguments, whatever their shapes (a dense layer at batch 8 and at batch 128). A schedule of
  /// one replays on another with its split lengths adapted (sched::replay_adapted), which is how
  /// a shape nobody tuned gets the schedule of the nearest one that was.
  const std::string& structure_key() const { return structure_key_; }
  /// Every op's shape, in ops() order and concatenated: what tells apart DAGs of one structure.
  std::vector<int64_t> extents() const;

  /// Ansor's HasMoreReductionParallel: whether op `op` should be considered for rfactor on a
  /// machine with `num_cores` cores.
  bool has_more_reduction_parallel(int op, int num_cores) const;

  /// Whether `consumer` reads `producer` element by element at the same point (same shape,
  /// simple complete accesses in order) and `producer` has no other consumer: Ansor's
  /// ElementWiseMatch, the condition for fusing `consumer` into `producer`'s tiles.
  bool elementwise_match(int producer, int consumer) const;
  /// The single consumer that elementwise_match()es `op`, or -1.
  int single_elementwise_matched_consumer(int op) const;

 private:
  void analyse();
  void compute_key();

  std::vector<ir::Tensor> inputs_, outputs_, ops_;
  std::vector<OpInfo> infos_;
  double flops_ = 0;
  std::string key_, structure_key_;
};

/// A readable listing of every op, one per line (stable; golden tests depend on it).
std::ostream& operator<<(std::ostream& os, const ComputeDAG& dag);

/// Number of arithmetic operations in one evaluation of `e` (index arithmetic not counted).
double count_flops(const ir::Expr& e);

LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/dag/impl/compute_dag.ipp"
#endif

#endif  // LOOM_DAG_COMPUTE_DAG_HPP
