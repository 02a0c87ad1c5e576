// Bodies of loom/sched/state.hpp and loom/sched/steps.hpp.
#include "loom/sched/state.hpp"

#include "loom/detail/hash.hpp"
#include "loom/ir/printer.hpp"
#include "loom/ir/visitor.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <ostream>
#include <set>
#include <sstream>

LOOM_BEGIN_NAMESPACE
namespace sched {

LOOM_DECL const char* annotation_name(Annotation a) {
  switch (a) {
    case Annotation::Serial: return "none";
    case Annotation::Parallel: return "parallel";
    case Annotation::Vectorized: return "vectorize";
    case Annotation::Unrolled: return "unroll";
    case Annotation::BlockIdxX: return "blockIdx.x";
    case Annotation::BlockIdxY: return "blockIdx.y";
    case Annotation::BlockIdxZ: return "blockIdx.z";
    case Annotation::VThread: return "vthread";
    case Annotation::ThreadIdxX: return "threadIdx.x";
    case Annotation::ThreadIdxY: return "threadIdx.y";
    case Annotation::ThreadIdxZ: return "threadIdx.z";
    case Annotation::Tensorized: return "tensorize";
    case Annotation::Pipelined: return "pipeline";
    case Annotation::Pipelined3: return "pipeline3";
    case Annotation::Pipelined4: return "pipeline4";
  }
  return "?";
}

LOOM_DECL std::optional<Annotation> find_annotation(const std::string& s) {
  for (int a = 0; a <= static_cast<int>(Annotation::Pipelined4); ++a)
    if (s == annotation_name(static_cast<Annotation>(a))) return static_cast<Annotation>(a);
  return std::nullopt;
}

LOOM_DECL Annotation parse_annotation(const std::string& s) {
  const std::optional<Annotation> a = find_annotation(s);
  LOOM_USER_CHECK(a.has_value(), "loom.sched.E230") << "unknown loop annotation '" << s << "'";
  return *a;
}

LOOM_DECL const char* scope_name(ir::MemoryScope s) {
  switch (s) {
    case ir::MemoryScope::Global: return "global";
    case ir::MemoryScope::Local: return "local";
    case ir::MemoryScope::Shared: return "shared";
  }
  return "?";
}

LOOM_DECL std::optional<ir::MemoryScope> find_scope(const std::string& s) {
  for (auto sc : {ir::MemoryScope::Global, ir::MemoryScope::Local, ir::MemoryScope::Shared})
    if (s == scope_name(sc)) return sc;
  return std::nullopt;
}

LOOM_DECL ir::MemoryScope parse_scope(const std::string& s) {
  const std::optional<ir::MemoryScope> scope = find_scope(s);
  LOOM_USER_CHECK(scope.has_value(), "loom.sched.E231")
      << "unknown memory scope '" << s << "'; expected global, local or shared";
  return *scope;
}

LOOM_DECL const char* step_tag(const Step& s) {
  return std::visit([](const auto& x) { return std::decay_t<decltype(x)>::tag; }, s);
}

LOOM_DECL const std::string& step_stage(const Step& s) {
  return std::visit([](const auto& x) -> const std::string& { return x.stage; }, s);
}

namespace detail {
template <class T>
std::string join(const std::vector<T>& v) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ']';
  return os.str();
}

// One readable line per step; no catch-all, so a new step without a line does not compile.
struct step_printer {
  std::ostream& os;

