// Bodies of loom/lower/gpu.hpp: kernels, thread binding, barriers, and the CPU emulation.
#include "loom/lower/gpu.hpp"

#include "loom/ir/equal_hash.hpp"
#include "loom/ir/printer.hpp"
#include "loom/ir/simplify.hpp"
#include "loom/lower/interpret.hpp"
#include "loom/lower/mma.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <ostream>
#include <unordered_map>
#include <unordered_set>

LOOM_BEGIN_NAMESPACE
namespace lower {

namespace detail {

using namespace ir;

inline bool is_thread_loop(ForKind k) {
  return k == ForKind::ThreadIdxX || k == ForKind::ThreadIdxY || k == ForKind::ThreadIdxZ;
}
inline bool is_block_loop(ForKind k) {
  return k == ForKind::BlockIdxX || k == ForKind::BlockIdxY || k == ForKind::BlockIdxZ;
}
inline int gpu_dim(ForKind k) {
  switch (k) {
    case ForKind::BlockIdxY:
    case ForKind::ThreadIdxY: return 1;
    case ForKind::BlockIdxZ:
    case ForKind::ThreadIdxZ: return 2;
    default: return 0;
  }
}
inline char dim_letter(int d) { return "xyz"[d]; }

struct buffer_use {
  std::unordered_set<const BufferNode*> reads, writes;
  bool empty() const { return reads.empty() && writes.empty(); }
};

// The buffers `s` loads from and stores to; with `only_shared`, shared-memory ones only.
inline buffer_use uses_of(const Stmt& s, bool only_shared) {
  struct collector : StmtVisitor {
    buffer_use* u;
    bool only_shared;
    using StmtVisitor::visit;
    void visit_Load(const Load* op) override {
      if (!only_shared || op->buffer->scope == MemoryScope::Shared)
        u->reads.insert(op->buffer.get());
      StmtVisitor::visit_Load(op);
    }
    void visit_Store(const Store* op) override {
      if (!only_shared || op->buffer->scope == MemoryScope::Shared)
        u->writes.insert(op->buffer.get());
      StmtVisitor::visit_Store(op);
    }
  } c;
  buffer_use u;
  c.u = &u;
  c.only_shared = only_shared;
  c.visit(s);
  return u;
}

inline bool stmt_uses_var(const Stmt& s, const Variable* v) {
  struct finder : StmtVisitor {
    const Variable* v;
    bool found = false;
    using StmtVisitor::visit;
    void visit_Variable(const Variable* op) override { found = found || op == v; }
  } f;
  f.v = v;
  f.visit(s);
  return f.found;
}

inline bool reads_buffer(const Expr& e, const BufferNode* b) {
  bool found = false;
  post_order_visit(e, [&](const Expr& x) {
    if (auto* l = x.as<Load>()) found = found || l->buffer.get() == b;
  });
  return found;
}

inline bool has_barrier(const Stmt& s) {
  struct finder : StmtVisitor {
    bool found = false;
    using StmtVisitor::visit;
    void visit(const Expr&) override {}
    void visit_Barrier(const Barrier*) override { found = true; }
  } f;
  f.visit(s);
  return f.found;
}

// Whether `e` is the same for every thread of a block (uses none of its thread indices).
inline bool uniform(const Expr& e, const std::array<Expr, 3>& thread_index) {
  for (const Expr& t : thread_index)
    if (uses_var(e, t.as<Variable>())) return false;
  return true;
}

// Every load and store of a buffer in `moves` goes to the buffer it maps to, its index shifted
// by the offset: a pipelined array's slot, a thread's copy of its own array.
using buffer_moves = std::unordered_map<const BufferNode*, std::pair<Buffer, Expr>>;
inline Stmt move_buffers(const Stmt& s, const buffer_moves& moves) {
  struct mover : StmtMutator {
    const buffer_moves* m;
    static Expr shift(const Expr& index, const Expr& offset) {
      const int lanes = index.dtype().lanes;
      return index + (lanes == 1 ? offset : Broadcast::make(offset, lanes));
    }
    Expr visit_Load(const Load* op, const Expr& self) override {
      Expr i = mutate(op->index);
      auto it = m->find(op->buffer.get());
      if (it == m->end()) return i.same_as(op->index) ? self : Load::make(op->buffer, i);
      return Load::make(it->second.first, shift(i, it->second.second));
    }
    Stmt visit_Store(const Store* op, const Stmt& self) override {
      Expr i = mutate(op->index), v = mutate(op->value);
      auto it = m->find(op->buffer.get());
      if (it == m->end())
        return i.same_as(op->index) && v.same_as(op->value) ? self : Store::make(op->buffer, i, v);
      return Store::make(it->second.first, shift(i, it->second.second), v);
    }
  } r;
  r.m = &moves;
  return r.mutate(s);
}

// A store that combines across the iterations of thread loop `t`: `b[i] = reduce_combine(op,
// b[i], v)` where i does not depend on t and v does not read b. Each thread keeps a partial
// and the binder combines them with an AllReduce.
struct cross_thread_combine {
  const Store* store = nullptr;
  ReduceOp op = ReduceOp::Sum;
  Expr value;
};

inline bool as_cross_thread_combine(const Store* st, const Variable* t, cross_thread_combine& out) {
  if (uses_var(st->index, t)) return false;
  ReduceOp op;
  Expr value;
  if (!as_reduce_combine(st->value, Load::make(st->buffer, st->index), op, value) ||
      reads_buffer(value, st->buffer.get()))
    return false;
  out = {st, op, value};
  return true;
}

// Checks that the kernel body (block loops already replaced, thread loops still loops) means on
// the GPU what it means run serially; see the errors listed in gpu.hpp.
class checker : public StmtVisitor {
 public:
  checker(const std::string& kernel, const std::array<int64_t, 3>& block,
          std::vector<std::pair<const Variable*, int64_t>> block_vars)
      : kernel_(kernel), block_(block), block_vars_(std::move(block_vars)) {}

  using StmtVisitor::visit;

 protected:
  void visit_For(const For* op) override {
    LOOM_USER_CHECK(op->for_kind != ForKind::Parallel, "loom.lower.E423")
        << "GPU kernel '" << kernel_ << "': loop '" << op->variable()->name
        << "' is marked parallel; on a GPU bind it to blockIdx or threadIdx instead";
    LOOM_USER_CHECK(!is_block_loop(op->for_kind), "loom.lower.E423")
        << "GPU kernel '" << kernel_ << "': loop '" << op->variable()->name << "' is bound to "
        << for_kind_name(op->for_kind) << " but is not among the outermost loops of its root "
        << "stage; bind only the outermost loops to blockIdx";
    if (!is_thread_loop(op->for_kind)) {
      StmtVisitor::visit_For(op);
      return;
    }
    for (const For* outer : threads_)
      LOOM_USER_CHECK(gpu_dim(outer->for_kind) != gpu_dim(op->for_kind) ||
                          !stmt_uses_var(op->body, outer->variable()),
                      "loom.lower.E422")
          << "GPU kernel '" << kernel_ << "': loop '" << op->variable()->name << "' is bound to "
          << for_kind_name(op->for_kind) << " inside loop '" << outer->variable()->name
          << "', bound to the same index, and uses that loop's variable; the two are one "
          << "hardware index, so the inner loop cannot iterate over the outer one's values";
    threads_.push_back(op);
    StmtVisitor::visit_For(op);
    threads_.pop_back();
  }

  void visit_Allocate(const Allocate* op) override {
    if (op->buffer->scope != MemoryScope::Shared) private_[op->buffer.get()] = threads_;
    StmtVisitor::visit_Allocate(op);
  }

