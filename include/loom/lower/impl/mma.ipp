// Body of loom/lower/mma.hpp: recognising a tensor-core tile and the registers of its lanes.
#include "loom/lower/mma.hpp"

#include "loom/detail/int_math.hpp"
#include "loom/error.hpp"
#include "loom/ir/equal_hash.hpp"
#include "loom/ir/printer.hpp"
#include "loom/ir/simplify.hpp"
#include "loom/ir/visitor.hpp"
#include "loom/sched/steps.hpp"

#include <algorithm>
#include <optional>
#include <random>
#include <sstream>
#include <unordered_map>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace lower {

namespace detail {

using namespace ir;

// `Cast(float32, Load(buf, i))` of a 16-bit float: the load; otherwise null.
inline const Load* widened_operand(const Expr& e) {
  auto* c = e.as<Cast>();
  if (!c || c->dtype != DType::f32()) return nullptr;
  auto* l = c->value.as<Load>();
  if (!l) return nullptr;
  return l->buffer->dtype.is_16bit_float() ? l : nullptr;
}

// `Load(buf, i)` of a float32: the load (a TF32 operand); otherwise null.
inline const Load* float32_operand(const Expr& e) {
  auto* l = e.as<Load>();
  return l && l->buffer->dtype == DType::f32() ? l : nullptr;
}

using Bindings = std::unordered_map<const Variable*, Expr>;
using Values = std::unordered_map<const Variable*, int64_t>;

// An index expression's value with every variable bound (the integer arithmetic lowering makes
// of indices); none for anything else. Evaluates thousands of lane positions in the time the
// simplifier folds a few.
inline std::optional<int64_t> eval_index(const Expr& e, const Values& v) {
  auto both = [&](const Expr& a, const Expr& b) -> std::optional<std::pair<int64_t, int64_t>> {
    auto x = eval_index(a, v), y = eval_index(b, v);
    if (!x || !y) return std::nullopt;
    return std::pair{*x, *y};
  };
  switch (e.kind()) {
    case NodeKind::IntImm: return e.as<IntImm>()->value;
    case NodeKind::Variable: {
      auto it = v.find(e.as<Variable>());
      if (it == v.end()) return std::nullopt;
      return it->second;
    }
    case NodeKind::Cast:
      if (!e.dtype().is_integral()) return std::nullopt;
      return eval_index(e.as<Cast>()->value, v);
    case NodeKind::Add:
      if (auto p = both(e.as<Add>()->a, e.as<Add>()->b)) return p->first + p->second;
      return std::nullopt;
    case NodeKind::Sub:
      if (auto p = both(e.as<Sub>()->a, e.as<Sub>()->b)) return p->first - p->second;
      return std::nullopt;
    case NodeKind::Mul:
      if (auto p = both(e.as<Mul>()->a, e.as<Mul>()->b)) return p->first * p->second;
      return std::nullopt;
    case NodeKind::FloorDiv:
      if (auto p = both(e.as<FloorDiv>()->a, e.as<FloorDiv>()->b); p && p->second != 0)
        return ::loom::detail::floor_div(p->first, p->second);
      return std::nullopt;
    case NodeKind::FloorMod:
      if (auto p = both(e.as<FloorMod>()->a, e.as<FloorMod>()->b); p && p->second != 0)
        return ::loom::detail::floor_mod(p->first, p->second);
      return std::nullopt;
    case NodeKind::Min:
      if (auto p = both(e.as<Min>()->a, e.as<Min>()->b)) return std::min(p->first, p->second);
      return std::nullopt;
    case NodeKind::Max:
      if (auto p = both(e.as<Max>()->a, e.as<Max>()->b)) return std::max(p->first, p->second);
      return std::nullopt;
    case NodeKind::BitXor:
      if (auto p = both(e.as<BitXor>()->a, e.as<BitXor>()->b)) return p->first ^ p->second;
      return std::nullopt;
    default: return std::nullopt;
  }
}

class mma_matcher {
 public:
  mma_matcher(const For& loop, const Expr& tx, int64_t block_x, const std::string& kernel)
      : loop_(loop), tx_(tx), block_x_(block_x), kernel_(kernel) {}

