/// \file
/// Lowering pass `plan_buffers` (layer lower/): where every stage's values live, and how a
/// tensor coordinate becomes an element of its buffer.
///
/// Expects: the regions of infer_regions (every computed stage's box is known).
///
/// Guarantees:
/// - the kernel's arguments (the DAG's inputs then outputs) are buffers of their tensors'
///   shapes in global memory with arg_index 0, 1, ... in that order, dense and row-major;
/// - every other stage computed at the root has a buffer of its tensor's whole shape in global
///   memory, listed in `root` in stage order (build_loop_nests allocates them around the whole
///   kernel); with storage_align its rows are padded (TVM's storage_align: stride % factor ==
///   offset) and the buffer is flat, of the padded size; with storage_permute an axis's
///   elements are stored lane-major (sched::StoragePermute) and the axis is rounded up to whole
///   permutation blocks; with storage_swizzle its 16-byte units are swizzled in rows of 32, 64
///   or 128 bytes (sched::StorageSwizzleStep) and the buffer is rounded up to whole rows;
///   with storage_chunk an innermost axis longer than a chunk is rounded up to whole chunks and
///   stored chunk-major (sched::StorageChunkStep);
/// - every stage computed inside another has a buffer of its region's size in its scope
///   (local, shared) with the same padding; where its innermost loop is vectorized along a
///   spatial axis (and neither storage_align nor shared memory fixes the layout), that axis is
///   the buffer's innermost dimension, so that the stage's vector loads and stores stay
///   contiguous;
/// - inlined stages and placeholders that are not arguments have none.
#ifndef LOOM_LOWER_PLAN_BUFFERS_HPP
#define LOOM_LOWER_PLAN_BUFFERS_HPP

#include "loom/ir/expr.hpp"
#include "loom/lower/infer_regions.hpp"
#include "loom/sched/state.hpp"

#include <cstdint>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace lower {

/// The buffer of one stage and its addressing.
struct StageBuffer {
  ir::Buffer buffer;                            ///< null for a stage without one (inlined)
  std::vector<ir::Expr> min;                    ///< the region's start, per tensor dimension
  std::vector<int64_t> strides;                 ///< in elements, per tensor dimension
  std::vector<sched::StoragePermute> permutes;  ///< lane-major axes (storage_permute)
  int64_t swizzle = 0;  ///< swizzled rows of this many bytes (storage_swizzle), 0 for none
  /// storage_chunk: the innermost axis in chunks of `chunk` elements, chunk-major over the
  /// buffer's `chunk_rows` rows (0: not chunked, or the axis is one chunk or shorter).
  int64_t chunk = 0, chunk_rows = 0;
  /// The element of `buffer` that holds tensor coordinates `coords` (absolute, in the region).
  ir::Expr flat_index(const std::vector<ir::Expr>& coords) const;
};

struct BufferPlan {
  std::vector<ir::Buffer> args;     ///< the kernel's arguments, in the DAG's order
  std::vector<StageBuffer> stages;  ///< by stage index
  std::vector<ir::Buffer> root;     ///< allocated around the whole kernel, in stage order
};

/// The buffers of the stages of `state`, whose regions are `regions`.
BufferPlan plan_buffers(const sched::State& state, const std::vector<StageRegion>& regions);

}  // namespace lower
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/lower/impl/plan_buffers.ipp"
#endif

#endif  // LOOM_LOWER_PLAN_BUFFERS_HPP