  void visit_Store(const Store* op) override {
    const BufferNode* b = op->buffer.get();
    // The thread loops this store reduces across (lowered as an AllReduce by the binder).
    // (A thread's own array allocated inside a thread loop is one per iteration of it.)
    auto it = private_.find(b);
    std::vector<const For*> across;
    for (const For* t : threads_) {
      cross_thread_combine c;
      const bool inside = it != private_.end() &&
                          std::find(it->second.begin(), it->second.end(), t) != it->second.end();
      if (!inside && !is_const_int(t->extent, 1) && as_cross_thread_combine(op, t->variable(), c))
        across.push_back(t);
    }
    if (!across.empty()) {
      const For* t = across.front();
      LOOM_USER_CHECK(across.size() == 1 && t->for_kind == ForKind::ThreadIdxX, "loom.lower.E420")
          << "GPU kernel '" << kernel_ << "': the update of '" << b->name << "' reduces across "
          << "the threads of loop '" << t->variable()->name << "' (" << for_kind_name(t->for_kind)
          << (across.size() > 1 ? ") and of another thread loop" : ")")
          << "; a reduction runs across threadIdx.x only: bind one reduction loop to threadIdx.x";
      LOOM_USER_CHECK(b->scope != MemoryScope::Shared, "loom.lower.E420")
          << "GPU kernel '" << kernel_ << "': '" << b->name << "' is reduced across threads "
          << "into shared memory; keep the reduction's result in registers or global memory";
    }
    auto reduced_across = [&](const For* t) {
      return std::find(across.begin(), across.end(), t) != across.end();
    };
    if (it != private_.end()) {
      for (const For* t : threads_)
        LOOM_USER_CHECK(reduced_across(t) ||
                            std::find(it->second.begin(), it->second.end(), t) != it->second.end(),
                        "loom.lower.E421")
            << "GPU kernel '" << kernel_ << "': '" << b->name << "' is a thread's own array, "
            << "allocated outside loop '" << t->variable()->name << "' (bound to "
            << for_kind_name(t->for_kind) << ") but written inside it: every thread would "
            << "fill only its part of its copy. Compute the stage inside that loop, or in "
            << "shared memory";
    } else {
      for (int d = 0; d < 3; ++d) {
        if (block_[d] <= 1) continue;
        const bool bound = std::any_of(threads_.begin(), threads_.end(),
                                       [&](const For* t) { return gpu_dim(t->for_kind) == d; });
        LOOM_USER_CHECK(bound, "loom.lower.E420")
            << "GPU kernel '" << kernel_ << "': '" << b->name << "' ("
            << sched::scope_name(b->scope)
            << " memory) is written outside the loops bound to threadIdx." << dim_letter(d)
            << ", so each of the block's " << block_[d] << " threads would write it; bind "
            << "the stage's loops to threadIdx";
      }
      auto distributes = [&](const Variable* v, const char* what) {
        LOOM_USER_CHECK(
            uses_var(op->index, v) || (!uses_var(op->value, v) && !reads_buffer(op->value, b)),
            "loom.lower.E420")
            << "GPU kernel '" << kernel_ << "': the " << what << " loop '" << v->name
            << "' runs its iterations at once, but the write to '" << b->name
            << "' inside it does not depend on it while its value does (or it updates what "
            << "it reads): the " << what << "s would race. A reduction across threads "
            << "combines into an element that does not depend on the thread loop";
      };
      for (const For* t : threads_)
        if (!is_const_int(t->extent, 1) && !reduced_across(t)) distributes(t->variable(), "thread");
      if (b->scope == MemoryScope::Global)
        for (auto& [v, extent] : block_vars_)
          if (extent > 1) distributes(v, "block");
    }
    StmtVisitor::visit_Store(op);
  }

 private:
  const std::string& kernel_;
  std::array<int64_t, 3> block_;
  std::vector<std::pair<const Variable*, int64_t>> block_vars_;
  std::vector<const For*> threads_;
  std::unordered_map<const BufferNode*, std::vector<const For*>> private_;
};

// Replaces thread-bound loops by the thread index, hoists shared allocations out of the body,
// turns vthread loops into serial ones, and reductions
// across a threadIdx.x loop into a partial per thread and an AllReduce.
class binder : public StmtMutator {
 public:
  binder(const std::string& kernel, const std::array<Expr, 3>& tidx,
         const std::array<int64_t, 3>& block)
      : kernel_(kernel), tidx_(tidx), block_(block) {}
  std::vector<Buffer> shared;

 protected:
  Stmt visit_For(const For* op, const Stmt& self) override {
    if (is_thread_loop(op->for_kind)) {
      if (auto c = find_combine(op)) return reduce_across(op, *c);
      return bind(op, op->body);
    }
    if (op->for_kind == ForKind::Tensorized)
      LOOM_USER_CHECK(divergent_ == 0, "loom.lower.E427")
          << "GPU kernel '" << kernel_ << "': loop '" << op->variable()->name << "' is a "
          << "tensor-core tile, run by all 32 lanes of a warp together, but it sits in code that "
          << "only some threads run (a thread loop shorter than the block, or a thread-dependent "
          << "condition)";
    // (Vectorized loops stay: the CUDA printer turns a plain copy into one vector access and
    // unrolls the others.)
    ForKind k = op->for_kind;
    if (k == ForKind::VThread) k = ForKind::Serial;
    Stmt body = mutate(op->body);
    if (k == op->for_kind && body.same_as(op->body)) return self;
    return For::make(op->var, op->min, op->extent, k, body);
  }
  Stmt visit_IfThenElse(const IfThenElse* op, const Stmt& self) override {
    const bool diverges = !uniform(op->condition);
    divergent_ += diverges;
    Stmt out = StmtMutator::visit_IfThenElse(op, self);
    divergent_ -= diverges;
    return out;
  }
  Stmt visit_Allocate(const Allocate* op, const Stmt& self) override {
    if (op->buffer->scope != MemoryScope::Shared) own_.insert(op->buffer.get());
    Stmt body = mutate(op->body);
    if (op->buffer->scope == MemoryScope::Shared) {
      if (seen_.insert(op->buffer.get()).second) shared.push_back(op->buffer);
      return body;
    }
    return body.same_as(op->body) ? self : Allocate::make(op->buffer, body);
  }

 private:
  bool uniform(const Expr& e) const { return detail::uniform(e, tidx_); }

  Stmt bind(const For* op, const Stmt& loop_body) {
    const int d = gpu_dim(op->for_kind);
    Expr idx = is_const_int(op->min, 0) ? tidx_[d] : op->min + tidx_[d];
    const int64_t extent = *as_const_int(op->extent);
    const bool guard = extent < block_[d];
    divergent_ += guard;
    Stmt body = mutate(substitute(loop_body, {{op->variable(), idx}}));
    divergent_ -= guard;
    if (guard) body = IfThenElse::make(tidx_[d] < Expr(extent), body);
    return body;
  }

  struct found_combine {
    cross_thread_combine c;
    std::vector<Expr> conditions;  // of the ifs around it that do not depend on the thread loop
  };