  MmaTile run() {
    check(block_x_ % 32 == 0, [&](std::ostream& os) {
      os << "the block is " << block_x_ << " threads wide in x, not a whole number of warps";
    });
    k_ = loop_.variable();
    // Two loops of 2 inside it, then one store.
    const For* outer = loop_.body.as<For>();
    const For* inner = outer ? outer->body.as<For>() : nullptr;
    const Store* st = inner ? inner->body.as<Store>() : nullptr;
    check(outer && inner && st && is_two(*outer) && is_two(*inner), [&](std::ostream& os) {
      os << "its body is not two loops of 2 iterations around one store:\n" << loop_.body;
    });
    store_ = st;
    c_ = st->buffer;
    // A stage computed inside the thread loops without a scope of its own (a product fused
    // into its element-wise consumer) is labelled global but is each thread's array: the
    // kernel checker refuses a global store whose index ignores the thread unless it is.
    check(c_->scope != MemoryScope::Shared && c_->dtype == DType::f32(), [&](std::ostream& os) {
      os << "it accumulates into '" << c_->name << "' (" << sched::scope_name(c_->scope) << ' '
         << c_->dtype << "); the accumulator is a thread's own float32 array";
    });
    // The block's x extent: TensorCoreTilingGpu binds threadIdx.x only (a hand schedule that
    // also binds y or z gets a limit too high).
    check(c_->num_elements() <= mma_accumulator_limit(block_x_), [&](std::ostream& os) {
      os << "its accumulator '" << c_->name << "' holds " << c_->num_elements()
         << " elements per thread; at most " << mma_accumulator_limit(block_x_)
         << " stay in registers beside the fragments in a block of " << block_x_ << " threads";
    });
    // C = C + float(A) * float(B), in either order.
    const Expr cur = Load::make(c_, st->index);
    Expr product;
    if (auto* add = st->value.as<Add>()) {
      if (structural_equal(add->a, cur)) product = add->b;
      if (structural_equal(add->b, cur)) product = add->a;
    }
    auto* mul = product.defined() ? product.as<Mul>() : nullptr;
    const Load* x = mul ? widened_operand(mul->a) : nullptr;
    const Load* y = mul ? widened_operand(mul->b) : nullptr;
    if (mul && !x && !y) {
      x = float32_operand(mul->a);
      y = float32_operand(mul->b);
    }
    check(x && y && x->buffer->dtype == y->buffer->dtype, [&](std::ostream& os) {
      os << "its store is not C = C + float(A) * float(B) with A and B of one 16-bit float "
         << "type, nor C = C + A * B of float32 operands (TF32): " << Stmt(st);
    });
    const bool tf32 = x->buffer->dtype == DType::f32();
    k_extent_ = tf32 ? 8 : 16;
    check(is_const_int(loop_.min, 0) && is_const_int(loop_.extent, k_extent_),
          [&](std::ostream& os) {
            os << "the tensorized loop runs " << loop_.extent << " iterations from " << loop_.min
               << "; the reduction of an " << (tf32 ? "m16n8k8 (TF32)" : "m16n8k16")
               << " tile runs " << k_extent_ << " from 0";
          });
    // h is the loop A's index uses, q the one B's uses.
    const Variable* u = outer->variable();
    const Variable* v = inner->variable();
    if (uses_var(x->index, v) && !uses_var(x->index, u)) std::swap(x, y);
    check(uses_var(x->index, u) != uses_var(x->index, v) &&
              uses_var(y->index, v) != uses_var(y->index, u) && uses_var(x->index, u) &&
              uses_var(y->index, v),
          [&](std::ostream& os) {
            os << "each operand must use exactly one of the loops '" << u->name << "' and '"
               << v->name << "' (the rows of A, the columns of B): " << Stmt(st);
          });
    h_ = u;
    q_ = v;
    a_ = x;
    b_ = y;
    check_lanes();

    MmaTile t;
    t.operand = a_->buffer->dtype;
    t.k = static_cast<int>(k_extent_);
    t.a = a_->buffer;
    t.b = b_->buffer;
    t.c = c_;
    const Expr lane_t = FloorMod::make(tx_, Expr(int64_t{4}));
    const Expr lane_g = FloorMod::make(FloorDiv::make(tx_, Expr(int64_t{4})), Expr(int64_t{8}));
    // B's column g is the one lane (*, g / 2) reads for its q = g % 2.
    const Expr b_lane = FloorDiv::make(tx_, Expr(int64_t{4})) * Expr(int64_t{4}) +
                        FloorDiv::make(lane_g, Expr(int64_t{2}));
    // Lane (g, t)'s A register r holds (g + 8 (r % 2), pt + half + 4p (r / 2)), its B register
    // r (pt + half + 4pr, g), with p elements a register (2 for 16-bit operands, half 0 and 1;
    // 1 for TF32): a_element and b_element, tf32_a_element and tf32_b_element.
    const int p = t.per_register();
    for (int r = 0; r < 4; ++r)
      for (int half = 0; half < p; ++half)
        t.a_index[r][half] = simplify(substitute(
            a_->index, {{k_, lane_t * Expr(int64_t{p}) + Expr(int64_t{half + 4 * p * (r >> 1)})},
                        {h_, Expr(int64_t{r & 1})}}));
    for (int r = 0; r < 2; ++r)
      for (int half = 0; half < p; ++half)
        t.b_index[r][half] = simplify(substitute(
            b_->index, {{k_, lane_t * Expr(int64_t{p}) + Expr(int64_t{half + 4 * p * r})},
                        {q_, FloorMod::make(lane_g, Expr(int64_t{2}))},
                        {tx_.as<Variable>(), b_lane}}));
    for (int r = 0; r < 4; ++r)
      t.c_index[r] = simplify(
          substitute(st->index, {{h_, Expr(int64_t{r >> 1})}, {q_, Expr(int64_t{r & 1})}}));
    t.a_row = ldmatrix_rows_a(tf32 ? 4 : 8);
    // TF32's B would need its 32-bit elements split by ldmatrix's transpose.
    if (!tf32) t.b_row = ldmatrix_rows_b_transposed();
    t.b_transposed = t.b_row.defined();
    if (!t.b_transposed) t.b_row = ldmatrix_rows_b_along_k(tf32 ? 4 : 8);
    return t;
  }

