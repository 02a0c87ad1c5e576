// Bodies of loom/sched/layout_rewrite.hpp.
#include "loom/sched/layout_rewrite.hpp"

#include "loom/ir/equal_hash.hpp"
#include "loom/ir/printer.hpp"
#include "loom/ir/visitor.hpp"

#include <algorithm>
#include <functional>
#include <unordered_map>

LOOM_BEGIN_NAMESPACE
namespace sched {

LOOM_DECL LayoutRewrite rewrite_layout(const State& state, const std::string& input) {
  const ComputeDAG& dag = state.dag();
  int argument = -1;
  for (size_t a = 0; a < dag.inputs().size(); ++a)
    if (dag.inputs()[a].name() == input) argument = static_cast<int>(a);
  LOOM_USER_CHECK(argument >= 0, "loom.sched.E260")
      << "rewrite_layout: '" << input << "' is not an input of the computation";
  const ir::Tensor original = dag.inputs()[argument];

  // A per-call packing copy of the input (cache_read) is what the rewrite replaces: drop the
  // steps on the input and on the copies made from it.
  std::vector<std::string> dropped{input};
  std::vector<Step> kept;
  for (const Step& step : state.steps()) {
    const std::string& stage = step_stage(step);
    if (std::find(dropped.begin(), dropped.end(), stage) != dropped.end()) {
      if (auto* cr = std::get_if<CacheReadStep>(&step))
        dropped.push_back(cr->stage + "." + scope_name(cr->scope));
      continue;
    }
    kept.push_back(step);
  }
  const State plain = replay(state.dag_ptr(), kept);
  const int p = plain.stage_index(input);
  const auto readers = plain.consumers(p);
  LOOM_USER_CHECK(
      readers.size() == 1 && plain.stages()[readers[0]].location != ComputeLocation::Inlined,
      "loom.sched.E261")
      << "rewrite_layout: input '" << input << "' is read by " << readers.size()
      << " stages; a layout can only follow the loop nest of one reader";
  const Stage& reader = plain.stages()[readers[0]];

  // The reader's root loops: its op's axes, then its reduce axes.
  std::vector<const ir::Variable*> roots;
  for (auto& a : reader.op->axes) roots.push_back(a.variable());
  if (auto* red = reader.op->body.as<ir::Reduce>())
    for (auto& a : red->axes) roots.push_back(a.variable());
  std::vector<std::vector<ir::Expr>> reads;
  ir::post_order_visit(reader.op->body, [&](const ir::Expr& e) {
    auto* t = e.as<ir::TensorRead>();
    if (t && plain.stage_of(t->tensor.get()) == p) reads.push_back(t->indices);
  });
  LOOM_USER_CHECK(!reads.empty(), "loom.sched.E261")
      << "rewrite_layout: stage '" << reader.name << "' reads '" << input
      << "' only through inlined stages; its layout cannot follow a loop nest";
  // Input axis d is walked by root loop root_of[d] (or is the constant const_of[d]).
  const size_t rank = original.shape().size();
  std::vector<int> root_of(rank, -1);
  std::vector<int64_t> const_of(rank, 0);
  for (size_t d = 0; d < rank; ++d) {
    const ir::Expr& idx = reads[0][d];
    if (auto* v = idx.as<ir::Variable>()) {
      auto it = std::find(roots.begin(), roots.end(), v);
      if (it != roots.end()) root_of[d] = static_cast<int>(it - roots.begin());
    } else if (auto* c = idx.as<ir::IntImm>()) {
      const_of[d] = c->value;
      continue;
    }
    LOOM_USER_CHECK(root_of[d] >= 0, "loom.sched.E262")
        << "rewrite_layout: stage '" << reader.name << "' reads axis " << d << " of '" << input
        << "' at '" << idx << "', which is not one of its loops";
  }
  for (size_t d = 0; d < rank; ++d)
    for (size_t e = d + 1; e < rank; ++e)
      LOOM_USER_CHECK(root_of[d] < 0 || root_of[d] != root_of[e], "loom.sched.E262")
          << "rewrite_layout: stage '" << reader.name << "' reads two axes of '" << input
          << "' with the same loop";
  for (auto& idx : reads)
    LOOM_USER_CHECK(
        std::equal(idx.begin(), idx.end(), reads[0].begin(), reads[0].end(),
                   [](const ir::Expr& a, const ir::Expr& b) { return ir::structural_equal(a, b); }),
        "loom.sched.E262")
        << "rewrite_layout: stage '" << reader.name << "' reads '" << input
        << "' at more than one point per iteration";

  // Each root loop's tile loops in mixed-radix order (outermost digit first).
  std::function<void(int, std::vector<int>&)> digits = [&](int id, std::vector<int>& out) {
    for (auto& sp : reader.splits)
      if (sp.parent == id) {
        for (int c : sp.children) digits(c, out);
        return;
      }
    out.push_back(id);
  };
  struct Digit {
    int axis;           // input axis
    int64_t inner = 1;  // product of the extents of the axis's inner digits
    int64_t extent;
  };
  std::unordered_map<int, Digit> digit_of;  // leaf iterator id -> digit
  for (size_t d = 0; d < rank; ++d) {
    if (root_of[d] < 0) continue;
    std::vector<int> ds;
    digits(root_of[d], ds);
    int64_t inner = 1;
    for (auto it = ds.rbegin(); it != ds.rend(); ++it) {
      digit_of[*it] = Digit{static_cast<int>(d), inner, reader.iters[*it].extent};
      inner *= reader.iters[*it].extent;
    }
  }
  // Packed dimensions: the constant-indexed axes, then the digits in the reader's loop order.
  std::vector<int> order;  // >= 0: leaf id; < 0: -(axis + 1) of a constant-indexed axis
  for (size_t d = 0; d < rank; ++d)
    if (root_of[d] < 0) order.push_back(-static_cast<int>(d) - 1);
  // A fused loop (parallel or vectorized outer loops) walks its parts in their order.
  std::function<void(int)> expand = [&](int id) {
    for (auto& f : reader.fuses)
      if (f.result == id) {
        for (int part : f.fused) expand(part);
        return;
      }
    if (digit_of.count(id)) order.push_back(id);
  };
  for (int leaf : reader.leaves) expand(leaf);
  // A vectorized innermost loop that walks the input reads it with unit stride in loop order
  // (an NCHW convolution vectorized along the output channel reads OIHW weights so).
  const bool vector_walks_input =
      !reader.leaves.empty() && !order.empty() && order.back() >= 0 &&
      reader.leaf(static_cast<int>(reader.leaves.size()) - 1).annotation ==
          Annotation::Vectorized &&
      digit_of.at(order.back()).extent > 1 && [&] {
        std::vector<int> inner;  // the leaf iterators the innermost loop is made of
        std::function<void(int)> parts = [&](int id) {
          for (auto& f : reader.fuses)
            if (f.result == id) {
              for (int part : f.fused) parts(part);
              return;
            }
          inner.push_back(id);
        };
        parts(reader.leaves.back());
        return std::find(inner.begin(), inner.end(), order.back()) != inner.end();
      }();
  LOOM_USER_CHECK(order.size() == digit_of.size() + static_cast<size_t>(std::count(
                                                        root_of.begin(), root_of.end(), -1)),
                  "loom.sched.E263")
      << "rewrite_layout: a loop of stage '" << reader.name << "' that walks '" << input
      << "' was fused and then split again; its layout is not a tiling";
  // Otherwise the innermost tile of the input's contiguous axis stays the packed tensor's
  // innermost dimension, so the loop that read the original with unit stride still does: the
  // program was measured that way. In plain loop order, a loop LLVM vectorizes outside a small
  // unrolled reduction tile would read the packed input with that tile's stride (GEMM 128³'s
  // tuned program: 114 -> 49 GFLOP/s with B packed in loop order).
  if (root_of[rank - 1] >= 0 && !vector_walks_input) {
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      if (*it < 0 || digit_of.at(*it).axis != static_cast<int>(rank) - 1 ||
          digit_of.at(*it).extent == 1)
        continue;
      const int contiguous = *it;
      order.erase(std::next(it).base());
      order.push_back(contiguous);
      break;
    }
  }
  std::vector<int64_t> shape;
  for (int o : order) shape.push_back(o < 0 ? original.shape()[-o - 1] : digit_of.at(o).extent);