  // The store of `loop`'s body that combines across its iterations (see the checker), with
  // the conditions it runs under; none when the loop distributes its iterations.
  std::optional<found_combine> find_combine(const For* loop) const {
    if (is_const_int(loop->extent, 1)) return std::nullopt;
    std::optional<found_combine> found;
    std::vector<const Variable*> inner;  // loops inside `loop` around the current statement
    std::vector<Expr> conditions;
    std::unordered_set<const BufferNode*> allocated;  // inside `loop`: one per iteration
    std::function<void(const Stmt&)> walk = [&](const Stmt& st) {
      if (!st.defined()) return;
      if (auto* b = st.as<Block>()) {
        for (const Stmt& x : b->stmts) walk(x);
      } else if (auto* a = st.as<Allocate>()) {
        allocated.insert(a->buffer.get());
        walk(a->body);
      } else if (auto* f = st.as<For>()) {
        inner.push_back(f->variable());
        walk(f->body);
        inner.pop_back();
      } else if (auto* i = st.as<IfThenElse>()) {
        conditions.push_back(i->condition);
        walk(i->then_case);
        conditions.back() = Not::make(i->condition);
        walk(i->else_case);
        conditions.pop_back();
      } else if (auto* store = st.as<Store>()) {
        cross_thread_combine c;
        if (allocated.count(store->buffer.get()) ||
            !as_cross_thread_combine(store, loop->variable(), c))
          return;
        for (const Variable* v : inner)
          LOOM_USER_CHECK(!uses_var(store->index, v), "loom.lower.E420")
              << "GPU kernel '" << kernel_ << "': '" << store->buffer->name << "' is reduced "
              << "across the threads of loop '" << loop->variable()->name << "' at an element "
              << "that depends on loop '" << v->name << "' inside it; reduce across threads "
              << "only with loops that walk the reduction inside the thread loop";
        LOOM_USER_CHECK(!found, "loom.lower.E420")
            << "GPU kernel '" << kernel_ << "': two reductions across the threads of loop '"
            << loop->variable()->name << "' (into '" << found->c.store->buffer->name << "' and '"
            << store->buffer->name << "'); one thread loop reduces one element";
        found_combine fc{c, {}};
        // Conditions on the loops inside hold per iteration; those of the element do not
        // depend on them and guard the final combine.
        for (const Expr& whole : conditions)
          for (const Expr& cond : split_and(whole)) {
            bool inside = uses_var(cond, loop->variable());
            for (const Variable* v : inner) inside = inside || uses_var(cond, v);
            if (!inside) fc.conditions.push_back(cond);
          }
        found = std::move(fc);
      }
    };
    walk(loop->body);
    return found;
  }

  static std::vector<Expr> split_and(const Expr& e) {
    if (!e.defined()) return {};
    if (auto* a = e.as<And>()) {
      std::vector<Expr> l = split_and(a->a), r = split_and(a->b);
      l.insert(l.end(), r.begin(), r.end());
      return l;
    }
    return {e};
  }

  // for t (threadIdx.x): ... b[i] = b[i] (op) v ...   becomes
  //   red = identity; if (t < extent) { ... red = red (op) v ... }; AllReduce(op, red);
  //   if (conditions of b[i], and thread 0 where b is global) b[i] = b[i] (op) red
  Stmt reduce_across(const For* loop, const found_combine& f) {
    const Store* st = f.c.store;
    LOOM_USER_CHECK(divergent_ == 0, "loom.lower.E424")
        << "GPU kernel '" << kernel_ << "': the reduction of '" << st->buffer->name
        << "' across the threads of loop '" << loop->variable()->name << "' sits in code that "
        << "only some threads run (a thread loop shorter than the block, or a thread-dependent "
        << "condition), where the threads cannot meet";
    const DType t = st->buffer->dtype;
    Buffer red = make_buffer(st->buffer->name + ".red", t, {1}, MemoryScope::Local);
    const Expr zero(int64_t{0});
    struct replacer : StmtMutator {
      const Store* target;
      Stmt with;
      Stmt visit_Store(const Store* op, const Stmt& self) override {
        return op == target ? with : self;
      }
    } r;
    r.target = st;
    r.with = Store::make(red, zero, reduce_combine(f.c.op, Load::make(red, zero), f.c.value));
    Stmt partials = bind(loop, r.mutate(loop->body));
    // The element's conditions stay nested in their order: a reduction's condition may read
    // memory at indices only the tail guards around it keep in range, and the operands of &&
    // have no evaluation order (IR contract; the emulation evaluates both).
    Stmt combine = Store::make(
        st->buffer, st->index,
        reduce_combine(f.c.op, Load::make(st->buffer, st->index), Load::make(red, zero)));
    for (auto c = f.conditions.rbegin(); c != f.conditions.rend(); ++c)
      combine = IfThenElse::make(*c, combine);
    // Every thread ends with the whole result: one writes it to global memory; a thread's own
    // copy each thread writes.
    if (!own_.count(st->buffer.get()))
      combine = IfThenElse::make(EQ::make(tidx_[0], Expr(int64_t{0})), combine);
    return Allocate::make(red, Block::make({Store::make(red, zero, reduce_identity(f.c.op, t)),
                                            partials, AllReduce::make(f.c.op, red), combine}));
  }

  const std::string& kernel_;
  std::array<Expr, 3> tidx_;
  std::array<int64_t, 3> block_;
  std::unordered_set<const BufferNode*> seen_;
  std::unordered_set<const BufferNode*> own_;  // the threads' own arrays, allocated in the kernel
  int divergent_ = 0;
};

// Inserts barriers into a thread's program (see gpu.hpp, point 4). `pending` holds the shared
// buffers read and written since the last barrier, by any thread.
class sync_planner {
 public:
  sync_planner(const std::string& kernel, const std::array<Expr, 3>& tidx)
      : kernel_(kernel), tidx_(tidx) {}

  Stmt run(const Stmt& body) {
    pending p;
    return process(body, p);
  }

 private:
  struct pending {
    std::unordered_set<const BufferNode*> reads, writes;
    void add(const buffer_use& u) {
      reads.insert(u.reads.begin(), u.reads.end());
      writes.insert(u.writes.begin(), u.writes.end());
    }
    void merge(const pending& o) {
      reads.insert(o.reads.begin(), o.reads.end());
      writes.insert(o.writes.begin(), o.writes.end());
    }
  };

  static bool intersect(const std::unordered_set<const BufferNode*>& a,
                        const std::unordered_set<const BufferNode*>& b) {
    for (auto* x : a)
      if (b.count(x)) return true;
    return false;
  }

  bool uniform(const Expr& e) const { return detail::uniform(e, tidx_); }

  Stmt process(const Stmt& s, pending& p) {
    std::vector<Stmt> out;
    if (auto* b = s.as<Block>()) {
      for (const Stmt& c : b->stmts) process_child(c, p, out);
    } else {
      process_child(s, p, out);
    }
    return Block::make(std::move(out));
  }

  void process_child(const Stmt& c, pending& p, std::vector<Stmt>& out) {
    const buffer_use u = uses_of(c, true);
    if (u.empty()) {
      out.push_back(c);
      return;
    }
    if (!intersect(u.reads, u.writes)) {
      // A read after another thread's write, or a write over what another thread may still
      // read. Two writes need no barrier: the threads write different elements.
      if (intersect(u.reads, p.writes) || intersect(u.writes, p.reads)) {
        out.push_back(Barrier::make());
        p = pending{};
      }
      p.add(u);
      out.push_back(c);
      return;
    }
    // `c` both writes and reads some shared buffer: the barriers go inside it.
    if (auto* b = c.as<Block>()) {
      for (const Stmt& x : b->stmts) process_child(x, p, out);
      return;
    }
    if (auto* a = c.as<Allocate>()) {
      out.push_back(Allocate::make(a->buffer, process(a->body, p)));
      return;
    }
    if (auto* f = c.as<For>(); f && uniform(f->min) && uniform(f->extent)) {
      // Twice: the second pass sees what the end of one iteration leaves for the next.
      const pending entry = p;
      pending first = entry;
      process(f->body, first);
      pending second = entry;
      second.merge(first);
      Stmt body = process(f->body, second);
      second.merge(entry);  // the loop may not run at all
      p = second;
      out.push_back(For::make(f->var, f->min, f->extent, f->for_kind, body));
      return;
    }
    if (auto* i = c.as<IfThenElse>(); i && uniform(i->condition)) {
      pending pt = p, pe = p;
      Stmt t = process(i->then_case, pt);
      Stmt e = i->else_case.defined() ? process(i->else_case, pe) : Stmt();
      pt.merge(pe);
      p = pt;
      out.push_back(IfThenElse::make(i->condition, t, e));
      return;
    }
    LOOM_USER_FAIL("loom.lower.E424")
        << "GPU kernel '" << kernel_ << "': shared memory is written and then read by other "
        << "threads inside code that only some threads run (a thread-dependent loop bound or "
        << "condition), where no barrier can be placed:\n"
        << c;
  }