 private:
  static bool is_two(const For& f) { return is_const_int(f.min, 0) && is_const_int(f.extent, 2); }

  template <class Say>
  void check(bool ok, Say&& say) const {
    if (ok) return;
    std::ostringstream os;
    say(os);
    LOOM_USER_FAIL("loom.lower.E427")
        << "GPU kernel '" << kernel_ << "': loop '" << loop_.variable()->name
        << "' is tensorized but is not a tensor-core tile (m16n8k16, or m16n8k8 for TF32): "
        << os.str();
  }

  int64_t at(const Expr& e, const Values& values) const {
    if (std::optional<int64_t> x = eval_index(e, values)) return *x;
    // A node eval_index does not know: the simplifier folds it.
    Bindings bound;
    for (const auto& [var, value] : values) bound[var] = Expr(value);
    const Expr v = simplify(substitute(e, bound));
    const int64_t* c = as_const_int(v);
    LOOM_INTERNAL_CHECK(c) << "index " << e << " did not evaluate to a constant: " << v;
    return *c;
  }

  // The lane conditions of mma.hpp, at sampled values of every variable.
  void check_lanes() {
    std::vector<const Variable*> others;
    auto collect = [&](const Expr& e) {
      for (const Variable* x : free_vars(e))
        if (x != k_ && x != h_ && x != q_ && x != tx_.as<Variable>() &&
            std::find(others.begin(), others.end(), x) == others.end())
          others.push_back(x);
    };
    const Expr& c_index = store_->index;
    collect(a_->index);
    collect(b_->index);
    collect(c_index);
    std::mt19937 rng(20261128);
    auto pick = [&](int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(rng); };
    const Variable* tx = tx_.as<Variable>();
    for (int sample = 0; sample < 24; ++sample) {
      Values base;
      for (const Variable* x : others) base[x] = pick(4);
      const int64_t thread = pick(block_x_), k = pick(k_extent_), h = pick(2), q = pick(2);
      auto with = [&](int64_t th, int64_t kk, int64_t hh, int64_t qq) {
        Values b = base;
        b[tx] = th;
        b[k_] = kk;
        b[h_] = hh;
        b[q_] = qq;
        return b;
      };
      const Values here = with(thread, k, h, q);
      const int64_t a0 = at(a_->index, here), b0 = at(b_->index, here), c0 = at(c_index, here);
      for (int64_t bit : {1, 2}) {
        check(at(a_->index, with(thread ^ bit, k, h, q)) == a0, [&](std::ostream& os) {
          os << "A's index " << a_->index << " changes with bits 0-1 of the lane (thread " << thread
             << " and " << (thread ^ bit) << "), which select B's columns";
        });
      }
      check(at(a_->index, with(thread, k, h, q ^ 1)) == a0, [&](std::ostream& os) {
        os << "A's index " << a_->index << " changes with loop '" << q_->name << "'";
      });
      for (int64_t bit : {4, 8, 16}) {
        check(at(b_->index, with(thread ^ bit, k, h, q)) == b0, [&](std::ostream& os) {
          os << "B's index " << b_->index << " changes with bits 2-4 of the lane (thread " << thread
             << " and " << (thread ^ bit) << "), which select A's rows";
        });
      }
      check(at(b_->index, with(thread, k, h ^ 1, q)) == b0, [&](std::ostream& os) {
        os << "B's index " << b_->index << " changes with loop '" << h_->name << "'";
      });
      const int64_t other_lane = thread ^ (1 + pick(31));
      check(at(c_index, with(thread, (k + 1 + pick(k_extent_ - 1)) % k_extent_, h, q)) == c0 &&
                at(c_index, with(other_lane, k, h, q)) == c0,
            [&](std::ostream& os) {
              os << "the accumulator's index " << c_index << " changes with the reduction loop "
                 << "or the thread";
            });
      std::vector<int64_t> cells;
      for (int r = 0; r < 4; ++r) cells.push_back(at(c_index, with(thread, k, r >> 1, r & 1)));
      std::sort(cells.begin(), cells.end());
      check(std::adjacent_find(cells.begin(), cells.end()) == cells.end(), [&](std::ostream& os) {
        os << "the accumulator's index " << c_index << " is the same for two (h, q) pairs";
      });
    }
  }

  // The thread index of lane 0 of `x`'s warp, in the form the simplifier sees through (a
  // multiple of 32).
  static Expr warp_base(const Expr& x) {
    return FloorDiv::make(x, Expr(int64_t{32})) * Expr(int64_t{32});
  }

  // ldmatrix's rows (mma.hpp, MmaTile::a_row): lane l gives row i = l % 8 of quarter j = l / 8,
  // logical A row i + 8 (j % 2) from column w (j / 2), where a 16-byte row holds w elements (8
  // 16-bit ones, 4 TF32 ones): A's index for the lane with g = i at h = j % 2, k = w (j / 2).
  // Undefined unless each such row is w consecutive elements starting at a multiple of w.
  Expr ldmatrix_rows_a(int64_t w) const {
    if (a_->buffer->scope != MemoryScope::Shared) return Expr();
    const Expr j = FloorDiv::make(FloorMod::make(tx_, Expr(int64_t{32})), Expr(int64_t{8}));
    const Expr row = simplify(substitute(
        a_->index, {{k_, FloorDiv::make(j, Expr(int64_t{2})) * Expr(w)},
                    {h_, FloorMod::make(j, Expr(int64_t{2}))},
                    {tx_.as<Variable>(),
                     warp_base(tx_) + FloorMod::make(tx_, Expr(int64_t{8})) * Expr(int64_t{4})}}));
    const bool rows_fit = contiguous_rows(*a_, row, 32, w, [&](int64_t wb, int64_t l, int64_t c) {
      return Values{
          {tx_.as<Variable>(), wb + 4 * (l % 8)}, {k_, w * (l / 16) + c}, {h_, (l / 8) % 2}};
    });
    return rows_fit ? row : Expr();
  }

