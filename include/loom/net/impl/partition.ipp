// Bodies of loom/net/partition.hpp: op patterns, post-dominators, Relay's fusion phases, and the
// groups rebuilt as DAGs of their own.
#include "loom/net/partition.hpp"

#include "loom/error.hpp"
#include "loom/ir/visitor.hpp"

#include <algorithm>
#include <functional>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

LOOM_BEGIN_NAMESPACE
namespace net {

namespace detail {

// Whether every index of every read of `input` in `op` is an output axis of `op` or a constant,
// axes in increasing order; with `complete`, also that the reads are exactly the axes in order
// on an input of the same shape.
inline bool plain_reads(const ir::Tensor& op, const ir::TensorNode* input, bool complete) {
  if (complete && input->shape != op.shape()) return false;
  bool ok = true;
  ir::post_order_visit(op->body, [&](const ir::Expr& e) {
    auto* r = e.as<ir::TensorRead>();
    if (!r || r->tensor.get() != input) return;
    int last = -1;
    for (size_t d = 0; d < r->indices.size(); ++d) {
      const ir::Expr& ix = r->indices[d];
      int axis = -1;
      if (auto* v = ix.as<ir::Variable>())
        for (size_t a = 0; a < op->axes.size(); ++a)
          if (op->axes[a].variable() == v) axis = static_cast<int>(a);
      if (axis < 0) {
        ok = ok && !complete && ir::as_const_int(ix) != nullptr;
        continue;
      }
      ok = ok && axis > last && (!complete || axis == static_cast<int>(d));
      last = axis;
    }
  });
  return ok;
}

// The post-dominator tree of the compute ops: parent[i] is the op every path from op i to the
// network's outputs goes through first, or `sink` (= number of ops) for outputs, ops without
// consumers, and ops whose paths meet only there.
struct post_dominators {
  std::vector<int> parent, depth;
  int sink = 0;

  explicit post_dominators(const ComputeDAG& dag) {
    const int n = dag.num_ops();
    sink = n;
    parent.assign(n + 1, n);
    depth.assign(n + 1, 0);
    for (int i = n - 1; i >= 0; --i) {
      const OpInfo& info = dag.info(i);
      if (info.is_placeholder) continue;
      int p = sink;
      if (!info.is_output && !info.consumers.empty()) {
        p = info.consumers[0];
        for (size_t c = 1; c < info.consumers.size(); ++c) p = common(p, info.consumers[c]);
      }
      parent[i] = p;
      depth[i] = depth[p] + 1;
    }
  }

  int common(int a, int b) const {
    while (a != b) {
      if (depth[a] < depth[b]) std::swap(a, b);
      a = parent[a];
    }
    return a;
  }
};

class partitioner {
 public:
  explicit partitioner(const ComputeDAG& dag) : dag_(dag), dom_(dag) {
    const int n = dag.num_ops();
    group_.resize(n);
    std::iota(group_.begin(), group_.end(), 0);
    pattern_.assign(n, OpPattern::ElementWise);
    for (int i = 0; i < n; ++i)
      if (!dag.info(i).is_placeholder) pattern_[i] = op_pattern(dag, i);
    op_pattern_ = pattern_;
  }

  std::vector<std::vector<int>> run() {
    for (int phase = 0; phase < 3; ++phase)
      for (int i = 0; i < dag_.num_ops(); ++i)
        if (!dag_.info(i).is_placeholder) fuse(i, phase);
    std::unordered_map<int, std::vector<int>> members;
    std::vector<int> roots;
    for (int i = 0; i < dag_.num_ops(); ++i) {
      if (dag_.info(i).is_placeholder) continue;
      const int r = find(i);
      if (!members.count(r)) roots.push_back(r);
      members[r].push_back(i);
    }
    std::vector<std::vector<int>> groups;
    for (int r : roots) groups.push_back(std::move(members[r]));
    // Topological order of the groups' outputs (their last ops).
    std::sort(
        groups.begin(), groups.end(),
        [](const std::vector<int>& a, const std::vector<int>& b) { return a.back() < b.back(); });
    return groups;
  }

  OpPattern group_pattern(int op) { return pattern_[find(op)]; }

 private:
  int find(int i) {
    while (group_[i] != i) i = group_[i] = group_[group_[i]];
    return i;
  }