  const std::string& kernel_;
  std::array<Expr, 3> tidx_;
};

// Software pipelining (gpu.hpp, point 6). After the barriers are planned, a Pipelined loop's
// body reads
//     [barrier] fetch_1 .. fetch_m  barrier  rest
// where the fetches write shared arrays S (and nothing else) from global memory and `rest`
// reads S without writing it. With s stages (pipeline_stages: 2 is double buffering) each array
// of S gets s slots, iteration i using slot (i - first) % s, and the loop becomes
//     barrier
//     copy_async { fetch(first) }; ...; copy_async { if (first + s - 2 < end) fetch(...) }
//     for i: wait_async_copies(pending s - 2); barrier
//            copy_async { if (i + s - 1 < end) fetch(i + s - 1) }
//            rest(i)
// The barrier at the top of iteration i makes fetch(i) visible to every thread: every copy
// group is committed, empty or not, so the s - 2 groups a thread started after fetch(i) are
// those that may stay in flight. It also tells that every thread is done with rest(i - 1),
// whose slot fetch(i + s - 1) overwrites; rest(i) reads its own slot while the next s - 1 are
// in flight. The barrier before the prologue protects what came before the loop (the previous
// run of it, inside an outer loop).
class pipeliner : public StmtMutator {
 public:
  pipeliner(const std::string& kernel, const Target& target, const std::array<Expr, 3>& tidx,
            std::vector<Buffer>& shared)
      : kernel_(kernel), target_(target), tidx_(tidx), shared_(shared) {}

  Stmt run(const Stmt& body) {
    Stmt out = mutate(body);
    if (doubled_.empty()) return out;
    // A doubled array used outside its loop would read or write the wrong slot.
    const buffer_use left = uses_of(out, true);
    for (const auto& [old, twin] : doubled_)
      LOOM_USER_CHECK(!left.reads.count(old) && !left.writes.count(old), "loom.lower.E428")
          << "GPU kernel '" << kernel_ << "': shared array '" << old->name << "' is fetched in "
          << "a pipelined loop but also used outside it; double buffering needs a shared stage "
          << "computed at the pipelined loop and read only inside it";
    for (Buffer& b : shared_)
      if (auto it = doubled_.find(b.get()); it != doubled_.end()) b = it->second;
    return out;
  }

 protected:
  Stmt visit_For(const For* op, const Stmt& self) override {
    const int stages = pipeline_stages(op->for_kind);
    if (stages == 0) return StmtMutator::visit_For(op, self);
    const std::string loop = op->variable()->name;
    auto fail = [&](const std::string& why) {
      LOOM_USER_FAIL("loom.lower.E428")
          << "GPU kernel '" << kernel_ << "': loop '" << loop << "' is pipelined (shared "
          << "memory in " << stages << " slots), but " << why;
    };
    if (target_.compute_capability() < 80)
      fail("asynchronous copies need sm_80 or later; the target is " + target_.to_string());
    if (!uniform(op->min) || !uniform(op->extent)) fail("its bounds depend on the thread index");
    if (in_pipeline_) fail("it lies inside another pipelined loop");
    // Local arrays of the loop body stay around it; the fetches do not use them.
    std::vector<Buffer> locals;
    Stmt body = op->body;
    while (auto* a = body.as<Allocate>()) {
      locals.push_back(a->buffer);
      body = a->body;
    }
    std::vector<Stmt> stmts;
    if (auto* b = body.as<Block>())
      stmts = b->stmts;
    else
      stmts = {body};
    size_t i = 0;
    if (i < stmts.size() && stmts[i].as<Barrier>()) ++i;
    std::vector<Stmt> fetch;
    std::unordered_set<const BufferNode*> fetched;
    for (; i < stmts.size() && !stmts[i].as<Barrier>(); ++i) {
      const buffer_use all = uses_of(stmts[i], false), in_shared = uses_of(stmts[i], true);
      bool global_reads = true;
      for (const BufferNode* r : all.reads)
        global_reads = global_reads && r->scope == MemoryScope::Global;
      if (!global_reads || in_shared.writes.empty() || all.writes != in_shared.writes ||
          has_barrier(stmts[i]))
        fail(
            "its body does not start with copies from global memory into shared memory (a "
            "shared stage computed at the loop), followed by the code that reads them");
      fetched.insert(in_shared.writes.begin(), in_shared.writes.end());
      fetch.push_back(stmts[i]);
    }
    if (fetch.empty() || i == stmts.size())
      fail("nothing in its body reads shared memory fetched at the loop");
    std::vector<Stmt> rest(stmts.begin() + static_cast<std::ptrdiff_t>(i) + 1, stmts.end());
    const buffer_use rest_use = uses_of(Block::make(rest), true);
    for (const BufferNode* b : fetched)
      if (rest_use.writes.count(b))
        fail("the code after the fetches writes shared array '" + b->name + "'");

    // `stages` slots per fetched array, each a multiple of 16 bytes so that vector copies into
    // every slot stay aligned.
    const Expr v = op->var;
    const Expr slot =
        FloorMod::make(is_const_int(op->min, 0) ? v : v - op->min, Expr(int64_t{stages}));
    buffer_moves slots;
    for (const BufferNode* b : fetched) {
      const int64_t per16 = std::max<int64_t>(1, 16 / b->dtype.bytes());
      const int64_t n = (b->num_elements() + per16 - 1) / per16 * per16;
      Buffer twin = make_buffer(b->name, b->dtype, {stages * n}, MemoryScope::Shared);
      doubled_[b] = twin;
      slots[b] = {twin, slot * Expr(n)};
    }
    const Stmt fetch_here = move_buffers(Block::make(fetch), slots);
    const Expr end = simplify(op->min + op->extent);
    // The group that fetches iteration `at`'s tiles, empty past the loop's end.
    auto fetch_group = [&](const Expr& at) {
      const Expr inside = simplify(at < end);
      const Stmt copies = substitute(fetch_here, {{op->variable(), at}});
      if (is_const_int(inside, 1)) return CopyAsync::make(copies);
      if (is_const_int(inside, 0)) return CopyAsync::make(Block::make({}));
      return CopyAsync::make(IfThenElse::make(inside, copies));
    };
    std::vector<Stmt> prologue = {Barrier::make()};
    for (int k = 0; k + 1 < stages; ++k)
      prologue.push_back(fetch_group(simplify(op->min + Expr(int64_t{k}))));
    in_pipeline_ = true;
    Stmt computed = mutate(move_buffers(Block::make(rest), slots));
    in_pipeline_ = false;
    Stmt loop_body = Block::make(
        {Barrier::make(true, stages - 2), fetch_group(v + Expr(int64_t{stages - 1})), computed});
    for (auto it = locals.rbegin(); it != locals.rend(); ++it)
      loop_body = Allocate::make(*it, loop_body);
    prologue.push_back(For::make(op->var, op->min, op->extent, ForKind::Serial, loop_body));
    return Block::make(std::move(prologue));
  }

 private:
  bool uniform(const Expr& e) const { return detail::uniform(e, tidx_); }