  // For B, lane l gives row i = l % 8 of quarter j = (l / 8) % 2: logical k = 8 j + i, columns
  // 0..7 (column n is what the lane with t = n / 2 reads at q = n % 2).
  Expr ldmatrix_rows_b_transposed() const {
    if (b_->buffer->scope != MemoryScope::Shared) return Expr();
    const Expr lane = FloorMod::make(tx_, Expr(int64_t{32}));
    const Expr k = FloorMod::make(FloorDiv::make(lane, Expr(int64_t{8})), Expr(int64_t{2})) *
                       Expr(int64_t{8}) +
                   FloorMod::make(lane, Expr(int64_t{8}));
    const Expr row = simplify(substitute(
        b_->index, {{k_, k}, {q_, Expr(int64_t{0})}, {tx_.as<Variable>(), warp_base(tx_)}}));
    const bool rows_fit = contiguous_rows(*b_, row, 16, 8, [&](int64_t wb, int64_t l, int64_t c) {
      return Values{{tx_.as<Variable>(), wb + c / 2}, {q_, c % 2}, {k_, l}};
    });
    return rows_fit ? row : Expr();
  }

  // B stored along k (a matmul with B transposed, [N, K]): lane l gives row i = l % 8 of
  // quarter j = (l / 8) % 2, logical column i (what the lane with t = i / 2 reads at q = i % 2)
  // from k = w j, where a 16-byte row holds w elements (8 16-bit ones, 4 TF32 ones).
  Expr ldmatrix_rows_b_along_k(int64_t w) const {
    if (b_->buffer->scope != MemoryScope::Shared) return Expr();
    const Expr lane = FloorMod::make(tx_, Expr(int64_t{32}));
    const Expr i = FloorMod::make(lane, Expr(int64_t{8}));
    const Expr j = FloorMod::make(FloorDiv::make(lane, Expr(int64_t{8})), Expr(int64_t{2}));
    const Expr row = simplify(substitute(
        b_->index, {{k_, j * Expr(w)},
                    {q_, FloorMod::make(i, Expr(int64_t{2}))},
                    {tx_.as<Variable>(), warp_base(tx_) + FloorDiv::make(i, Expr(int64_t{2}))}}));
    const bool rows_fit = contiguous_rows(*b_, row, 16, w, [&](int64_t wb, int64_t l, int64_t c) {
      return Values{
          {tx_.as<Variable>(), wb + l % 8 / 2}, {q_, l % 8 % 2}, {k_, w * (l / 8 % 2) + c}};
    });
    return rows_fit ? row : Expr();
  }

  // Whether `row` (an index in the thread index and the loops around the tile) is, for lanes
  // 0..lanes-1 of a few warps and values of the other variables, the element that `element(warp
  // base, lane, c)` binds the operand's index to, minus c, for c = 0..width-1; and a proven
  // multiple of `width` (the elements of 16 bytes).
  template <class Element>
  bool contiguous_rows(const Load& operand, const Expr& row, int64_t lanes, int64_t width,
                       Element&& element) const {
    if (!row.defined() || known_divisor(row) % width != 0) return false;
    std::vector<const Variable*> others;
    for (const Expr& e : {operand.index, row})
      for (const Variable* x : free_vars(e))
        if (x != k_ && x != h_ && x != q_ && x != tx_.as<Variable>() &&
            std::find(others.begin(), others.end(), x) == others.end())
          others.push_back(x);
    std::mt19937 rng(20261129);
    auto pick = [&](int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(rng); };
    for (int sample = 0; sample < 4; ++sample) {
      Values base;
      for (const Variable* x : others) base[x] = pick(4);
      const int64_t wb = 32 * pick(block_x_ / 32);
      for (int64_t l = 0; l < lanes; ++l) {
        auto at_row = base;
        at_row[tx_.as<Variable>()] = wb + l;
        const std::optional<int64_t> start = eval_index(row, at_row);
        if (!start) return false;
        for (int64_t c = 0; c < width; ++c) {
          auto b = base;
          for (auto& [v, e] : element(wb, l, c)) b[v] = e;
          if (eval_index(operand.index, b) != *start + c) return false;
        }
      }
    }
    return true;
  }

  const For& loop_;
  Expr tx_;
  int64_t block_x_;
  const std::string& kernel_;
  const Variable* k_ = nullptr;
  int64_t k_extent_ = 16;
  const Variable* h_ = nullptr;
  const Variable* q_ = nullptr;
  const Load* a_ = nullptr;
  const Load* b_ = nullptr;
  const Store* store_ = nullptr;
  Buffer c_;
};

}  // namespace detail