  // transform: packed[digits...] = input[sum of digit * inner per axis], zero in the padding.
  std::vector<ir::IterVar> axes;
  for (size_t k = 0; k < order.size(); ++k)
    axes.push_back(
        ir::IterVar{ir::Variable::make("p" + std::to_string(k)), shape[k], ir::IterKind::Spatial});
  std::vector<ir::Expr> src(rank);
  for (size_t k = 0; k < order.size(); ++k) {
    const ir::Expr& v = axes[k].var;
    if (order[k] < 0) {
      src[-order[k] - 1] = v;
      continue;
    }
    const Digit& dg = digit_of.at(order[k]);
    ir::Expr term =
        dg.inner == 1 ? v : v * ir::make_const(v.dtype(), static_cast<double>(dg.inner));
    src[dg.axis] = src[dg.axis].defined() ? src[dg.axis] + term : term;
  }
  ir::Expr in_range;
  for (size_t d = 0; d < rank; ++d) {
    if (root_of[d] < 0) continue;
    ir::Expr c = src[d] < ir::make_const(src[d].dtype(), static_cast<double>(original.shape()[d]));
    in_range = in_range.defined() ? (in_range && c) : c;
  }
  ir::Expr body = ir::TensorRead::make(original, src);
  if (in_range.defined())
    body = ir::Select::make(in_range, body, ir::make_const(original.dtype(), 0));
  const std::string packed_name = input + "_packed";
  ir::Tensor packed_out = ir::make_compute(packed_name, axes, body, "layout_transform");
  auto transform = std::make_shared<const ComputeDAG>(std::vector<ir::Tensor>{original},
                                                      std::vector<ir::Tensor>{packed_out});