  const std::string& kernel_;
  const Target& target_;
  std::array<Expr, 3> tidx_;
  std::vector<Buffer>& shared_;
  std::unordered_map<const BufferNode*, Buffer> doubled_;
  bool in_pipeline_ = false;
};

// Calls f on every tensorized loop of `s`.
template <class F>
void for_each_tensorized(const Stmt& s, F&& f) {
  struct finder : StmtVisitor {
    F* f;
    using StmtVisitor::visit;
    void visit(const Expr&) override {}
    void visit_For(const For* op) override {
      if (op->for_kind == ForKind::Tensorized)
        (*f)(*op);
      else
        StmtVisitor::visit_For(op);
    }
  } v;
  v.f = &f;
  v.visit(s);
}

// Every thread-bound loop's extent, as the largest per dimension.
inline std::array<int64_t, 3> block_shape(const std::string& kernel, const Stmt& s) {
  std::array<int64_t, 3> block{1, 1, 1};
  struct collector : StmtVisitor {
    std::array<int64_t, 3>* block;
    const std::string* kernel;
    using StmtVisitor::visit;
    void visit(const Expr&) override {}
    void visit_For(const For* op) override {
      if (is_thread_loop(op->for_kind) || op->for_kind == ForKind::VThread) {
        const int64_t* e = as_const_int(op->extent);
        LOOM_USER_CHECK(e != nullptr, "loom.lower.E423")
            << "GPU kernel '" << *kernel << "': loop '" << op->variable()->name << "' is bound "
            << "to " << for_kind_name(op->for_kind) << " but its extent " << op->extent
            << " is not a constant";
        if (is_thread_loop(op->for_kind)) {
          int64_t& b = (*block)[gpu_dim(op->for_kind)];
          b = std::max(b, *e);
        }
      }
      StmtVisitor::visit_For(op);
    }
  } c;
  c.block = &block;
  c.kernel = &kernel;
  c.visit(s);
  return block;
}

inline GpuKernel make_kernel(const Stmt& root, const std::string& name, const Target& target,
                             const std::vector<Buffer>& args,
                             const std::vector<Buffer>& workspaces) {
  GpuKernel k;
  k.name = name;
  k.min_blocks_per_sm = target.min_blocks_per_sm;
  for (int d = 0; d < 3; ++d) {
    k.block_index[d] = Variable::make(std::string("blockIdx.") + dim_letter(d));
    k.thread_index[d] = Variable::make(std::string("threadIdx.") + dim_letter(d));
  }
  // The block loops: the outermost loops of the root stage.
  Stmt s = root;
  std::unordered_map<const Variable*, Expr> block_sub;
  std::vector<std::pair<const Variable*, int64_t>> block_vars;
  std::array<bool, 3> bound{false, false, false};
  while (auto* f = s.as<For>()) {
    if (!is_block_loop(f->for_kind)) break;
    const int d = gpu_dim(f->for_kind);
    const int64_t* e = as_const_int(f->extent);
    LOOM_USER_CHECK(!bound[d] && e, "loom.lower.E423")
        << "GPU kernel '" << name << "': loop '" << f->variable()->name << "' is bound to "
        << for_kind_name(f->for_kind)
        << (bound[d] ? ", which an outer loop is bound to already" : " with a non-constant extent");
    bound[d] = true;
    k.grid[d] = *e;
    block_sub[f->variable()] =
        is_const_int(f->min, 0) ? k.block_index[d] : f->min + k.block_index[d];
    block_vars.emplace_back(k.block_index[d].as<Variable>(), *e);
    s = f->body;
  }
  s = substitute(s, block_sub);
  k.block = block_shape(name, s);
  checker(name, k.block, block_vars).visit(s);
  binder b(name, k.thread_index, k.block);
  Stmt body = b.mutate(s);
  k.shared = std::move(b.shared);
  k.body = sync_planner(name, k.thread_index).run(body);
  k.body = pipeliner(name, target, k.thread_index, k.shared).run(k.body);
  LOOM_USER_CHECK(k.threads_per_block() <= target.max_threads_per_block && k.block[0] <= 1024 &&
                      k.block[1] <= 1024 && k.block[2] <= 64,
                  "loom.lower.E425")
      << "GPU kernel '" << name << "' needs a block of " << k.block[0] << " x " << k.block[1]
      << " x " << k.block[2] << " threads; " << target.to_string() << " allows at most "
      << target.max_threads_per_block << " per block (x, y <= 1024, z <= 64)";
  for_each_tensorized(k.body, [&](const For& f) {
    const MmaTile t = match_mma(f, k.thread_index[0], k.block[0], name);
    LOOM_USER_CHECK(!t.is_tf32() || target.tf32, "loom.lower.E427")
        << "GPU kernel '" << name << "': loop '" << f.variable()->name
        << "' is a tensor-core tile of float32 operands, which run as TF32 (10-bit mantissas); "
        << target.to_string() << " does not allow TF32 (Target::with_tf32() does)";
  });

  if (target.warpgroup_mma()) {
    k.warpgroup_mma = true;
    struct finder : StmtVisitor {
      GpuKernel* k;
      using StmtVisitor::visit;
      void visit(const Expr&) override {}
      void visit_For(const For* op) override {
        std::optional<WgmmaNest> w = kernel_wgmma(*k, *op);
        if (!w) return StmtVisitor::visit_For(op);
        for (const Buffer& b : {w->a.buffer, w->b.buffer})
          if (std::none_of(k->wgmma_operands.begin(), k->wgmma_operands.end(),
                           [&](const Buffer& x) { return x.get() == b.get(); }))
            k->wgmma_operands.push_back(b);
      }
    } f;
    f.k = &k;
    f.visit(k.body);
  }
  LOOM_USER_CHECK(k.shared_bytes() <= target.max_shared_memory_per_block, "loom.lower.E425")
      << "GPU kernel '" << name << "' needs " << k.shared_bytes() << " bytes of shared memory "
      << "per block; " << target.to_string() << " allows " << target.max_shared_memory_per_block;
  LOOM_USER_CHECK(k.grid[0] <= 2147483647 && k.grid[1] <= 65535 && k.grid[2] <= 65535,
                  "loom.lower.E425")
      << "GPU kernel '" << name << "' needs a grid of " << k.grid[0] << " x " << k.grid[1] << " x "
      << k.grid[2] << " blocks; CUDA allows x < 2^31, y and z <= 65535";

  const buffer_use used = uses_of(k.body, false);
  auto used_here = [&](const Buffer& x) {
    return used.reads.count(x.get()) || used.writes.count(x.get());
  };
  for (const Buffer& a : args)
    if (used_here(a)) k.params.push_back(a);
  for (const Buffer& w : workspaces)
    if (used_here(w)) k.params.push_back(w);
  return k;
}

// The emulation of one kernel (see emulation_func).
class emulation_builder {
 public:
  explicit emulation_builder(const GpuKernel& k) : k_(k) {}

  Stmt build() {
    Stmt body = rewrite(defer_copies(expand_mma(expand_all_reduce(k_.body))));
    if (!late_.empty()) body = Block::make({start_late_copies(), body});
    for (auto it = k_.shared.rbegin(); it != k_.shared.rend(); ++it)
      body = Allocate::make(*it, body);
    for (auto it = staging_.rbegin(); it != staging_.rend(); ++it) body = Allocate::make(*it, body);
    for (int d = 0; d < 3; ++d)
      body =
          For::make(k_.block_index[d], Expr(int64_t{0}), Expr(k_.grid[d]), ForKind::Serial, body);
    return body;
  }

 private:
  Stmt all_threads(const Stmt& s) const {
    Stmt body = s;
    for (int d = 0; d < 3; ++d)
      body =
          For::make(k_.thread_index[d], Expr(int64_t{0}), Expr(k_.block[d]), ForKind::Serial, body);
    return body;
  }

  Stmt rewrite(const Stmt& s) {
    if (!has_barrier(s)) return all_threads(s);
    if (auto* b = s.as<Block>()) {
      std::vector<Stmt> out, run;
      auto flush = [&] {
        if (!run.empty()) out.push_back(all_threads(Block::make(run)));
        run.clear();
      };
      for (const Stmt& c : b->stmts) {
        if (auto* barrier = c.as<Barrier>()) {
          flush();
          if (barrier->wait_async) out.push_back(land_copies(barrier->pending_groups));
        } else if (has_barrier(c)) {
          flush();
          out.push_back(rewrite(c));
        } else {
          run.push_back(c);
        }
      }
      flush();
      return Block::make(std::move(out));
    }
    if (auto* f = s.as<For>())
      return For::make(f->var, f->min, f->extent, ForKind::Serial, rewrite(f->body));
    if (auto* i = s.as<IfThenElse>())
      return IfThenElse::make(i->condition, rewrite(i->then_case),
                              i->else_case.defined() ? rewrite(i->else_case) : Stmt());
    if (auto* a = s.as<Allocate>()) return per_thread(a);
    if (auto* barrier = s.as<Barrier>())
      return barrier->wait_async ? land_copies(barrier->pending_groups) : Block::make({});
    return all_threads(s);
  }