LOOM_DECL std::string MmaTile::instruction() const {
  if (is_tf32()) return "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32";
  const char* t = operand.is_bfloat() ? "bf16" : "f16";
  return std::string("mma.sync.aligned.m16n8k16.row.col.f32.") + t + '.' + t + ".f32";
}

LOOM_DECL std::array<int, 2> MmaTile::a_element(int lane, int reg, int half) {
  return {lane / 4 + 8 * (reg & 1), 2 * (lane % 4) + half + 8 * (reg >> 1)};
}
LOOM_DECL std::array<int, 2> MmaTile::b_element(int lane, int reg, int half) {
  return {2 * (lane % 4) + half + 8 * reg, lane / 4};
}
LOOM_DECL std::array<int, 2> MmaTile::c_element(int lane, int reg) {
  return {lane / 4 + 8 * (reg >> 1), 2 * (lane % 4) + (reg & 1)};
}
LOOM_DECL std::array<int, 2> MmaTile::tf32_a_element(int lane, int reg) {
  return {lane / 4 + 8 * (reg & 1), lane % 4 + 4 * (reg >> 1)};
}
LOOM_DECL std::array<int, 2> MmaTile::tf32_b_element(int lane, int reg) {
  return {lane % 4 + 4 * reg, lane / 4};
}

LOOM_DECL MmaTile match_mma(const ir::For& loop, const ir::Expr& thread_x, int64_t block_x,
                            const std::string& kernel) {
  return detail::mma_matcher(loop, thread_x, block_x, kernel).run();
}

LOOM_DECL std::optional<MmaNest> match_mma_nest(const ir::For& head, const ir::Expr& thread_x,
                                                int64_t block_x, const std::string& kernel) {
  using namespace ir;
  MmaNest nest;
  const For* f = &head;
  while (f->for_kind != ForKind::Tensorized) {
    if ((f->for_kind != ForKind::Serial && f->for_kind != ForKind::Unrolled) ||
        !as_const_int(f->min) || !as_const_int(f->extent))
      return std::nullopt;
    nest.loops.push_back(f);
    const Stmt* body = &f->body;
    while (auto* b = body->as<Block>()) {
      if (b->stmts.size() != 1) return std::nullopt;
      body = &b->stmts[0];
    }
    f = body->as<For>();
    if (!f) return std::nullopt;
  }
  nest.tile = match_mma(*f, thread_x, block_x, kernel);
  const MmaTile& t = nest.tile;
  // The expressions a lane's fragment of each operand is loaded from.
  std::vector<Expr> a_reads, b_reads;
  if (t.a_row.defined())
    a_reads.push_back(t.a_row);
  else
    for (const auto& r : t.a_index) a_reads.insert(a_reads.end(), r.begin(), r.end());
  if (t.b_row.defined())
    b_reads.push_back(t.b_row);
  else
    for (const auto& r : t.b_index) b_reads.insert(b_reads.end(), r.begin(), r.end());
  const int n = static_cast<int>(nest.loops.size());
  // What the lane's registers leave for fragments (at least one of each, 6: the accumulator
  // limit keeps that much).
  const int64_t budget = mma_register_share(block_x) - t.c->num_elements() - mma_other_registers;
  auto plan = [&](const std::vector<Expr>& reads, int64_t registers, int64_t cap) {
    std::vector<bool> moves(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j)
      for (const Expr& e : reads)
        if (e.defined() && uses_var(e, nest.loops[static_cast<size_t>(j)]->variable()))
          moves[static_cast<size_t>(j)] = true;
    int depth = 0;
    while (depth < n && moves[static_cast<size_t>(depth)]) ++depth;
    for (;; ++depth) {
      MmaNest::Fragments fr;
      fr.depth = depth;
      Expr slot(int64_t{0});
      for (int j = n - 1; j >= depth; --j) {
        if (!moves[static_cast<size_t>(j)]) continue;
        const For* l = nest.loops[static_cast<size_t>(j)];
        const int64_t min = *as_const_int(l->min), extent = *as_const_int(l->extent);
        Expr v = l->var;
        if (min != 0) v = v - Expr(min);
        slot = slot + v * Expr(fr.slots);
        fr.slots *= extent;
        fr.over.insert(fr.over.begin(), j);
      }
      if (fr.slots * registers <= cap || depth == n) {
        fr.slot = simplify(slot);
        return fr;
      }
    }
  };
  nest.a = plan(a_reads, 4, std::min(max_fragment_cache_registers, budget - 2));
  const int64_t b_cap = std::min(max_fragment_cache_registers, budget - 4 * nest.a.slots);
  nest.b = plan(b_reads, 2, b_cap);
  // B loaded inside the innermost loop it moves with (an even one) is kept across that loop
  // instead where it fits, or else loaded at every other value of it into two slots: the same
  // loads, two a ldmatrix.x4.
  MmaNest::Fragments& b = nest.b;
  if (t.b_row.defined() && b.over.empty() && b.depth > 0) {
    const For* l = nest.loops[static_cast<size_t>(b.depth - 1)];
    const int64_t extent = *as_const_int(l->extent);
    if (extent % 2 == 0 && 4 <= b_cap && uses_var(t.b_row, l->variable())) {
      b.pair_loop = b.depth - 1;
      if (2 * extent <= b_cap) {
        b.over = {b.depth - 1};
        b.depth -= 1;
        b.slots = extent;
        b.slot = simplify(l->var - l->min);
      } else {
        b.slots = 2;
        b.slot = simplify(FloorMod::make(l->var - l->min, Expr(int64_t{2})));
      }
    }
  } else if (t.b_row.defined() && !b.over.empty() &&
             *as_const_int(nest.loops[static_cast<size_t>(b.over.back())]->extent) % 2 == 0) {
    b.pair_loop = b.over.back();
  }
  if (b.pair_loop >= 0) {
    const For* v = nest.loops[static_cast<size_t>(b.pair_loop)];
    const Expr half =
        FloorDiv::make(FloorMod::make(thread_x, Expr(int64_t{32})), Expr(int64_t{16}));
    b.pair_row = simplify(
        substitute(t.b_row, {{thread_x.as<Variable>(), thread_x - half * Expr(int64_t{16})},
                             {v->variable(), v->var + half}}));
  }
  return nest;
}

