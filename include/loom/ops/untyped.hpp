/// \file
/// Operators on untyped tensors of any rank (layer ops/): what a model importer needs when ranks
/// and shapes are known only at run time (loom/onnx.hpp), where the typed operators of the other
/// ops/ headers fix the rank in the type.
///
/// Broadcasting here is numpy's in full: shapes align at their last dimension, a missing leading
/// dimension or an extent of 1 stretches to the other operand's (a [C, 1, 1] bias against
/// [N, C, H, W] data, a [1, 1, S] mask against [B, H, S]). The typed `ops::add` allows only the
/// missing-leading-dimension half, because its index expressions are fixed in its type; here
/// an extent-1 dimension simply reads index 0.
///
/// Error ids (shared with the typed operators, loom/ops/common.hpp): E301/E302 matmul, E304 an
/// axis out of range, E305 shapes that do not broadcast, E313 a bad permutation, E317 a reshape
/// that changes the element count, E318 concatenated shapes that disagree, E319 an empty slice
/// or gather index out of range.
#ifndef LOOM_OPS_UNTYPED_HPP
#define LOOM_OPS_UNTYPED_HPP

#include "loom/config.hpp"
#include "loom/ir/expr.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace ops::untyped {

using Shape = std::vector<int64_t>;

/// The broadcast shape of `shapes` (numpy's rule). Throws loom::user_error (E305) naming `op`
/// and the shapes when two extents differ and neither is 1.
Shape broadcast_shape(const char* op, const std::vector<Shape>& shapes);

/// Reads `t` at the point `axes` of a broadcast result (one axis per output dimension, t's
/// shape aligned at the end): a dimension t stretches (extent 1 against a longer axis) reads
/// index 0, a missing one nothing, every other one its axis, so that a read of equal shape is
/// the plain element-wise read the partitioner and the sketch rules recognize.
ir::Expr read_broadcast(const ir::Tensor& t, const std::vector<ir::IterVar>& axes);

/// A compute over the broadcast shape of `inputs` whose value is `f` of their broadcast reads,
/// one per input in order. `f` may return any type; the result has that type.
ir::Tensor map(std::string name, std::string tag, const std::vector<ir::Tensor>& inputs,
               const std::function<ir::Expr(const std::vector<ir::Expr>&)>& f);

/// numpy.matmul: rank-1 operands are promoted (and the added dimension dropped again), the
/// leading dimensions broadcast, `[..., M, K] x [..., K, N] -> [..., M, N]`. One compute, tagged
/// "matmul" for rank-2 results and "batch_matmul" otherwise. E301 when K differs, E302 when the
/// batch dimensions do not broadcast.
ir::Tensor matmul(const ir::Tensor& a, const ir::Tensor& b, std::string name = "matmul");

/// The elements of `x` in row-major order, in a new shape of the same element count (E317).
/// Dimensions are matched in runs of equal products, so that a split ([B, S, H*D] ->
/// [B, S, H, D]) reads with a sum of products and only merged dimensions need a division.
/// Tagged "reshape".
ir::Tensor reshape(const ir::Tensor& x, const Shape& shape, std::string name = "reshape");

/// numpy.transpose (E313 when `perm` is not a permutation of x's axes). Tagged "transpose".
ir::Tensor transpose(const ir::Tensor& x, const std::vector<int>& perm,
                     std::string name = "transpose");

/// The inputs joined along `axis` (E304; E318 when the other extents or the types differ).
/// Tagged "concatenate".
ir::Tensor concat(const std::vector<ir::Tensor>& inputs, int axis, std::string name = "concat");

/// The elements `start, start + step, ...` before `end` (exclusive) of each dimension; steps
/// may be negative (then `end` < `start`). Bounds must already be clamped to the extent
/// (E319 when a dimension would be empty). Tagged "strided_slice".
ir::Tensor slice(const ir::Tensor& x, const Shape& start, const Shape& end, const Shape& step,
                 std::string name = "slice");

/// numpy.take with constant indices along `axis`: the result has x's shape with `axis`
/// replaced by `index_shape` (empty for a scalar index). Negative indices count from the end;
/// E319 when one is out of range. Tagged "take".
ir::Tensor take(const ir::Tensor& x, int axis, const std::vector<int64_t>& indices,
                const Shape& index_shape, std::string name = "take");

/// `x` stretched to `shape` by numpy's broadcasting (E305). Tagged "broadcast_to".
ir::Tensor broadcast_to(const ir::Tensor& x, const Shape& shape, std::string name = "broadcast_to");

/// `x` repeated `repeats[d]` times along each dimension d (numpy.tile with one repeat per
/// dimension, E304 otherwise). Tagged "tile".
ir::Tensor tile(const ir::Tensor& x, const Shape& repeats, std::string name = "tile");

/// `x` with `before[d]` and `after[d]` elements of `value` around dimension d (all >= 0, E314).
/// Tagged "pad".
ir::Tensor pad(const ir::Tensor& x, const Shape& before, const Shape& after, double value,
               std::string name = "pad");

/// `op` over `axes` of x (E304 for an axis out of range or listed twice), keeping them as
/// extent-1 dimensions with `keep_dims`. Tagged `tag`.
ir::Tensor reduce(const ir::Tensor& x, const std::vector<int>& axes, bool keep_dims,
                  ir::ReduceOp op, std::string name, std::string tag);

/// The mean over `axes`: a sum (`<name>_sum`) and a division by the count.
ir::Tensor reduce_mean(const ir::Tensor& x, const std::vector<int>& axes, bool keep_dims,
                       std::string name = "mean");

/// Every element converted to `dtype`. Tagged "cast".
ir::Tensor cast(const ir::Tensor& x, ir::DType dtype, std::string name = "cast");

/// An axis in [-rank, rank) as an index in [0, rank); E304 names `op` otherwise.
int normalize_axis(const char* op, int64_t axis, int rank);

}  // namespace ops::untyped
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/ops/impl/untyped.ipp"
#endif

#endif  // LOOM_OPS_UNTYPED_HPP