  void operator()(const SplitStep& s) const {
    os << "split " << s.stage << " @" << s.iter << " [";
    for (size_t i = 0; i < s.lengths.size(); ++i)
      os << (i ? ", " : "") << (s.lengths[i] ? std::to_string(*s.lengths[i]) : "?");
    os << ']';
  }
  void operator()(const FollowSplitStep& s) const {
    os << "follow_split " << s.stage << " @" << s.iter << " step " << s.src_step << " n "
       << s.n_split;
  }
  void operator()(const FollowFusedSplitStep& s) const {
    os << "follow_fused_split " << s.stage << " @" << s.iter << " steps " << join(s.src_steps)
       << " level " << s.level << (s.factor_or_nparts ? " factor" : " nparts");
  }
  void operator()(const FuseStep& s) const { os << "fuse " << s.stage << ' ' << join(s.iters); }
  void operator()(const ReorderStep& s) const {
    os << "reorder " << s.stage << ' ' << join(s.order);
  }
  void operator()(const AnnotationStep& s) const {
    os << "annotate " << s.stage << " @" << s.iter << ' ' << annotation_name(s.annotation);
  }
  void operator()(const ComputeAtStep& s) const {
    os << "compute_at " << s.stage << " -> " << s.target << " @" << s.target_iter;
  }
  void operator()(const ComputeRootStep& s) const { os << "compute_root " << s.stage; }
  void operator()(const ComputeInlineStep& s) const { os << "compute_inline " << s.stage; }
  void operator()(const CacheReadStep& s) const {
    os << "cache_read " << s.stage << ' ' << scope_name(s.scope) << ' ' << join(s.readers);
  }
  void operator()(const CacheWriteStep& s) const {
    os << "cache_write " << s.stage << ' ' << scope_name(s.scope);
  }
  void operator()(const PragmaStep& s) const {
    os << "pragma " << s.stage << " @" << s.iter << " auto_unroll_max_step=" << s.max_step;
  }
  void operator()(const StorageAlignStep& s) const {
    os << "storage_align " << s.stage << " axis " << s.axis << " factor " << s.factor << " offset "
       << s.offset;
  }
  void operator()(const StoragePermuteStep& s) const {
    os << "storage_permute " << s.stage << " axis " << s.axis << " lanes " << s.lanes
       << " per_lane " << s.per_lane << " unit " << s.unit;
  }
  void operator()(const StorageSwizzleStep& s) const {
    os << "storage_swizzle " << s.stage << " bytes " << s.bytes;
  }
  void operator()(const StorageChunkStep& s) const {
    os << "storage_chunk " << s.stage << " bytes " << s.bytes;
  }
  void operator()(const RfactorStep& s) const {
    os << "rfactor " << s.stage << " @" << s.iter << " axis " << s.factor_axis;
  }
};

// The hash of one field value, by its type; a type without a case does not compile.
template <class T>
uint64_t field_hash(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    return ::loom::detail::hash_string(v);
  } else if constexpr (std::is_same_v<T, bool> || std::is_integral_v<T> || std::is_enum_v<T>) {
    return ::loom::detail::mix64(static_cast<uint64_t>(v));
  } else if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
    return v ? ::loom::detail::hash_combine(1, static_cast<uint64_t>(*v)) : 0;
  } else if constexpr (std::is_same_v<T, std::vector<int>> ||
                       std::is_same_v<T, std::vector<std::string>> ||
                       std::is_same_v<T, std::vector<std::optional<int64_t>>>) {
    uint64_t h = ::loom::detail::mix64(v.size());
    for (const auto& e : v) h = ::loom::detail::hash_combine(h, field_hash(e));
    return h;
  } else {
    static_assert(sizeof(T) == 0, "a step field of a type structural_hash does not know");
  }
}
}  // namespace detail

LOOM_DECL std::string to_string(const Step& step) {
  std::ostringstream os;
  std::visit(detail::step_printer{os}, step);
  return os.str();
}

LOOM_DECL uint64_t structural_hash(const std::vector<Step>& steps) {
  uint64_t h = ::loom::detail::mix64(steps.size());
  for (const Step& step : steps) {
    h = ::loom::detail::hash_combine(h, step.index());
    std::visit(
        [&](const auto& s) {
          for_each_field(s, [&](const auto&, const auto& value) {
            h = ::loom::detail::hash_combine(h, detail::field_hash(value));
          });
        },
        step);
  }
  return h;
}