namespace detail {

// offset(mn, k) of WgmmaOperand for an integer or an expression mn (k is a constant).
inline int64_t floor_div_of(int64_t a, int64_t b) { return ::loom::detail::floor_div(a, b); }
inline int64_t floor_mod_of(int64_t a, int64_t b) { return ::loom::detail::floor_mod(a, b); }
inline ir::Expr floor_div_of(const ir::Expr& a, int64_t b) {
  return ir::FloorDiv::make(a, ir::Expr(b));
}
inline ir::Expr floor_mod_of(const ir::Expr& a, int64_t b) {
  return ir::FloorMod::make(a, ir::Expr(b));
}

template <class I>
I wgmma_offset(const WgmmaOperand& o, const I& mn, int64_t k) {
  const int64_t e = o.element_bytes, t = 16 / e;  // a 16-byte unit's elements
  auto c = [](int64_t v) { return I(v); };
  if (!o.mn_major) {
    if (o.swizzle > 0)
      return floor_mod_of(mn, 8) * c(o.swizzle) + floor_div_of(mn, 8) * c(o.sbo) + c(e * k);
    return floor_mod_of(mn, 8) * c(16) + floor_div_of(mn, 8) * c(o.sbo) +
           c(e * (k % t) + (k / t) * o.lbo);
  }
  if (o.swizzle > 0) {
    const int64_t w = o.swizzle / e;
    return floor_mod_of(mn, w) * c(e) + floor_div_of(mn, w) * c(o.lbo) +
           c((k % 8) * o.swizzle + (k / 8) * o.sbo);
  }
  return floor_mod_of(mn, 8) * c(e) + floor_div_of(mn, 8) * c(o.sbo) +
         c((k % 8) * 16 + (k / 8) * o.lbo);
}

// Finds the warpgroup MMA of an MmaNest (lower/mma.hpp, WgmmaNest).
class wgmma_matcher {
 public:
  wgmma_matcher(const MmaNest& nest, const Expr& tx, int64_t block_x)
      : nest_(nest), t_(nest.tile), tx_(tx.as<Variable>()), block_x_(block_x) {}

  std::optional<WgmmaNest> run() {
    if (block_x_ % 128 != 0 || t_.a->scope != MemoryScope::Shared ||
        t_.b->scope != MemoryScope::Shared)
      return std::nullopt;
    // A reads the same 64 x 16 tile for every step along N. (A TF32 register holds one
    // element: its second index is undefined.)
    auto uses = [](const auto& registers, const Variable* v) {
      for (const auto& r : registers)
        for (const Expr& e : r)
          if (e.defined() && uses_var(e, v)) return true;
      return false;
    };
    std::vector<int> candidates;
    for (int j = static_cast<int>(nest_.loops.size()); j-- > 0;) {
      const Variable* v = nest_.loops[static_cast<size_t>(j)]->variable();
      if (uses(t_.b_index, v) && !uses(t_.a_index, v)) candidates.push_back(j);
    }
    candidates.push_back(-1);
    for (int n_loop : candidates)
      if (auto w = try_loop(n_loop)) return w;
    return std::nullopt;
  }