  // The patterns of the edges from `op` to its post-dominator, combined: an edge is
  // element-wise when the consumer reads the producer at its own point, else the consumer's
  // pattern.
  OpPattern dominator_pattern(int op) const {
    OpPattern p = OpPattern::ElementWise;
    std::unordered_set<int> seen;
    std::function<void(int)> walk = [&](int u) {
      if (!seen.insert(u).second) return;
      for (int c : dag_.info(u).consumers) {
        const bool pointwise = detail::plain_reads(dag_.ops()[c], dag_.ops()[u].get(), true);
        p = std::max(p, pointwise ? OpPattern::ElementWise : pattern_[c]);
        if (c != dom_.parent[op]) walk(c);
      }
    };
    walk(op);
    return p;
  }

  // Whether every op on the paths from `src` to `sink` (its post-dominator) satisfies `ok`,
  // given the pattern of its group and whether it is the sink.
  bool check_path(int src, int sink, const std::function<bool(OpPattern, bool)>& ok) {
    std::unordered_set<int> seen;
    std::function<bool(int)> walk = [&](int u) {
      if (!seen.insert(u).second) return true;
      if (!ok(group_pattern(u), u == sink)) return false;
      if (u == sink) return true;
      for (int c : dag_.info(u).consumers)
        if (!walk(c)) return false;
      return true;
    };
    for (int c : dag_.info(src).consumers)
      if (!walk(c)) return false;
    return true;
  }

  int reductions_in_group(int op) {
    const int r = find(op);
    int n = 0;
    for (int i = 0; i < dag_.num_ops(); ++i)
      n += !dag_.info(i).is_placeholder && find(i) == r && pattern_of_op(i) == OpPattern::Reduction;
    return n;
  }
  OpPattern pattern_of_op(int i) const { return op_pattern_[i]; }

  // Every op on the paths from `src` to `sink` joins the group of `sink`.
  void commit(int src, int sink) {
    const int target = find(sink);
    OpPattern p = pattern_[target];
    std::unordered_set<int> seen;
    std::function<void(int)> join = [&](int u) {
      if (u == sink || !seen.insert(u).second) return;
      const int r = find(u);
      p = std::max(p, pattern_[r]);
      group_[r] = target;
      for (int c : dag_.info(u).consumers) join(c);
    };
    join(src);
    pattern_[target] = p;
  }

  void fuse(int op, int phase) {
    const int sink = dom_.parent[op];
    if (sink == dom_.sink || find(op) == find(sink)) return;
    const OpPattern group = group_pattern(op);
    auto at_most = [](OpPattern limit) {
      return [limit](OpPattern k, bool) { return k <= limit; };
    };
    switch (group) {
      case OpPattern::Anchor:
        // Phase 0: the anchor takes its element-wise and broadcast epilogue.
        if (phase == 0 && dominator_pattern(op) == OpPattern::ElementWise &&
            check_path(op, sink, at_most(OpPattern::Broadcast)))
          commit(op, sink);
        return;
      case OpPattern::ElementWise:
      case OpPattern::Broadcast: {
        const OpPattern d = dominator_pattern(op);
        if (phase == 0 && (d <= OpPattern::Injective || d == OpPattern::Reduction) &&
            check_path(op, sink, [](OpPattern k, bool is_sink) {
              return is_sink || k <= OpPattern::Injective;
            }))
          commit(op, sink);
        return;
      }
      case OpPattern::Injective:
        // Phase 1, once the anchors have their epilogues: padding or a transpose joins the
        // anchor that reads it (loom's sketch rules inline it there).
        if (phase == 1 && check_path(op, sink, [](OpPattern k, bool is_sink) {
              return k <= OpPattern::Injective || (is_sink && k == OpPattern::Anchor);
            }))
          commit(op, sink);
        return;
      case OpPattern::Reduction: {
        // Phase 2: the rows of a softmax or a layer norm stay together. A second statistic of
        // the same rows may join on the way (softmax's sum after its maximum, the variance
        // after the mean), not a third: a layer norm after a softmax is a group of its own.
        if (phase != 2) return;
        const bool second = reductions_in_group(op) == 1;
        if (check_path(op, sink, [second](OpPattern k, bool is_sink) {
              return is_sink ? k <= OpPattern::Injective
                             : k <= OpPattern::Injective || (second && k == OpPattern::Reduction);
            }))
          commit(op, sink);
        return;
      }
    }
  }