  // dag: every op rebuilt on the packed placeholder; the reader reads the tile coordinates.
  ir::Tensor packed = ir::make_placeholder(packed_name, original.dtype(), shape);
  ir::TensorRedirector redirect;
  redirect.map[original.get()] = packed;
  redirect.reindexed = original.get();
  redirect.reindex = [&](const std::vector<ir::Expr>& idx) {
    std::vector<ir::Expr> out;
    for (int o : order) {
      if (o < 0) {
        out.push_back(idx[-o - 1]);
        continue;
      }
      const Digit& dg = digit_of.at(o);
      ir::Expr x = idx[dg.axis];
      const bool outermost = dg.inner * dg.extent >= original.shape()[dg.axis];
      if (dg.inner != 1)
        x = ir::floordiv(x, ir::make_const(x.dtype(), static_cast<double>(dg.inner)));
      if (!outermost)
        x = ir::floormod(x, ir::make_const(x.dtype(), static_cast<double>(dg.extent)));
      out.push_back(x);
    }
    return out;
  };
  std::vector<ir::Tensor> new_inputs = dag.inputs(), new_outputs;
  new_inputs[argument] = packed;
  for (const ir::Tensor& op : dag.ops())
    if (!op.is_placeholder()) redirect.rebuild(op);
  for (const ir::Tensor& out : dag.outputs()) new_outputs.push_back(redirect.current(out));
  auto new_dag = std::make_shared<const ComputeDAG>(new_inputs, new_outputs);
  return LayoutRewrite{transform, new_dag, replay(new_dag, kept), packed, argument};
}

}  // namespace sched
LOOM_END_NAMESPACE