 private:
  std::optional<WgmmaNest> try_loop(int n_loop) {
    const For* nl = n_loop >= 0 ? nest_.loops[static_cast<size_t>(n_loop)] : nullptr;
    const int64_t steps = nl ? *as_const_int(nl->extent) : 1;
    const int64_t n = 8 * steps;
    if (n > 256) return std::nullopt;
    const int64_t n_min = nl ? *as_const_int(nl->min) : 0;
    std::vector<const Variable*> others;
    auto collect = [&](const Expr& e) {
      if (!e.defined()) return;
      for (const Variable* x : free_vars(e))
        if (x != tx_ && std::find(others.begin(), others.end(), x) == others.end())
          others.push_back(x);
    };
    for (const auto& r : t_.a_index)
      for (const Expr& e : r) collect(e);
    for (const auto& r : t_.b_index)
      for (const Expr& e : r) collect(e);
    for (const Expr& e : t_.c_index) collect(e);
    std::unordered_map<const Variable*, std::pair<int64_t, int64_t>> ranges;  // min, extent
    for (const For* l : nest_.loops)
      ranges[l->variable()] = {*as_const_int(l->min), *as_const_int(l->extent)};
    std::mt19937 rng(20261130);
    auto pick = [&](int64_t k) { return std::uniform_int_distribution<int64_t>(0, k - 1)(rng); };
    const Variable* nv = nl ? nl->variable() : nullptr;
    const int64_t p = t_.per_register(), span = 4 * p, e = t_.is_tf32() ? 4 : 2;
    WgmmaNest w;
    w.n_loop = n_loop;
    w.n = n;
    std::optional<WgmmaOperand> a, b;
    for (int sample = 0; sample < 6; ++sample) {
      Values base;
      for (const Variable* x : others) {
        auto it = ranges.find(x);
        base[x] = it == ranges.end() ? pick(4) : it->second.first + pick(it->second.second);
      }
      const int64_t wb = 128 * pick(block_x_ / 128);
      // A's logical (row, k): warp row / 16, lane 4 (row % 8) + (k % s) / p, register
      // (row % 16) / 8 + 2 (k / s), half k % p, with p elements a register (2; TF32 1) and s =
      // 4 p (MmaTile::a_element and tf32_a_element inverted).
      auto a_at = [&](int64_t row, int64_t k) -> std::optional<int64_t> {
        Values v = base;
        v[tx_] = wb + 32 * (row / 16) + 4 * (row % 8) + (k % span) / p;
        if (nv) v[nv] = n_min;
        const int reg = static_cast<int>((row % 16) / 8 + 2 * (k / span));
        auto x = eval_index(t_.a_index[static_cast<size_t>(reg)][static_cast<size_t>(k % p)], v);
        if (x) *x *= e;
        return x;
      };
      // B's (n, k): step n / 8 of the N loop, lane 4 (n % 8) + (k % s) / p of any warp of the
      // warpgroup, register k / s, half k % p (MmaTile::b_element and tf32_b_element inverted).
      auto b_at = [&](int64_t col, int64_t k, int64_t warp) -> std::optional<int64_t> {
        Values v = base;
        v[tx_] = wb + 32 * warp + 4 * (col % 8) + (k % span) / p;
        if (nv) v[nv] = n_min + col / 8;
        auto x =
            eval_index(t_.b_index[static_cast<size_t>(k / span)][static_cast<size_t>(k % p)], v);
        if (x) *x *= e;
        return x;
      };
      if (sample == 0) {
        a = layout_of(64, e, [&](int64_t mn, int64_t k) { return a_at(mn, k); });
        b = layout_of(n, e, [&](int64_t mn, int64_t k) { return b_at(mn, k, 0); });
        if (!a || !b) return std::nullopt;
      }
      if (!verify(*a, 64, [&](int64_t mn, int64_t k) { return a_at(mn, k); }) ||
          !verify(*b, n, [&](int64_t mn, int64_t k) { return b_at(mn, k, pick(4)); }))
        return std::nullopt;
      // The registers d[0 ... n / 2): distinct elements of C.
      std::vector<int64_t> cells;
      Values v = base;
      v[tx_] = wb + pick(128);
      for (int64_t j = 0; j < steps; ++j) {
        if (nv) v[nv] = n_min + j;
        for (const Expr& c : t_.c_index) {
          auto x = eval_index(c, v);
          if (!x) return std::nullopt;
          cells.push_back(*x);
        }
      }
      std::sort(cells.begin(), cells.end());
      if (std::adjacent_find(cells.begin(), cells.end()) != cells.end()) return std::nullopt;
    }
    const Expr group_base = FloorDiv::make(Expr(tx_), Expr(int64_t{128})) * Expr(int64_t{128});
    auto start = [&](const Expr& index) {
      Bindings bind{{tx_, group_base}};
      if (nv) bind[nv] = Expr(n_min);
      return simplify(substitute(index, bind));
    };
    a->buffer = t_.a;
    a->start = start(t_.a_index[0][0]);
    b->buffer = t_.b;
    b->start = start(t_.b_index[0][0]);
    w.a = *a;
    w.b = *b;
    for (int64_t j = 0; j < steps; ++j)
      for (const Expr& c : t_.c_index)
        w.accumulators.push_back(nv ? simplify(substitute(c, {{nv, Expr(n_min + j)}})) : c);
    w.nest = nest_;
    return w;
  }