  const ComputeDAG& dag_;
  post_dominators dom_;
  std::vector<int> group_;
  std::vector<OpPattern> pattern_;     // per op; for a group's root, the group's
  std::vector<OpPattern> op_pattern_;  // per op, its own
};

// Rebuilds the computes of `ops` (topological) on placeholders for what they read outside.
inline FusedGroup make_group(const ComputeDAG& network, std::vector<int> ops, OpPattern pattern) {
  FusedGroup g;
  g.ops = std::move(ops);
  g.pattern = pattern;
  std::unordered_map<const ir::TensorNode*, ir::Tensor> rebuilt;
  std::vector<ir::Tensor> placeholders;
  struct reader : ir::ExprMutator {
    std::function<ir::Tensor(const ir::TensorNode*)> map;
    ir::Expr visit_TensorRead(const ir::TensorRead* op, const ir::Expr&) override {
      std::vector<ir::Expr> idx;
      for (const ir::Expr& e : op->indices) idx.push_back(mutate(e));
      return ir::TensorRead::make(map(op->tensor.get()), std::move(idx));
    }
  } r;
  std::unordered_map<const ir::TensorNode*, int> index;
  for (int i = 0; i < network.num_ops(); ++i) index[network.ops()[i].get()] = i;
  // Layers repeat names ("relu" of every block): within the group each tensor gets its own,
  // as schedules name stages by them (the workload key ignores names).
  std::unordered_set<std::string> taken;
  auto unique = [&](const std::string& name) {
    std::string n = name;
    for (int k = 1; !taken.insert(n).second; ++k) n = name + "_" + std::to_string(k);
    return n;
  };
  r.map = [&](const ir::TensorNode* t) {
    auto it = rebuilt.find(t);
    if (it != rebuilt.end()) return it->second;
    ir::Tensor p = ir::make_placeholder(unique(t->name), t->dtype, t->shape);
    g.inputs.push_back(network.ops()[index.at(t)]);
    placeholders.push_back(p);
    return rebuilt[t] = p;
  };
  for (int i : g.ops) {
    const ir::Tensor& t = network.ops()[i];
    ir::Expr body = r.mutate(t->body);
    rebuilt[t.get()] = ir::make_compute(unique(t.name()), t->axes, body, t->tag);
  }
  g.dag = std::make_shared<const ComputeDAG>(
      placeholders, std::vector<ir::Tensor>{rebuilt.at(network.ops()[g.ops.back()].get())});
  return g;
}

}  // namespace detail

LOOM_DECL const char* pattern_name(OpPattern p) {
  switch (p) {
    case OpPattern::ElementWise: return "element-wise";
    case OpPattern::Broadcast: return "broadcast";
    case OpPattern::Injective: return "injective";
    case OpPattern::Reduction: return "reduction";
    case OpPattern::Anchor: return "anchor";
  }
  return "?";
}

LOOM_DECL OpPattern op_pattern(const ComputeDAG& dag, int op) {
  const OpInfo& info = dag.info(op);
  LOOM_USER_CHECK(!info.is_placeholder, "loom.net.E1001")
      << "op_pattern: '" << dag.ops()[op].name() << "' is a placeholder, not a compute";
  if (info.has_reduce)
    return info.needs_multi_level_tiling ? OpPattern::Anchor : OpPattern::Reduction;
  const ir::Tensor& t = dag.ops()[op];
  bool complete = true, plain = true;
  for (const ir::Tensor& in : ir::input_tensors(t)) {
    complete = complete && detail::plain_reads(t, in.get(), true);
    plain = plain && detail::plain_reads(t, in.get(), false);
  }
  return complete ? OpPattern::ElementWise : plain ? OpPattern::Broadcast : OpPattern::Injective;
}

LOOM_DECL std::vector<FusedGroup> partition(const ComputeDAG& network) {
  detail::partitioner p(network);
  std::vector<FusedGroup> out;
  for (std::vector<int>& ops : p.run()) {
    const OpPattern pattern = p.group_pattern(ops.back());
    // One output per group: every op but the last is read inside the group only.
    std::unordered_set<int> in(ops.begin(), ops.end());
    for (size_t k = 0; k + 1 < ops.size(); ++k) {
      const OpInfo& info = network.info(ops[k]);
      LOOM_INTERNAL_CHECK(!info.is_output &&
                          std::all_of(info.consumers.begin(), info.consumers.end(),
                                      [&](int c) { return in.count(c) > 0; }))
          << "fusion group of '" << network.ops()[ops.back()].name() << "' leaks '"
          << network.ops()[ops[k]].name() << "'";
    }
    out.push_back(detail::make_group(network, std::move(ops), pattern));
  }
  return out;
}

LOOM_DECL std::vector<NetworkTask> extract_tasks(const std::vector<FusedGroup>& groups) {
  std::vector<NetworkTask> tasks;
  std::unordered_map<std::string, size_t> by_key;
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string& key = groups[g].dag->workload_key();
    auto [it, fresh] = by_key.emplace(key, tasks.size());
    if (fresh) tasks.push_back({groups[g].dag, {}});
    tasks[it->second].groups.push_back(static_cast<int>(g));
  }
  return tasks;
}

}  // namespace net
LOOM_END_NAMESPACE
