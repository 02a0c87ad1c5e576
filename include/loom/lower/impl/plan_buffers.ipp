// Bodies of loom/lower/plan_buffers.hpp.
#include "loom/lower/plan_buffers.hpp"

#include "loom/ir/simplify.hpp"

LOOM_BEGIN_NAMESPACE
namespace lower {

namespace detail {

using sched::Stage;

inline std::vector<int64_t> dense_strides(const std::vector<int64_t>& shape,
                                          const std::vector<sched::StorageAlign>& aligns) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) {
    int64_t s = strides[d] * shape[d];
    for (auto& a : aligns)
      if (a.axis == static_cast<int>(d) - 1) {
        // Pad so that stride % factor == offset (TVM storage_align).
        int64_t r = ((s - a.offset) % a.factor + a.factor) % a.factor;
        if (r != 0) s += a.factor - r;
      }
    strides[d - 1] = s;
  }
  return strides;
}

// The axis of stage ps whose innermost tile is its innermost loop, vectorized; -1 when the
// innermost loop is not vectorized, fused, or an outer tile.
inline int vectorized_axis(const Stage& ps) {
  if (ps.leaves.empty()) return -1;
  int id = ps.leaves.back();
  if (ps.iters[id].annotation != sched::Annotation::Vectorized ||
      ps.iters[id].kind != sched::IterKind::Spatial)
    return -1;
  for (bool climbed = true; climbed;) {
    climbed = false;
    for (const sched::SplitRelation& sp : ps.splits)
      if (!sp.children.empty() && sp.children.back() == id) {
        id = sp.parent;
        climbed = true;
        break;
      }
  }
  for (const sched::FuseRelation& f : ps.fuses)
    if (f.result == id) return -1;
  return id < ps.num_spatial_axes ? id : -1;
}

// `extent` with each permuted axis rounded up to whole permutation blocks.
inline std::vector<int64_t> permuted_extent(std::vector<int64_t> extent,
                                            const std::vector<sched::StoragePermute>& permutes) {
  for (const sched::StoragePermute& p : permutes) {
    int64_t& e = extent[static_cast<size_t>(p.axis)];
    e = (e + p.block() - 1) / p.block() * p.block();
  }
  return extent;
}

// storage_chunk of stage `ps` over a buffer of `extent` (as stored): the innermost axis rounded
// up to whole chunks where it is longer than one, and the chunk's elements (0 where not).
inline int64_t chunk_elements(const Stage& ps, std::vector<int64_t>& extent) {
  if (ps.storage_chunk == 0 || extent.empty()) return 0;
  const int64_t w = ps.storage_chunk / ps.op.dtype().bytes();
  int64_t& e = extent.back();
  if (w <= 0 || e <= w) return 0;
  e = (e + w - 1) / w * w;
  return w;
}

// The stored position of box-local position `x` of a lane-major axis: element e of unit
// (a * lanes + l) * per_lane + i goes to element e of unit (a * per_lane + i) * lanes + l, that
// is, x + i (lanes - 1) unit - l (per_lane - 1) unit: x itself plus two small terms, which keeps
// the index affine in x for the simplifier and costs two shifts and masks where the lengths are
// powers of two.
inline ir::Expr permute_position(const ir::Expr& x, const sched::StoragePermute& p) {
  using ir::Expr;
  const Expr unit = p.unit == 1 ? x : ir::FloorDiv::make(x, Expr(p.unit));
  const Expr i = ir::FloorMod::make(unit, Expr(p.per_lane));
  const Expr l = ir::FloorMod::make(ir::FloorDiv::make(unit, Expr(p.per_lane)), Expr(p.lanes));
  return ir::simplify(x + i * Expr((p.lanes - 1) * p.unit) - l * Expr((p.per_lane - 1) * p.unit));
}

// `elements` rounded up to whole swizzled rows of `bytes` bytes (none: 0) of `dtype`.
inline int64_t swizzled_size(int64_t elements, ir::DType dtype, int64_t bytes) {
  if (bytes == 0) return elements;
  const int64_t row = bytes / dtype.bytes();
  return (elements + row - 1) / row * row;
}