  // The descriptor layout that puts the operand's logical (0, 0) ... (16, k) where `at` says
  // (bytes; elements of `e` bytes), tried K-major then MN-major (16-bit only), each swizzled in
  // 128, 64, 32 bytes then interleaved; the first one whose own offsets hold there. The full
  // check is verify's.
  template <class At>
  std::optional<WgmmaOperand> layout_of(int64_t mn_extent, int64_t e, At&& at) const {
    const std::optional<int64_t> s0 = at(0, 0);
    if (!s0 || *s0 % 16 != 0) return std::nullopt;
    const int64_t start = *s0, unit = 16 / e;
    for (bool mn_major : {false, true})
      for (int64_t swizzle : {128, 64, 32, 0}) {
        if (mn_major && e != 2) continue;  // TF32 is K-major only
        WgmmaOperand o;
        o.element_bytes = e;
        o.mn_major = mn_major;
        o.swizzle = swizzle;
        auto off = [&](int64_t mn, int64_t k) -> std::optional<int64_t> {
          if (mn >= mn_extent) return std::nullopt;
          const std::optional<int64_t> p = at(mn, k);
          if (!p) return std::nullopt;
          return o.swizzled(*p) - start;
        };
        const int64_t w = swizzle > 0 ? swizzle / 2 : 8;
        std::optional<int64_t> lbo, sbo;
        if (!mn_major) {
          sbo = off(8, 0);
          lbo = swizzle > 0 ? std::optional<int64_t>(16) : off(0, unit);
        } else if (swizzle > 0) {
          lbo = mn_extent > w ? off(w, 0) : std::optional<int64_t>(16);
          sbo = off(0, 8);
        } else {
          sbo = off(8, 0);
          lbo = off(0, 8);
        }
        if (mn_extent <= 8 && !mn_major) sbo = sbo ? sbo : std::optional<int64_t>(16);
        if (!lbo || !sbo) continue;
        o.lbo = *lbo;
        o.sbo = *sbo;
        auto fits = [](int64_t x) { return x > 0 && x % 16 == 0 && x < (int64_t{1} << 18); };
        if (!fits(o.lbo) || !fits(o.sbo)) continue;
        bool ok = true;
        for (int64_t mn = 0; mn < std::min<int64_t>(mn_extent, 16) && ok; ++mn)
          for (int64_t k = 0; k < t_.k && ok; ++k) {
            const std::optional<int64_t> p = at(mn, k);
            ok = p && o.swizzled(start + o.offset(mn, k)) == *p;
          }
        if (ok) return o;
      }
    return std::nullopt;
  }

  template <class At>
  bool verify(const WgmmaOperand& o, int64_t mn_extent, At&& at) const {
    const std::optional<int64_t> s0 = at(0, 0);
    if (!s0 || *s0 % 16 != 0) return false;
    for (int64_t mn = 0; mn < mn_extent; ++mn)
      for (int64_t k = 0; k < t_.k; ++k) {
        const std::optional<int64_t> p = at(mn, k);
        if (!p || o.swizzled(*s0 + o.offset(mn, k)) != *p) return false;
      }
    return true;
  }

  const MmaNest& nest_;
  const MmaTile& t_;
  const Variable* tx_;
  int64_t block_x_;
};

}  // namespace detail

LOOM_DECL int64_t WgmmaOperand::offset(int64_t mn, int64_t k) const {
  return detail::wgmma_offset<int64_t>(*this, mn, k);
}

LOOM_DECL ir::Expr WgmmaOperand::element(const ir::Expr& mn, int64_t k) const {
  using namespace ir;
  const Expr e(element_bytes);
  const Expr byte = start * e + detail::wgmma_offset<Expr>(*this, mn, k);
  return FloorDiv::make(swizzled(byte), e);
}

LOOM_DECL int64_t WgmmaOperand::swizzled(int64_t byte) const {
  if (swizzle == 0) return byte;
  return byte ^ ((((byte >> 7) % (swizzle / 16)) << 4));
}

LOOM_DECL ir::Expr WgmmaOperand::swizzled(const ir::Expr& byte) const {
  using namespace ir;
  if (swizzle == 0) return byte;
  const Expr bits = FloorMod::make(FloorDiv::make(byte, Expr(int64_t{128})), Expr(swizzle / 16));
  return BitXor::make(byte, bits * Expr(int64_t{16}));
}

LOOM_DECL uint64_t WgmmaOperand::descriptor_bits() const {
  const uint64_t layout = swizzle == 128 ? 1 : swizzle == 64 ? 2 : swizzle == 32 ? 3 : 0;
  return ((static_cast<uint64_t>(lbo >> 4) & 0x3fff) << 16) |
         ((static_cast<uint64_t>(sbo >> 4) & 0x3fff) << 32) | (layout << 62);
}

LOOM_DECL WgmmaOperand WgmmaOperand::from_descriptor(uint64_t bits, bool mn_major,
                                                     int element_bytes) {
  WgmmaOperand o;
  o.mn_major = mn_major;
  o.element_bytes = element_bytes;
  o.lbo = static_cast<int64_t>((bits >> 16) & 0x3fff) << 4;
  o.sbo = static_cast<int64_t>((bits >> 32) & 0x3fff) << 4;
  const uint64_t layout = bits >> 62;
  o.swizzle = layout == 1 ? 128 : layout == 2 ? 64 : layout == 3 ? 32 : 0;
  return o;
}

LOOM_DECL std::string WgmmaNest::instruction() const {
  const std::string shape = "wgmma.mma_async.sync.aligned.m64n" + std::to_string(n);
  if (nest.tile.is_tf32()) return shape + "k8.f32.tf32.tf32";
  const char* t = nest.tile.operand.is_bfloat() ? "bf16" : "f16";
  return shape + "k16.f32." + t + '.' + t;
}

LOOM_DECL std::optional<WgmmaNest> match_wgmma(const MmaNest& nest, const ir::Expr& thread_x,
                                               int64_t block_x) {
  return detail::wgmma_matcher(nest, thread_x, block_x).run();
}

}  // namespace lower
LOOM_END_NAMESPACE