LOOM_DECL int Stage::leaf_position(int iter_id) const {
  for (size_t i = 0; i < leaves.size(); ++i)
    if (leaves[i] == iter_id) return static_cast<int>(i);
  return -1;
}

namespace detail {

inline Stage make_stage(const ir::Tensor& op, const std::string& name, bool is_output) {
  Stage s;
  s.name = name;
  s.op = op;
  s.is_placeholder = op.is_placeholder();
  s.is_output = is_output;
  if (s.is_placeholder) return s;
  for (auto& a : op->axes)
    s.iters.push_back({a.name(), a.extent, IterKind::Spatial, Annotation::Serial});
  s.num_spatial_axes = static_cast<int>(op->axes.size());
  if (auto* r = op->body.as<ir::Reduce>())
    for (auto& a : r->axes)
      s.iters.push_back({a.name(), a.extent, IterKind::Reduce, Annotation::Serial});
  s.leaves.resize(s.iters.size());
  std::iota(s.leaves.begin(), s.leaves.end(), 0);
  return s;
}

// Replaces reads of `from` by reads of `to` (same indices).
class read_redirector : public ir::ExprMutator {
 public:
  read_redirector(const ir::TensorNode* from, ir::Tensor to) : from_(from), to_(std::move(to)) {}

 protected:
  ir::Expr visit_TensorRead(const ir::TensorRead* op, const ir::Expr& self) override {
    ir::Expr e = ir::ExprMutator::visit_TensorRead(op, self);
    auto* r = e.as<ir::TensorRead>();
    if (r->tensor.get() != from_) return e;
    return ir::TensorRead::make(to_, r->indices);
  }

 private:
  const ir::TensorNode* from_;
  ir::Tensor to_;
};

inline ir::Tensor rebuild_compute(const ir::Tensor& op, const ir::Expr& body) {
  return ir::make_compute(op.name(), op->axes, body, op->tag);
}

// A copy of `op`'s computation with fresh axis variables (a new op must not share loop
// variables with the one it was made from).
inline ir::Tensor fresh_copy(const ir::Tensor& op, const std::string& name) {
  std::vector<ir::IterVar> axes;
  std::unordered_map<const ir::Variable*, ir::Expr> sub;
  for (auto& a : op->axes) {
    ir::IterVar n{ir::Variable::make(a.name()), a.extent, ir::IterKind::Spatial};
    sub[a.variable()] = n.var;
    axes.push_back(n);
  }
  ir::Expr body = op->body;
  if (auto* r = body.as<ir::Reduce>()) {
    std::vector<ir::IterVar> raxes;
    for (auto& a : r->axes) {
      ir::IterVar n{ir::Variable::make(a.name()), a.extent, ir::IterKind::Reduce};
      sub[a.variable()] = n.var;
      raxes.push_back(n);
    }
    body =
        ir::Reduce::make(r->op, ir::substitute(r->source, sub), raxes,
                         r->condition.defined() ? ir::substitute(r->condition, sub) : ir::Expr());
  } else {
    body = ir::substitute(body, sub);
  }
  return ir::make_compute(name, axes, body, op->tag);
}

}  // namespace detail

LOOM_DECL State::State(std::shared_ptr<const ComputeDAG> dag) : dag_(std::move(dag)) {
  std::set<std::string> used;
  for (int i = 0; i < dag_->num_ops(); ++i) {
    const ir::Tensor& op = dag_->ops()[i];
    std::string name = op.name();
    for (int n = 1; used.count(name); ++n) name = op.name() + "_" + std::to_string(n);
    used.insert(name);
    stages_.push_back(detail::make_stage(op, name, dag_->info(i).is_output));
  }
  rebuild_tensor_map();
}

LOOM_DECL State::State(const ComputeDAG& dag) : State(std::make_shared<const ComputeDAG>(dag)) {}