// The buffer of a stage computed inside another, of its region's size.
inline void plan_region_buffer(const Stage& ps, StageBuffer& in,
                               const std::vector<int64_t>& region_extent) {
  std::vector<int64_t> extent = permuted_extent(region_extent, ps.storage_permutes);
  in.chunk = chunk_elements(ps, extent);
  in.permutes = ps.storage_permutes;
  in.strides = dense_strides(extent, ps.storage_aligns);
  int64_t size = in.strides.empty() ? 1 : in.strides[0] * extent[0];
  const int vector_axis = vectorized_axis(ps);
  if (vector_axis >= 0 && ps.storage_aligns.empty() && ps.storage_permutes.empty() && !in.chunk &&
      ps.scope != ir::MemoryScope::Shared && vector_axis + 1 < static_cast<int>(extent.size()) &&
      extent[static_cast<size_t>(vector_axis)] > 1) {
    // Whatever the vectorized axis's place among the tensor's axes (an NCHW convolution
    // vectorized along its output channels accumulates into a tile whose channel stride would
    // otherwise be the tile's rows times columns); SROA can then keep the tile in registers.
    // The buffer is private to this loop nest, so its layout is ours to choose.
    int64_t stride = extent[static_cast<size_t>(vector_axis)];
    in.strides[static_cast<size_t>(vector_axis)] = 1;
    for (size_t d = extent.size(); d-- > 0;)
      if (static_cast<int>(d) != vector_axis) {
        in.strides[d] = stride;
        stride *= extent[d];
      }
    size = stride;
  }
  std::vector<int64_t> alloc_shape = extent;
  if (in.chunk) {
    in.chunk_rows = size / extent.back();
    alloc_shape = {size};
  }
  in.swizzle = ps.storage_swizzle;
  if (!ps.storage_aligns.empty() || in.swizzle)
    alloc_shape = {swizzled_size(size, ps.op.dtype(), in.swizzle)};
  in.buffer = ir::make_buffer(ps.name, ps.op.dtype(), alloc_shape, ps.scope);
}

}  // namespace detail

LOOM_DECL ir::Expr StageBuffer::flat_index(const std::vector<ir::Expr>& coords) const {
  ir::Expr off;
  const size_t last = coords.size() - 1;
  for (size_t d = 0; d < coords.size(); ++d) {
    ir::Expr term = coords[d];
    if (!ir::is_const_int(min[d], 0)) term = term - min[d];
    for (const sched::StoragePermute& p : permutes)
      if (p.axis == static_cast<int>(d)) term = detail::permute_position(term, p);
    if (chunk > 0 && d == last) {
      // Column c of row r (the other axes' offset over the row's length) at (c / w) R w +
      // r w + c mod w.
      const ir::Expr w(chunk);
      const ir::Expr at_chunk =
          ir::FloorDiv::make(term, w) * ir::Expr(chunk * chunk_rows) + ir::FloorMod::make(term, w);
      const int64_t row = last > 0 ? strides[last - 1] : 1;
      const ir::Expr rows =
          off.defined() ? ir::FloorDiv::make(off, ir::Expr(row)) * w : ir::Expr(int64_t{0});
      off = ir::simplify(rows + at_chunk);
      continue;
    }
    if (strides[d] != 1) term = term * ir::Expr(strides[d]);
    off = off.defined() ? off + term : term;
  }
  if (!off.defined()) off = ir::Expr(int64_t{0});
  if (swizzle == 0) return off;
  // Byte offset o ^ (((o >> 7) mod (swizzle / 16)) << 4), in elements of e bytes.
  const int64_t e = buffer->dtype.bytes();
  const ir::Expr row_bits =
      ir::FloorMod::make(ir::FloorDiv::make(off, ir::Expr(128 / e)), ir::Expr(swizzle / 16));
  return ir::BitXor::make(off, row_bits * ir::Expr(16 / e));
}

LOOM_DECL BufferPlan plan_buffers(const sched::State& state,
                                  const std::vector<StageRegion>& regions) {
  using namespace detail;
  BufferPlan plan;
  plan.stages.resize(state.stages().size());
  std::vector<bool> is_arg(state.stages().size(), false);
  const auto args = state.dag().arguments();
  for (size_t a = 0; a < args.size(); ++a) {
    const int si = state.stage_of(args[a].get());
    LOOM_INTERNAL_CHECK(si >= 0) << "argument " << args[a].name() << " has no stage";
    StageBuffer& in = plan.stages[si];
    in.buffer = ir::make_buffer(args[a].name(), args[a].dtype(), args[a].shape(),
                                ir::MemoryScope::Global, static_cast<int>(a));
    in.strides = dense_strides(args[a].shape(), {});
    plan.args.push_back(in.buffer);
    is_arg[si] = true;
  }
  for (size_t si = 0; si < state.stages().size(); ++si) {
    const Stage& s = state.stages()[si];
    StageBuffer& in = plan.stages[si];
    if (s.location == sched::ComputeLocation::At) {
      plan_region_buffer(s, in, regions[si].extent);
    } else if (s.location == sched::ComputeLocation::Root && !s.is_placeholder && !is_arg[si]) {
      std::vector<int64_t> shape = detail::permuted_extent(s.op.shape(), s.storage_permutes);
      in.chunk = detail::chunk_elements(s, shape);
      in.permutes = s.storage_permutes;
      in.swizzle = s.storage_swizzle;
      in.strides = dense_strides(shape, s.storage_aligns);
      if (in.chunk) in.chunk_rows = in.strides[0] * shape[0] / shape.back();
      in.buffer =
          s.storage_aligns.empty() && in.swizzle == 0 && in.chunk == 0
              ? ir::make_buffer(s.name, s.op.dtype(), shape, ir::MemoryScope::Global)
              : ir::make_buffer(s.name, s.op.dtype(),
                                {swizzled_size(in.strides[0] * shape[0], s.op.dtype(), in.swizzle)},
                                ir::MemoryScope::Global);
      plan.root.push_back(in.buffer);
    }
    if (in.buffer) in.min = regions[si].min;
  }
  return plan;
}

}  // namespace lower
LOOM_END_NAMESPACE