  // The linear index of the thread whose threadIdx.x is `x` and whose y and z are this
  // thread's (by default: this thread).
  Expr linear_thread(const Expr& x) const {
    const std::array<Expr, 3>& t = k_.thread_index;
    return x + Expr(k_.block[0]) * (t[1] + Expr(k_.block[1]) * t[2]);
  }
  Expr linear_thread() const { return linear_thread(k_.thread_index[0]); }

  // Asynchronous copies land as late as the program allows, so that a wait for too few groups
  // (or none) shows up as a read of poison or of a stale tile, and their destinations hold
  // poison from the start of the copy, so that a copy into an element still being read shows up
  // too. A CopyAsync's stores into shared array A write poison into A and the value into
  // A.inflight, with the thread's count of committed groups (A.group, -1: nothing in flight)
  // and the thread (A.copier); the count (.groups, per thread) goes up by one after the body.
  struct late_array {
    Buffer inflight, group, copier, poison;
  };

  Stmt defer_copies(const Stmt& s) {
    struct rewriter : StmtMutator {
      emulation_builder* self;
      bool in_copy = false;
      Stmt visit_CopyAsync(const CopyAsync* op, const Stmt&) override {
        in_copy = true;
        Stmt body = mutate(op->body);
        in_copy = false;
        const Buffer& groups = self->thread_groups();
        const Expr tid = self->linear_thread();
        return Block::make(
            {body, Store::make(groups, tid, Load::make(groups, tid) + Expr(int64_t{1}))});
      }
      Stmt visit_Store(const Store* op, const Stmt& st) override {
        if (!in_copy || op->buffer->scope != MemoryScope::Shared || op->index.dtype().lanes != 1)
          return st;
        const late_array l = self->late_array_of(op->buffer);
        const Expr tid = self->linear_thread();
        return Block::make(
            {Store::make(op->buffer, op->index, Load::make(l.poison, Expr(int64_t{0}))),
             Store::make(l.inflight, op->index, op->value),
             Store::make(l.group, op->index, Load::make(self->thread_groups(), tid)),
             Store::make(l.copier, op->index, tid)});
      }
    } r;
    r.self = this;
    return r.mutate(s);
  }

  const Buffer& thread_groups() {
    if (!groups_) {
      groups_ = make_buffer(k_.name + ".copy_groups", DType::index(), {k_.threads_per_block()},
                            MemoryScope::Shared);
      staging_.push_back(groups_);
    }
    return groups_;
  }

  late_array late_array_of(const Buffer& b) {
    for (const auto& [buffer, l] : late_)
      if (buffer.get() == b.get()) return l;
    auto array = [&](const char* what, DType t, int64_t n) {
      Buffer x = make_buffer(b->name + what, t, {n}, MemoryScope::Shared);
      staging_.push_back(x);
      return x;
    };
    const int64_t n = b->num_elements();
    late_.emplace_back(
        b, late_array{array(".inflight", b->dtype, n), array(".group", DType::index(), n),
                      array(".copier", DType::index(), n), array(".poison", b->dtype, 1)});
    return late_.back().second;
  }

  // At the start of each block: no thread has committed a group, nothing is in flight.
  Stmt start_late_copies() {
    const Expr zero(int64_t{0});
    std::vector<Stmt> init;
    Expr t = Variable::make(k_.name + ".thread");
    init.push_back(For::make(t, zero, Expr(k_.threads_per_block()), ForKind::Serial,
                             Store::make(thread_groups(), t, zero)));
    for (const auto& [buffer, l] : late_) {
      Expr e = Variable::make(buffer->name + ".element");
      // A copier for every element: the landing condition reads it before it knows the group.
      init.push_back(For::make(e, zero, Expr(buffer->num_elements()), ForKind::Serial,
                               Block::make({Store::make(l.group, e, Expr(int64_t{-1})),
                                            Store::make(l.copier, e, zero)})));
    }
    return Block::make(std::move(init));
  }

  // After every thread has reached a barrier that waits for all but its last `pending` groups:
  // the copies of the older groups land.
  Stmt land_copies(int pending) {
    const Expr zero(int64_t{0});
    std::vector<Stmt> land;
    for (const auto& [buffer, l] : late_) {
      Expr e = Variable::make(buffer->name + ".element");
      const Expr group = Load::make(l.group, e);
      const Expr done =
          group >= zero &&
          group < Load::make(thread_groups(), Load::make(l.copier, e)) - Expr(int64_t{pending});
      land.push_back(For::make(
          e, zero, Expr(buffer->num_elements()), ForKind::Serial,
          IfThenElse::make(done, Block::make({Store::make(buffer, e, Load::make(l.inflight, e)),
                                              Store::make(l.group, e, Expr(int64_t{-1}))}))));
    }
    return Block::make(std::move(land));
  }

  // The reference meaning of AllReduce, in shared memory and barriers: each thread stores its
  // value, and after a barrier each combines the values of its row of threadIdx.x in order.
  Stmt expand_all_reduce(const Stmt& s) {
    struct expander : StmtMutator {
      emulation_builder* self;
      Stmt visit_AllReduce(const AllReduce* op, const Stmt&) override {
        const GpuKernel& k = self->k_;
        Buffer stage = make_buffer(op->buffer->name + ".staging", op->buffer->dtype,
                                   {k.threads_per_block()}, MemoryScope::Shared);
        self->staging_.push_back(stage);
        const Expr zero(int64_t{0});
        const std::array<Expr, 3>& t = k.thread_index;
        const Expr row = self->linear_thread(zero);
        Expr lane = Variable::make(op->buffer->name + ".lane");
        Stmt fold = For::make(lane, zero, Expr(k.block[0]), ForKind::Serial,
                              Store::make(op->buffer, zero,
                                          reduce_combine(op->op, Load::make(op->buffer, zero),
                                                         Load::make(stage, row + lane))));
        return Block::make(
            {Store::make(stage, row + t[0], Load::make(op->buffer, zero)), Barrier::make(),
             Store::make(op->buffer, zero, reduce_identity(op->op, op->buffer->dtype)), fold,
             Barrier::make()});
      }
    } e;
    e.self = this;
    return e.mutate(s);
  }

  // The reference meaning of a tensor-core tile, the hardware's exchange of fragments in shared
  // memory: each lane loads the A and B elements its registers hold (MmaTile's indices, which
  // is what the CUDA code loads) into its fragment arrays where the tile's nest loads them
  // (MmaNest), and at each instruction stores its slot's fragments and after a barrier adds to
  // each of its accumulators the products of the elements the other lanes hold, in the order of
  // the tile's loop. A wrong register index or slot shows up here as a wrong result, as it would
  // on the device.
  Stmt expand_mma(const Stmt& s) {
    struct expander : StmtMutator {
      emulation_builder* self;
      Stmt visit_For(const For* op, const Stmt& st) override {
        const GpuKernel& k = self->k_;
        if (auto w = kernel_wgmma(k, *op)) return self->wgmma(*w);
        if (auto nest = match_mma_nest(*op, k.thread_index[0], k.block[0], k.name))
          return self->mma_nest(*nest);
        return StmtMutator::visit_For(op, st);
      }
    } e;
    e.self = this;
    return e.mutate(s);
  }

