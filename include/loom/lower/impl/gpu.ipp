// Bodies of loom/lower/gpu.hpp: kernels, thread binding, barriers, and the CPU emulation.
#include "loom/lower/gpu.hpp"

#include "loom/ir/printer.hpp"
#include "loom/lower/interpret.hpp"

#include <algorithm>
#include <ostream>
#include <unordered_map>
#include <unordered_set>

LOOM_BEGIN_NAMESPACE
namespace lower {

namespace detail_gpu {

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
      if (!only_shared || op->buffer->scope == MemoryScope::Shared) u->reads.insert(op->buffer.get());
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
    auto it = private_.find(b);
    if (it != private_.end()) {
      for (const For* t : threads_)
        LOOM_USER_CHECK(std::find(it->second.begin(), it->second.end(), t) != it->second.end(),
                        "loom.lower.E421")
            << "GPU kernel '" << kernel_ << "': '" << b->name << "' is a thread's own array, "
            << "allocated outside loop '" << t->variable()->name << "' (bound to "
            << for_kind_name(t->for_kind) << ") but written inside it: every thread would "
            << "fill only its part of its copy. Compute the stage inside that loop, or in "
            << "shared memory";
    } else {
      for (int d = 0; d < 3; ++d) {
        if (block_[d] <= 1) continue;
        const bool bound = std::any_of(threads_.begin(), threads_.end(), [&](const For* t) {
          return gpu_dim(t->for_kind) == d;
        });
        LOOM_USER_CHECK(bound, "loom.lower.E420")
            << "GPU kernel '" << kernel_ << "': '" << b->name << "' (" << sched::scope_name(b->scope)
            << " memory) is written outside the loops bound to threadIdx." << dim_letter(d)
            << ", so each of the block's " << block_[d] << " threads would write it; bind "
            << "the stage's loops to threadIdx";
      }
      auto distributes = [&](const Variable* v, const char* what) {
        LOOM_USER_CHECK(uses_var(op->index, v) ||
                            (!uses_var(op->value, v) && !reads_buffer(op->value, b)),
                        "loom.lower.E420")
            << "GPU kernel '" << kernel_ << "': the " << what << " loop '" << v->name
            << "' runs its iterations at once, but the write to '" << b->name
            << "' inside it does not depend on it while its value does (or it updates what "
            << "it reads): the " << what << "s would race. Reductions across threads need "
            << "a cross-thread reduction";
      };
      for (const For* t : threads_)
        if (!is_const_int(t->extent, 1)) distributes(t->variable(), "thread");
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
// and turns vthread loops into serial ones (vectorized ones into unrolled ones).
class binder : public StmtMutator {
 public:
  binder(const std::array<Expr, 3>& tidx, const std::array<int64_t, 3>& block)
      : tidx_(tidx), block_(block) {}
  std::vector<Buffer> shared;

 protected:
  Stmt visit_For(const For* op, const Stmt& self) override {
    if (is_thread_loop(op->for_kind)) {
      const int d = gpu_dim(op->for_kind);
      Expr idx = is_const_int(op->min, 0) ? tidx_[d] : op->min + tidx_[d];
      Stmt body = mutate(substitute(op->body, {{op->variable(), idx}}));
      const int64_t extent = *as_const_int(op->extent);
      if (extent < block_[d]) body = IfThenElse::make(tidx_[d] < Expr(extent), body);
      return body;
    }
    ForKind k = op->for_kind;
    if (k == ForKind::VThread) k = ForKind::Serial;
    if (k == ForKind::Vectorized) k = ForKind::Unrolled;
    Stmt body = mutate(op->body);
    if (k == op->for_kind && body.same_as(op->body)) return self;
    return For::make(op->var, op->min, op->extent, k, body);
  }
  Stmt visit_Allocate(const Allocate* op, const Stmt& self) override {
    Stmt body = mutate(op->body);
    if (op->buffer->scope == MemoryScope::Shared) {
      if (seen_.insert(op->buffer.get()).second) shared.push_back(op->buffer);
      return body;
    }
    return body.same_as(op->body) ? self : Allocate::make(op->buffer, body);
  }

 private:
  std::array<Expr, 3> tidx_;
  std::array<int64_t, 3> block_;
  std::unordered_set<const BufferNode*> seen_;
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

  bool uniform(const Expr& e) const {
    for (const Expr& t : tidx_)
      if (uses_var(e, t.as<Variable>())) return false;
    return true;
  }

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
  binder b(k.thread_index, k.block);
  Stmt body = b.mutate(s);
  k.shared = std::move(b.shared);
  k.body = sync_planner(name, k.thread_index).run(body);

  LOOM_USER_CHECK(k.threads_per_block() <= target.max_threads_per_block && k.block[0] <= 1024 &&
                      k.block[1] <= 1024 && k.block[2] <= 64,
                  "loom.lower.E425")
      << "GPU kernel '" << name << "' needs a block of " << k.block[0] << " x " << k.block[1]
      << " x " << k.block[2] << " threads; " << target.to_string() << " allows at most "
      << target.max_threads_per_block << " per block (x, y <= 1024, z <= 64)";
  LOOM_USER_CHECK(k.shared_bytes() <= target.max_shared_memory_per_block, "loom.lower.E425")
      << "GPU kernel '" << name << "' needs " << k.shared_bytes() << " bytes of shared memory "
      << "per block; " << target.to_string() << " allows "
      << target.max_shared_memory_per_block;
  LOOM_USER_CHECK(k.grid[0] <= 2147483647 && k.grid[1] <= 65535 && k.grid[2] <= 65535,
                  "loom.lower.E425")
      << "GPU kernel '" << name << "' needs a grid of " << k.grid[0] << " x " << k.grid[1]
      << " x " << k.grid[2] << " blocks; CUDA allows x < 2^31, y and z <= 65535";

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
    Stmt body = rewrite(k_.body);
    for (auto it = k_.shared.rbegin(); it != k_.shared.rend(); ++it) body = Allocate::make(*it, body);
    for (int d = 0; d < 3; ++d)
      body = For::make(k_.block_index[d], Expr(int64_t{0}), Expr(k_.grid[d]), ForKind::Serial, body);
    return body;
  }

 private:
  Stmt all_threads(const Stmt& s) const {
    Stmt body = s;
    for (int d = 0; d < 3; ++d)
      body = For::make(k_.thread_index[d], Expr(int64_t{0}), Expr(k_.block[d]), ForKind::Serial,
                       body);
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
        if (c.as<Barrier>()) {
          flush();
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
    if (auto* f = s.as<For>()) return For::make(f->var, f->min, f->extent, ForKind::Serial, rewrite(f->body));
    if (auto* i = s.as<IfThenElse>())
      return IfThenElse::make(i->condition, rewrite(i->then_case),
                              i->else_case.defined() ? rewrite(i->else_case) : Stmt());
    if (auto* a = s.as<Allocate>()) return per_thread(a);
    if (s.as<Barrier>()) return Block::make({});
    return all_threads(s);
  }

  // A thread's array that lives across a barrier: one copy per thread, side by side.
  Stmt per_thread(const Allocate* a) {
    const int64_t n = a->buffer->num_elements();
    Buffer copies = make_buffer(a->buffer->name, a->buffer->dtype, {n * k_.threads_per_block()},
                                a->buffer->scope);
    Expr tid = k_.thread_index[0] +
               Expr(k_.block[0]) * (k_.thread_index[1] + Expr(k_.block[1]) * k_.thread_index[2]);
    struct retarget : StmtMutator {
      const BufferNode* from;
      Buffer to;
      Expr offset;
      Expr shift(const Expr& index) {
        const int lanes = index.dtype().lanes;
        return index + (lanes == 1 ? offset : Broadcast::make(offset, lanes));
      }
      Expr visit_Load(const Load* op, const Expr& self) override {
        Expr i = mutate(op->index);
        if (op->buffer.get() != from) return i.same_as(op->index) ? self : Load::make(op->buffer, i);
        return Load::make(to, shift(i));
      }
      Stmt visit_Store(const Store* op, const Stmt& self) override {
        Expr i = mutate(op->index), v = mutate(op->value);
        if (op->buffer.get() != from)
          return i.same_as(op->index) && v.same_as(op->value) ? self : Store::make(op->buffer, i, v);
        return Store::make(to, shift(i), v);
      }
    } r;
    r.from = a->buffer.get();
    r.to = copies;
    r.offset = tid * Expr(n);
    return Allocate::make(copies, rewrite(r.mutate(a->body)));
  }

  const GpuKernel& k_;
};

}  // namespace detail_gpu

LOOM_DECL int64_t GpuKernel::shared_bytes() const {
  int64_t bytes = 0;
  for (const ir::Buffer& b : shared) bytes += b->num_elements() * b->dtype.bytes();
  return bytes;
}

LOOM_DECL std::vector<ir::Buffer> GpuKernel::written_params() const {
  const detail_gpu::buffer_use used = detail_gpu::uses_of(body, false);
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
    p.kernels.push_back(detail_gpu::make_kernel(roots[i], f.name + "_kernel" + std::to_string(i),
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
    kernels.push_back(detail_gpu::emulation_builder(k).build());
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