LOOM_DECL void State::rebuild_tensor_map() {
  // Every op a stage ever computed stays an alias of that stage: consumers built before a
  // cache_read/cache_write still read the old tensor node.
  for (auto& st : stages_) {
    bool known = false;
    for (auto& [t, name] : aliases_) known = known || t.same_as(st.op);
    if (!known) aliases_.emplace_back(st.op, st.name);
  }
  tensor_stage_.clear();
  for (auto& [t, name] : aliases_) tensor_stage_[t.get()] = stage_index(name);
}

LOOM_DECL int State::stage_index(const std::string& name) const {
  for (size_t i = 0; i < stages_.size(); ++i)
    if (stages_[i].name == name) return static_cast<int>(i);
  LOOM_USER_FAIL("loom.sched.E201") << "no stage named '" << name << "' in this schedule";
  return -1;
}

LOOM_DECL int State::stage_of(const ir::TensorNode* t) const {
  auto it = tensor_stage_.find(t);
  return it == tensor_stage_.end() ? -1 : it->second;
}

LOOM_DECL State replay(std::shared_ptr<const ComputeDAG> dag, const std::vector<Step>& steps) {
  State s(std::move(dag));
  for (auto& step : steps) s.apply(step);
  return s;
}

LOOM_DECL std::vector<std::optional<int64_t>> adapted_split_lengths(
    int64_t extent, const std::vector<std::optional<int64_t>>& lengths, int64_t recorded_extent) {
  std::vector<std::optional<int64_t>> out = lengths;
  if (extent <= 0) return out;
  int64_t recorded_product = 1;
  bool complete = true;
  for (const auto& l : lengths) {
    complete = complete && l.has_value();
    recorded_product *= l.value_or(1);
  }
  if (complete && recorded_extent > 0 && recorded_extent % recorded_product == 0 &&
      extent % recorded_product != 0) {
    // A perfect tiling stays one: each length, innermost first, becomes the divisor of what is
    // left of the loop nearest to it in ratio (the smaller on a tie), unless one lands more than
    // twice off (a prime extent has no divisor near a vector's length; a tail costs less than
    // a loop of one). Tails cost a guard or a peeled loop per tile: 11-21 % of the dense layers
    // at M = 100 and 200 carried from 128.
    int64_t rest = extent;
    bool near = true;
    for (size_t j = out.size(); j-- > 0 && near;) {
      const double want = static_cast<double>(*lengths[j]);
      int64_t best = 1;
      for (int64_t d = 2; d <= rest; ++d)
        if (rest % d == 0 && std::abs(std::log(d / want)) < std::abs(std::log(best / want)))
          best = d;
      near = std::abs(std::log(best / want)) <= std::log(2.0);
      out[j] = best;
      rest /= best;
    }
    if (near) return out;
    out = lengths;
  }
  int64_t inner = 1;
  for (size_t j = out.size(); j-- > 0;) {
    if (!out[j]) continue;
    const int64_t fits = std::max<int64_t>(1, extent / inner);
    out[j] = std::min(*out[j], fits);
    inner *= *out[j];
  }
  return out;
}

LOOM_DECL State replay_adapted(std::shared_ptr<const ComputeDAG> dag,
                               const std::vector<Step>& steps) {
  State s(std::move(dag));
  for (const Step& step : steps) {
    const auto* sp = std::get_if<SplitStep>(&step);
    const int si = sp ? s.stage_index(sp->stage) : -1;
    if (!sp || sp->iter < 0 || sp->iter >= static_cast<int>(s.stages()[si].leaves.size())) {
      s.apply(step);  // as recorded; a split of a loop that is not there fails with its error
      continue;
    }
    SplitStep adapted = *sp;
    adapted.extent = s.stages()[si].leaf(sp->iter).extent;
    adapted.lengths = adapted_split_lengths(adapted.extent, sp->lengths, sp->extent);
    s.apply(adapted);
  }
  return s;
}

}  // namespace sched
LOOM_END_NAMESPACE

#include "loom/sched/impl/apply.ipp"