  Stmt mma_nest(const MmaNest& nest) {
    const MmaTile& t = nest.tile;
    const Buffer fa = make_buffer(t.c->name + ".fragments_a", DType::f32(), {nest.a.slots * 8},
                                  MemoryScope::Local);
    const Buffer fb = make_buffer(t.c->name + ".fragments_b", DType::f32(), {nest.b.slots * 4},
                                  MemoryScope::Local);
    auto loads = [&](const MmaNest::Fragments& fr, bool a) {
      Stmt body = fragment_loads(t, a, a ? fa : fb, fr);
      if (fr.pair_row.defined()) {  // a load for every other value, two slots each
        const For* l = nest.loops[static_cast<size_t>(fr.pair_loop)];
        body = IfThenElse::make(
            EQ::make(FloorMod::make(l->var - l->min, Expr(int64_t{2})), Expr(int64_t{0})), body);
      }
      for (size_t i = fr.over.size(); i-- > 0;) {
        const For* l = nest.loops[static_cast<size_t>(fr.over[i])];
        body = For::make(l->var, l->min, l->extent, ForKind::Serial, body);
      }
      return body;
    };
    std::function<Stmt(size_t)> level = [&](size_t j) {
      std::vector<Stmt> seq;
      if (nest.a.depth == static_cast<int>(j)) seq.push_back(loads(nest.a, true));
      if (nest.b.depth == static_cast<int>(j)) seq.push_back(loads(nest.b, false));
      if (j == nest.loops.size()) {
        seq.push_back(mma_exchange(t, fa, nest.a.slot, fb, nest.b.slot));
      } else {
        const For* l = nest.loops[j];
        seq.push_back(For::make(l->var, l->min, l->extent, ForKind::Serial, level(j + 1)));
      }
      return Block::make(std::move(seq));
    };
    return Allocate::make(fa, Allocate::make(fb, level(0)));
  }

  // A warpgroup MMA as the device reads its operands: by the descriptors the CUDA code
  // builds (WgmmaOperand::descriptor_bits, decoded again), the start address being `start`.
  // Thread (warp w of its warpgroup, lane (g, t)) adds to register d[4 j + r] the products of
  // A's logical row 16 w + g + 8 (r / 2) and B's column 8 j + 2 t + r % 2 over the 16 k (8:
  // TF32, unrounded as the m16n8k8 emulation's), in
  // the nest's other loops. Its operands were written before the barrier that precedes it, so
  // a thread reads them without an exchange.
  Stmt wgmma(const WgmmaNest& w) {
    auto decoded = [](const WgmmaOperand& o) {
      WgmmaOperand d =
          WgmmaOperand::from_descriptor(o.descriptor_bits(), o.mn_major, o.element_bytes);
      d.buffer = o.buffer;
      d.start = o.start;
      return d;
    };
    const WgmmaOperand a = decoded(w.a), b = decoded(w.b);
    const MmaTile& t = w.nest.tile;
    const warp_lane l = this_lane();
    const Expr warp =
        FloorMod::make(FloorDiv::make(k_.thread_index[0], Expr(int64_t{32})), Expr(int64_t{4}));
    std::vector<Stmt> seq;
    for (int64_t i = 0; i < w.n / 2; ++i) {
      const int64_t j = i / 4, r = i % 4;
      const Expr row = warp * Expr(int64_t{16}) + l.g + Expr(int64_t{8 * (r / 2)});
      const Expr col = Expr(int64_t{8 * j}) + l.t2 + Expr(int64_t{r % 2});
      const Expr& c = w.accumulators[static_cast<size_t>(i)];
      Expr sum = Load::make(t.c, c);
      for (int64_t kk = 0; kk < t.k; ++kk)
        sum = sum + Cast::make(DType::f32(), Load::make(a.buffer, a.element(row, kk))) *
                        Cast::make(DType::f32(), Load::make(b.buffer, b.element(col, kk)));
      seq.push_back(Store::make(t.c, c, sum));
    }
    Stmt body = Block::make(std::move(seq));
    for (size_t i = w.nest.loops.size(); i-- > 0;) {
      if (static_cast<int>(i) == w.n_loop) continue;
      const For* f = w.nest.loops[i];
      body = For::make(f->var, f->min, f->extent, ForKind::Serial, body);
    }
    return body;
  }

  // This thread's lane in its warp, with the fragment layouts' g (lane / 4) and 2t (2 (lane % 4)).
  struct warp_lane {
    Expr lane, g, t2;
  };
  warp_lane this_lane() const {
    const Expr lane = FloorMod::make(k_.thread_index[0], Expr(int64_t{32}));
    return {lane, FloorDiv::make(lane, Expr(int64_t{4})),
            FloorMod::make(lane, Expr(int64_t{4})) * Expr(int64_t{2})};
  }

  // Register r, half h of the operand's fragment (`a`: A's 8 values, else B's 4) into slot
  // fr.slot of `fragments`, as float32. ldmatrix (MmaTile::a_row, b_row): register r, half h of
  // lane (g, t) is element 2t + h of the row lane 8r + g gives (A, and B along k; TF32: element
  // t, the lane's 32 bits of the 16-byte row), or element g of the row lane 8r + 2t + h gives
  // (B, transposed); the row addresses are the other lanes' expressions. B paired
  // (Fragments::pair_row): registers 2 and 3 of the .x4 load, from lanes 16-31's rows, are
  // slot + 1's 0 and 1.
  Stmt fragment_loads(const MmaTile& t, bool a, const Buffer& fragments,
                      const MmaNest::Fragments& fr) {
    const Expr& slot = fr.slot;
    const Expr& b_row = fr.pair_row.defined() ? fr.pair_row : t.b_row;
    const std::array<Expr, 3>& th = k_.thread_index;
    const Expr c32(int64_t{32});
    const int per_reg = t.per_register();
    const warp_lane w = this_lane();
    const Expr &lane = w.lane, &g = w.g, &t2 = w.t2;
    auto row_of_lane = [&](const Expr& row, const Expr& giver) {
      return substitute(row, {{th[0].as<Variable>(), FloorDiv::make(th[0], c32) * c32 + giver}});
    };
    auto as_stored = [&](const Buffer& b, const Expr& row, int r, int h) {
      const Expr element =
          per_reg == 2 ? t2 + Expr(int64_t{h}) : FloorMod::make(lane, Expr(int64_t{4}));
      return Load::make(b, row_of_lane(row, Expr(int64_t{8 * r}) + g) + element);
    };
    auto value = [&](int r, int h) -> Expr {
      if (a) {
        if (!t.a_row.defined()) return Load::make(t.a, t.a_index[r][h]);
        return as_stored(t.a, t.a_row, r, h);
      }
      if (!t.b_row.defined()) return Load::make(t.b, t.b_index[r][h]);
      if (!t.b_transposed) return as_stored(t.b, b_row, r, h);
      return Load::make(t.b, row_of_lane(b_row, Expr(int64_t{8 * r + h}) + t2) + g);
    };
    const int per_slot = a ? 8 : 4;
    const int registers = a || fr.pair_row.defined() ? 4 : 2;
    std::vector<Stmt> seq;
    for (int r = 0; r < registers; ++r)
      for (int h = 0; h < per_reg; ++h)
        seq.push_back(Store::make(fragments,
                                  slot * Expr(int64_t{per_slot}) + Expr(int64_t{r * 2 + h}),
                                  Cast::make(DType::f32(), value(r, h))));
    return Block::make(std::move(seq));
  }

  Stmt mma_exchange(const MmaTile& t, const Buffer& fa, const Expr& slot_a, const Buffer& fb,
                    const Expr& slot_b) {
    const GpuKernel& k = k_;
    auto staging = [&](const char* what, int per_lane) {
      Buffer b = make_buffer(t.c->name + what, DType::f32(), {k.threads_per_block() * per_lane},
                             MemoryScope::Shared);
      staging_.push_back(b);
      return b;
    };
    Buffer sa = staging(".mma_a", 8), sb = staging(".mma_b", 4);
    const int per_reg = t.per_register();
    const std::array<Expr, 3>& th = k.thread_index;
    const Expr c32(int64_t{32});
    // The linear index of the thread at lane `lane` of this thread's warp.
    auto thread_at = [&](const Expr& lane) {
      return linear_thread(th[0] - FloorMod::make(th[0], c32) + lane);
    };
    const warp_lane w = this_lane();
    const Expr &lane = w.lane, &g = w.g, &t2 = w.t2;
    const Expr own = thread_at(lane);
    std::vector<Stmt> seq;
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < per_reg; ++h)
        seq.push_back(
            Store::make(sa, own * Expr(int64_t{8}) + Expr(int64_t{r * 2 + h}),
                        Load::make(fa, slot_a * Expr(int64_t{8}) + Expr(int64_t{r * 2 + h}))));
    for (int r = 0; r < 2; ++r)
      for (int h = 0; h < per_reg; ++h)
        seq.push_back(
            Store::make(sb, own * Expr(int64_t{4}) + Expr(int64_t{r * 2 + h}),
                        Load::make(fb, slot_b * Expr(int64_t{4}) + Expr(int64_t{r * 2 + h}))));
    seq.push_back(Barrier::make());
    // Accumulator reg of lane (g, t) holds C's (g + 8 (reg / 2), 2t + reg % 2) (MmaTile::
    // c_element). With p elements a register (2 for 16-bit operands, 1 for TF32) and s = 4p
    // (the k one register of the 4 lanes of a row spans), A's (row, kk) is in lane (row % 8,
    // kk % s / p), register row / 8 + 2 (kk / s), half kk % p; B's (kk, col) in lane (col,
    // kk % s / p), register kk / s, half kk % p (the inverses of a_element and b_element,
    // tf32_a_element and tf32_b_element).
    const int span = 4 * per_reg;
    for (int kk = 0; kk < t.k; ++kk)
      for (int reg = 0; reg < 4; ++reg) {
        const Expr col = t2 + Expr(int64_t{reg & 1});
        const int a_reg = (reg >> 1) + 2 * (kk / span), b_reg = kk / span, half = kk % per_reg;
        const Expr a_lane = g * Expr(int64_t{4}) + Expr(int64_t{kk % span / per_reg});
        const Expr b_lane = col * Expr(int64_t{4}) + Expr(int64_t{kk % span / per_reg});
        const Expr a =
            Load::make(sa, thread_at(a_lane) * Expr(int64_t{8}) + Expr(int64_t{a_reg * 2 + half}));
        const Expr b =
            Load::make(sb, thread_at(b_lane) * Expr(int64_t{4}) + Expr(int64_t{b_reg * 2 + half}));
        seq.push_back(Store::make(t.c, t.c_index[reg], Load::make(t.c, t.c_index[reg]) + a * b));
      }
    seq.push_back(Barrier::make());
    return Block::make(std::move(seq));
  }

  // A thread's array that lives across a barrier: one copy per thread, side by side.
  Stmt per_thread(const Allocate* a) {
    const int64_t n = a->buffer->num_elements();
    Buffer copies = make_buffer(a->buffer->name, a->buffer->dtype, {n * k_.threads_per_block()},
                                a->buffer->scope);
    const Expr tid = linear_thread();
    return Allocate::make(
        copies, rewrite(move_buffers(a->body, {{a->buffer.get(), {copies, tid * Expr(n)}}})));
  }

  const GpuKernel& k_;
  std::vector<Buffer> staging_;
  Buffer groups_;
  std::vector<std::pair<Buffer, late_array>> late_;
};

// Shared memory the kernel's AllReduces use, for the widest type reduced.
inline int64_t all_reduce_scratch_bytes(const GpuKernel& k) {
  int bytes = 0;
  struct finder : StmtVisitor {
    int* bytes;
    using StmtVisitor::visit;
    void visit(const Expr&) override {}
    void visit_AllReduce(const AllReduce* op) override {
      *bytes = std::max(*bytes, op->buffer->dtype.bytes());
    }
  } f;
  f.bytes = &bytes;
  f.visit(k.body);
  return bytes * all_reduce_scratch_elements(k.block);
}

}  // namespace detail

LOOM_DECL int64_t all_reduce_scratch_elements(const std::array<int64_t, 3>& block) {
  const int64_t x = block[0], rows = block[1] * block[2];
  if (x <= 32 && (x & (x - 1)) == 0) return 0;
  if (x % 32 == 0) return x / 32 * rows;
  return x * rows;
}

LOOM_DECL int64_t GpuKernel::shared_bytes() const {
  int64_t bytes = 0;
  for (const ir::Buffer& b : shared) bytes += b->num_elements() * b->dtype.bytes();
  // Each array a warpgroup MMA reads starts at a multiple of 1024 bytes: at most 1008 bytes of
  // padding before it, and before the first (the CUDA printer's layout).
  if (!wgmma_operands.empty()) bytes += 1024 * static_cast<int64_t>(wgmma_operands.size() + 1);
  return bytes + detail::all_reduce_scratch_bytes(*this);
}

LOOM_DECL std::optional<WgmmaNest> kernel_wgmma(const GpuKernel& k, const ir::For& f) {
  if (!k.warpgroup_mma) return std::nullopt;
  std::optional<MmaNest> nest = match_mma_nest(f, k.thread_index[0], k.block[0], k.name);
  if (!nest) return std::nullopt;
  return match_wgmma(*nest, k.thread_index[0], k.block[0]);
}

LOOM_DECL std::vector<ir::Buffer> GpuKernel::written_params() const {
  const detail::buffer_use used = detail::uses_of(body, false);
  std::vector<ir::Buffer> out;
  for (const ir::Buffer& p : params)
    if (used.writes.count(p.get())) out.push_back(p);
  return out;
}

LOOM_DECL LowerOptions gpu_lower_options() {
  LowerOptions o;
  o.unroll = false;
  o.vectorize = false;
  o.partition = false;
  return o;
}

LOOM_DECL GpuProgram make_gpu_program(const ir::LoweredFunc& f, const Target& target) {
  using namespace ir;
  GpuProgram p;
  p.name = f.name;
  p.args = f.args;
  Stmt s = f.body;
  while (auto* a = s.as<Allocate>()) {
    p.workspaces.push_back(a->buffer);
    s = a->body;
  }
  std::vector<Stmt> roots;
  if (auto* b = s.as<Block>())
    roots = b->stmts;
  else if (s.defined())
    roots = {s};
  for (size_t i = 0; i < roots.size(); ++i)
    p.kernels.push_back(detail::make_kernel(roots[i], f.name + "_kernel" + std::to_string(i),
                                            target, p.args, p.workspaces));
  return p;
}

LOOM_DECL GpuProgram lower_gpu(const sched::State& state, const Target& target,
                               const std::string& name) {
  LOOM_USER_CHECK(target.is_cuda(), "loom.lower.E426")
      << "lower_gpu: target '" << target.to_string() << "' is not a GPU; use lower()";
  return make_gpu_program(lower(state, name, gpu_lower_options()), target);
}

LOOM_DECL ir::LoweredFunc emulation_func(const GpuProgram& program) {
  using namespace ir;
  std::vector<Stmt> kernels;
  for (const GpuKernel& k : program.kernels)
    kernels.push_back(detail::emulation_builder(k).build());
  Stmt body = Block::make(std::move(kernels));
  for (auto it = program.workspaces.rbegin(); it != program.workspaces.rend(); ++it)
    body = Allocate::make(*it, body);
  return LoweredFunc{program.name + "_emulated", program.args, body};
}

LOOM_DECL void emulate(const GpuProgram& program, const std::vector<void*>& args) {
  interpret(emulation_func(program), args);
}

LOOM_DECL std::ostream& operator<<(std::ostream& os, const GpuProgram& program) {
  os << "gpu program " << program.name << ": " << program.kernels.size() << " kernel(s)";
  for (const ir::Buffer& w : program.workspaces)
    os << ", workspace " << w->name << " (" << w->num_elements() << " elements)";
  os << '\n';
  for (const GpuKernel& k : program.kernels) {
    os << "kernel " << k.name << " grid(" << k.grid[0] << ", " << k.grid[1] << ", " << k.grid[2]
       << ") block(" << k.block[0] << ", " << k.block[1] << ", " << k.block[2] << ")";
    for (const ir::Buffer& b : k.shared)
      os << " shared " << b->name << '[' << b->num_elements() << ']';
    os << '\n' << k.body;
  }
  return os;
}

}  // namespace lower
LOOM_END_NAMESPACE
