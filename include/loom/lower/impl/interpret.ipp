// Bodies of loom/lower/interpret.hpp.
#include "loom/lower/interpret.hpp"

#include "loom/detail/int_math.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>

LOOM_BEGIN_NAMESPACE
namespace lower {
namespace detail {

/// One lane of a value: integers and bools in `i` (sign- or zero-extended), floats in `f`.
union scalar {
  int64_t i;
  double f;
};

inline scalar ival(int64_t v) {
  scalar r;
  r.i = v;
  return r;
}
inline scalar fval(double v) {
  scalar r;
  r.f = v;
  return r;
}

/// A buffer as the running kernel sees it: its elements and their count.
struct buffer_view {
  std::byte* data = nullptr;
  int64_t size = 0;
};

/// The mutable state of one run: loop variables and buffers, both indexed by slots that the
/// compiler assigned.
struct frame {
  std::vector<int64_t> vars;
  std::vector<buffer_view> bufs;
};

/// An expression evaluated at one lane (scalar expressions ignore the lane).
using expr_fn = std::function<scalar(frame&, int)>;
using stmt_fn = std::function<void(frame&)>;

/// An int64 index `base + lane_coeff * lane + sum(coeff[k] * vars[slot[k]])`, evaluated without
/// any closure call. Lowered index arithmetic is almost always of this form (`i * N + j`,
/// `Ramp(o * 8, 1, 8)`), and computing it modulo 2^64 gives exactly what wrapping int64
/// arithmetic on the original expression gives, since both are ring operations.
struct affine_index {
  static constexpr int max_terms = 4;
  uint64_t base = 0, lane_coeff = 0;
  int n = 0;
  int slot[max_terms] = {};
  uint64_t coeff[max_terms] = {};

  bool is_constant() const { return n == 0 && lane_coeff == 0; }
  int64_t operator()(const frame& f, int lane) const {
    uint64_t r = base + lane_coeff * static_cast<uint64_t>(lane);
    for (int k = 0; k < n; ++k) r += coeff[k] * static_cast<uint64_t>(f.vars[slot[k]]);
    return static_cast<int64_t>(r);
  }
};

/// `a + s * b`, or nothing when the result needs more than max_terms variables.
inline std::optional<affine_index> add_scaled(affine_index a, const affine_index& b, uint64_t s) {
  a.base += s * b.base;
  a.lane_coeff += s * b.lane_coeff;
  for (int k = 0; k < b.n; ++k) {
    int m = 0;
    while (m < a.n && a.slot[m] != b.slot[k]) ++m;
    if (m == a.n) {
      if (a.n == affine_index::max_terms) return std::nullopt;
      a.slot[a.n] = b.slot[k];
      a.coeff[a.n++] = 0;
    }
    a.coeff[m] += s * b.coeff[k];
  }
  return a;
}

inline affine_index scaled(affine_index a, uint64_t s) {
  a.base *= s;
  a.lane_coeff *= s;
  for (int k = 0; k < a.n; ++k) a.coeff[k] *= s;
  return a;
}

/// Any other index: a compiled expression.
struct general_index {
  expr_fn fn;
  int64_t operator()(frame& f, int lane) const { return fn(f, lane).i; }
};

/// The static context of an access, for error messages: the kernel and the enclosing loops.
struct site {
  std::string kernel;
  std::vector<std::pair<std::string, int>> loops;  ///< loop variable names and their slots
};
using site_ptr = std::shared_ptr<const site>;

inline std::string loop_values(const site& s, const frame& f) {
  if (s.loops.empty()) return "";
  std::ostringstream os;
  os << ", with ";
  for (size_t k = 0; k < s.loops.size(); ++k)
    os << (k ? ", " : "") << s.loops[k].first << " = " << f.vars[s.loops[k].second];
  return os.str();
}

[[noreturn, gnu::cold, gnu::noinline]] inline void fail_bounds(const site& s, const frame& f,
                                                               const char* verb,
                                                               const std::string& buffer,
                                                               int64_t index, int64_t size,
                                                               int lane, int lanes) {
  std::string lane_text;
  if (lanes > 1) lane_text = " in lane " + std::to_string(lane) + " of " + std::to_string(lanes);
  LOOM_USER_FAIL("loom.lower.E401") << "kernel '" << s.kernel << "' " << verb << " buffer '"
                                    << buffer << "' out of bounds at index " << index << " (size "
                                    << size << ")" << lane_text << loop_values(s, f);
  std::abort();  // not reached: LOOM_USER_FAIL throws
}

[[noreturn, gnu::cold, gnu::noinline]] inline void fail_div(const site& s, const frame& f) {
  LOOM_USER_FAIL("loom.lower.E402")
      << "integer division by zero in kernel '" << s.kernel << "'" << loop_values(s, f);
  std::abort();  // not reached: LOOM_USER_FAIL throws
}

/// Wraps to the width of an integer type: sign-extends Int, zero-extends UInt, 0/1 for Bool.
inline int64_t wrap(ir::DType t, int64_t v) {
  if (t.is_bool()) return v != 0;
  if (t.bits >= 64) return v;
  const uint64_t mask = (uint64_t{1} << t.bits) - 1;
  uint64_t u = static_cast<uint64_t>(v) & mask;
  if (t.is_int() && ((u >> (t.bits - 1)) & 1)) u |= ~mask;
  return static_cast<int64_t>(u);
}

inline double round_to(bool f32, double v) { return f32 ? static_cast<float>(v) : v; }

using ::loom::detail::floor_div;

/// float -> int64 truncating towards zero. C++ leaves NaN and out-of-range conversions undefined;
/// they give x86's "integer indefinite" value instead, so that poisoned NaNs convert reproducibly.
inline int64_t float_to_int(double x) {
  constexpr double limit = 9223372036854775808.0;  // 2^63
  if (!(x >= -limit && x < limit)) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(x);
}

template <class T>
struct type_tag {
  using type = T;
};

/// How an element of type T is held in memory: bools as one byte, read back as "non-zero", so
/// that a poisoned bool allocation is never an invalid `bool` object.
template <class T>
using storage_t = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

template <class T>
inline scalar read_elem(const std::byte* data, int64_t k) {
  const auto v = reinterpret_cast<const storage_t<T>*>(data)[k];
  if constexpr (is_half_v<T>)
    return fval(static_cast<double>(static_cast<float>(v)));
  else if constexpr (std::is_floating_point_v<T>)
    return fval(v);
  else if constexpr (std::is_same_v<T, bool>)
    return ival(v != 0);
  else
    return ival(static_cast<int64_t>(v));
}

template <class T>
inline void write_elem(std::byte* data, int64_t k, scalar v) {
  auto* p = reinterpret_cast<storage_t<T>*>(data) + k;
  if constexpr (is_half_v<T>)
    *p = T(static_cast<float>(v.f));
  else if constexpr (std::is_floating_point_v<T>)
    *p = static_cast<T>(v.f);
  else if constexpr (std::is_same_v<T, bool>)
    *p = v.i != 0;
  else
    *p = static_cast<T>(v.i);  // modular since C++20; the value was wrapped already
}

template <class T>
inline void poison_fill(std::byte* data, int64_t n) {
  if constexpr (is_half_v<T>)
    std::fill_n(reinterpret_cast<T*>(data), n, T(std::numeric_limits<float>::quiet_NaN()));
  else if constexpr (std::is_floating_point_v<T>)
    std::fill_n(reinterpret_cast<T*>(data), n, std::numeric_limits<T>::quiet_NaN());
  else
    std::memset(data, interpret_poison_byte, static_cast<size_t>(n) * sizeof(storage_t<T>));
}

/// Calls `f(type_tag<T>{})` with the C++ element type of `t`.
template <class F>
auto dispatch_elem(ir::DType t, const std::string& kernel, const std::string& buffer, F&& f) {
  using C = ir::DType::Code;
  switch (t.code) {
    case C::BFloat:
      if (t.bits == 16) return f(type_tag<bfloat16>{});
      break;
    case C::Float:
      if (t.bits == 16) return f(type_tag<float16>{});
      if (t.bits == 32) return f(type_tag<float>{});
      if (t.bits == 64) return f(type_tag<double>{});
      break;
    case C::Int:
      if (t.bits == 8) return f(type_tag<int8_t>{});
      if (t.bits == 16) return f(type_tag<int16_t>{});
      if (t.bits == 32) return f(type_tag<int32_t>{});
      if (t.bits == 64) return f(type_tag<int64_t>{});
      break;
    case C::UInt:
      if (t.bits == 8) return f(type_tag<uint8_t>{});
      if (t.bits == 16) return f(type_tag<uint16_t>{});
      if (t.bits == 32) return f(type_tag<uint32_t>{});
      if (t.bits == 64) return f(type_tag<uint64_t>{});
      break;
    case C::Bool: return f(type_tag<bool>{});
  }
  LOOM_USER_FAIL("loom.lower.E404") << "kernel '" << kernel << "' has buffer '" << buffer
                                    << "' of unsupported element type " << ir::to_string(t);
  return f(type_tag<float>{});  // not reached
}

/// An element-wise binary closure: `op(a, b)` lane by lane.
template <class Op>
expr_fn lift(expr_fn a, expr_fn b, Op op) {
  return [a = std::move(a), b = std::move(b), op](frame& f, int lane) {
    return op(a(f, lane), b(f, lane));
  };
}

/// Like lift, for integer division and modulo: a zero divisor is an error, not UB.
template <class Op>
expr_fn lift_div(expr_fn a, expr_fn b, site_ptr where, Op op) {
  return [a = std::move(a), b = std::move(b), where = std::move(where), op](frame& f, int lane) {
    const scalar x = a(f, lane), y = b(f, lane);
    if (y.i == 0) fail_div(*where, f);
    return op(x, y);
  };
}

/// A float intrinsic `g` (a generic lambda), computed in the precision of its type: float32 calls
/// the float overloads so that results match what generated code does.
template <class G>
expr_fn unary_math(expr_fn a, bool f32, G g) {
  if (f32)
    return [a = std::move(a), g](frame& f, int lane) {
      return fval(static_cast<double>(g(static_cast<float>(a(f, lane).f))));
    };
  return [a = std::move(a), g](frame& f, int lane) { return fval(g(a(f, lane).f)); };
}

// Compiles a kernel body into closures. Scoping is resolved here, once: every For binds a fresh
// variable slot and every Allocate a fresh buffer slot, so a closure never looks anything up by
// name or node at run time, and shadowing (a variable rebound by an inner loop) needs no saving.
class compiler {
 public:
  explicit compiler(std::string kernel) : kernel_(std::move(kernel)) {}

  int num_vars() const { return num_vars_; }
  int num_bufs() const { return num_bufs_; }

  void bind_argument(const ir::BufferNode* b) {
    LOOM_USER_CHECK(buf_scope_[b].empty(), "loom.lower.E404")
        << "kernel '" << kernel_ << "' lists buffer '" << b->name << "' twice among its arguments";
    buf_scope_[b].push_back(num_bufs_++);
  }

  stmt_fn compile(const ir::Stmt& s) {
    if (!s.defined()) return [](frame&) {};
    switch (s.kind()) {
      case ir::StmtKind::For: return compile_for(s.as<ir::For>());
      case ir::StmtKind::Store: return compile_store(s.as<ir::Store>());
      case ir::StmtKind::Allocate: return compile_allocate(s.as<ir::Allocate>());
      case ir::StmtKind::Block: {
        std::vector<stmt_fn> parts;
        for (auto& x : s.as<ir::Block>()->stmts) parts.push_back(compile(x));
        return [parts = std::move(parts)](frame& f) {
          for (auto& p : parts) p(f);
        };
      }
      case ir::StmtKind::IfThenElse: {
        auto* op = s.as<ir::IfThenElse>();
        expr_fn c = compile(op->condition);
        stmt_fn t = compile(op->then_case);
        if (!op->else_case.defined())
          return [c = std::move(c), t = std::move(t)](frame& f) {
            if (c(f, 0).i) t(f);
          };
        stmt_fn e = compile(op->else_case);
        return [c = std::move(c), t = std::move(t), e = std::move(e)](frame& f) {
          if (c(f, 0).i)
            t(f);
          else
            e(f);
        };
      }
      case ir::StmtKind::Barrier:
        // One thread at a time: every other thread has already run to the barrier.
        return [](frame&) {};
      case ir::StmtKind::CopyAsync:
        // The copies land at once: nothing reads them before the barrier that waits for them.
        return compile(s.as<ir::CopyAsync>()->body);
      case ir::StmtKind::AllReduce:
        // Its meaning needs every thread's value at once: emulation_func expands it.
        LOOM_INTERNAL_CHECK(false) << "the interpreter runs a GPU AllReduce only as lower::emulate "
                                   << "expands it";
    }
    return [](frame&) {};
  }

  expr_fn compile(const ir::Expr& e) {
    using K = ir::NodeKind;
    const ir::DType t = e.dtype().element_of();
    const K kind = e.kind();
    // Index arithmetic dominates lowered code. As an affine_index it costs one closure call
    // instead of one per node, which makes a matmul nest about four times faster.
    if (kind == K::Add || kind == K::Sub || kind == K::Mul || kind == K::Ramp ||
        kind == K::Broadcast) {
      if (auto a = affine_of(e)) return [a = *a](frame& f, int lane) { return ival(a(f, lane)); };
    }
    switch (kind) {
      case K::IntImm: {
        const scalar v = ival(e.as<ir::IntImm>()->value);
        return [v](frame&, int) { return v; };
      }
      case K::FloatImm: {
        const scalar v = fval(e.as<ir::FloatImm>()->value);
        return [v](frame&, int) { return v; };
      }
      case K::Variable: {
        auto* var = e.as<ir::Variable>();
        auto it = var_scope_.find(var);
        LOOM_USER_CHECK(it != var_scope_.end() && !it->second.empty(), "loom.lower.E404")
            << "kernel '" << kernel_ << "' uses variable '" << var->name
            << "' outside the loops that bind it";
        const int slot = it->second.back();
        return [slot](frame& f, int) { return ival(f.vars[slot]); };
      }
      case K::Cast: return compile_cast(e.as<ir::Cast>());
      case K::Not: {
        expr_fn a = compile(e.as<ir::Not>()->a);
        return [a = std::move(a)](frame& f, int lane) { return ival(!a(f, lane).i); };
      }
      case K::Select: {
        // Lane by lane, so a vector Select is as lazy as a scalar one: a lane whose condition is
        // false never evaluates (and never bounds-checks) the true branch.
        auto* op = e.as<ir::Select>();
        expr_fn c = compile(op->condition), x = compile(op->true_value),
                y = compile(op->false_value);
        return [c = std::move(c), x = std::move(x), y = std::move(y)](frame& f, int lane) {
          return c(f, lane).i ? x(f, lane) : y(f, lane);
        };
      }
      case K::Call: return compile_call(e.as<ir::Call>());
      case K::Load: return compile_load(e.as<ir::Load>());
      case K::Ramp: {
        auto* op = e.as<ir::Ramp>();
        expr_fn base = compile(op->base), stride = compile(op->stride);
        if (t.is_float()) {
          const bool f32 = t.bits == 32;
          return [base = std::move(base), stride = std::move(stride), f32](frame& f, int lane) {
            const double step = round_to(f32, stride(f, 0).f * lane);
            return fval(round_to(f32, base(f, 0).f + step));
          };
        }
        return [base = std::move(base), stride = std::move(stride), t](frame& f, int lane) {
          const auto b = static_cast<uint64_t>(base(f, 0).i);
          const auto s = static_cast<uint64_t>(stride(f, 0).i);
          return ival(wrap(t, static_cast<int64_t>(b + s * static_cast<uint64_t>(lane))));
        };
      }
      case K::Broadcast: {
        // The operands of Ramp and Broadcast are scalars: they are evaluated at lane 0.
        expr_fn v = compile(e.as<ir::Broadcast>()->value);
        return [v = std::move(v)](frame& f, int) { return v(f, 0); };
      }
      case K::TensorRead:
      case K::Reduce:
        LOOM_USER_FAIL("loom.lower.E404")
            << "kernel '" << kernel_ << "' contains a " << ir::node_kind_name(e.kind())
            << " node, which belongs to compute bodies and must be lowered first";
        return {};
      default: return compile_binary(e);
    }
  }

 private:
  /// The static context of an access at the current point of the walk (shared until the loop
  /// nesting changes).
  site_ptr current_site() {
    if (!site_) site_ = std::make_shared<const site>(site{kernel_, loops_});
    return site_;
  }

  /// `e` as an affine_index, when it is an int64 expression built from constants and bound loop
  /// variables with Add, Sub, Mul by a constant, Ramp with a constant stride and Broadcast.
  std::optional<affine_index> affine_of(const ir::Expr& e) {
    using K = ir::NodeKind;
    if (e.dtype().element_of() != ir::DType::index()) return std::nullopt;
    switch (e.kind()) {
      case K::IntImm: {
        affine_index r;
        r.base = static_cast<uint64_t>(e.as<ir::IntImm>()->value);
        return r;
      }
      case K::Variable: {
        auto it = var_scope_.find(e.as<ir::Variable>());
        if (it == var_scope_.end() || it->second.empty()) return std::nullopt;  // reported later
        affine_index r;
        r.n = 1;
        r.slot[0] = it->second.back();
        r.coeff[0] = 1;
        return r;
      }
      case K::Add:
      case K::Sub:
      case K::Mul: {
        auto [pa, pb] = ir::binary_operands(e);
        auto a = affine_of(*pa);
        if (!a) return std::nullopt;
        auto b = affine_of(*pb);
        if (!b) return std::nullopt;
        if (e.kind() == K::Add) return add_scaled(*a, *b, 1);
        if (e.kind() == K::Sub) return add_scaled(*a, *b, ~uint64_t{0});  // -1 modulo 2^64
        if (b->is_constant()) return scaled(*a, b->base);
        if (a->is_constant()) return scaled(*b, a->base);
        return std::nullopt;
      }
      case K::Ramp: {
        auto* r = e.as<ir::Ramp>();
        auto base = affine_of(r->base), stride = affine_of(r->stride);
        if (!base || !stride || !stride->is_constant()) return std::nullopt;
        base->lane_coeff = stride->base;
        return base;
      }
      case K::Broadcast: return affine_of(e.as<ir::Broadcast>()->value);
      default: return std::nullopt;
    }
  }

  /// Calls `f` with an evaluator of the index `e`: an affine_index when possible, so that a Load
  /// or Store computes its address inline, otherwise a general_index.
  template <class F>
  auto with_index(const ir::Expr& e, F&& f) {
    if (auto a = affine_of(e)) return f(*a);
    return f(general_index{compile(e)});
  }

  int buffer_slot(const ir::BufferNode* b, const char* verb) {
    auto it = buf_scope_.find(b);
    LOOM_USER_CHECK(it != buf_scope_.end() && !it->second.empty(), "loom.lower.E404")
        << "kernel '" << kernel_ << "' " << verb << " buffer '" << b->name
        << "', which is neither an argument of the kernel nor allocated around the access";
    return it->second.back();
  }

  stmt_fn compile_for(const ir::For* op) {
    // min and extent belong to the enclosing scope: the loop variable is not bound in them.
    expr_fn mn = compile(op->min), ext = compile(op->extent);
    const int slot = num_vars_++;
    var_scope_[op->variable()].push_back(slot);
    loops_.emplace_back(op->variable()->name, slot);
    site_.reset();
    stmt_fn body = compile(op->body);
    loops_.pop_back();
    site_.reset();
    var_scope_[op->variable()].pop_back();
    // Like generated code, the bounds are evaluated once, on entry.
    return [mn = std::move(mn), ext = std::move(ext), body = std::move(body), slot](frame& f) {
      const int64_t lo = mn(f, 0).i, n = ext(f, 0).i;
      for (int64_t k = 0; k < n; ++k) {
        f.vars[slot] = static_cast<int64_t>(static_cast<uint64_t>(lo) + static_cast<uint64_t>(k));
        body(f);
      }
    };
  }

  stmt_fn compile_store(const ir::Store* op) {
    const int slot = buffer_slot(op->buffer.get(), "writes");
    expr_fn val = compile(op->value);
    const int lanes = op->index.dtype().lanes;
    site_ptr where = current_site();
    std::string name = op->buffer->name;
    return dispatch_elem(op->buffer->dtype.element_of(), kernel_, name, [&](auto tag) {
      using T = typename decltype(tag)::type;
      return with_index(op->index, [&](auto idx) -> stmt_fn {
        if (lanes == 1)
          return [idx = std::move(idx), val = std::move(val), slot, where, name](frame& f) {
            const int64_t k = idx(f, 0);
            const scalar v = val(f, 0);
            const buffer_view& b = f.bufs[slot];
            if (static_cast<uint64_t>(k) >= static_cast<uint64_t>(b.size))
              fail_bounds(*where, f, "writes", name, k, b.size, 0, 1);
            write_elem<T>(b.data, k, v);
          };
        // A vector store reads all of its inputs before it writes: evaluate every lane first,
        // so that `A[ramp] = A[ramp + 1]` sees the old values, and check every lane before
        // writing any, so that a failing store leaves the buffer untouched.
        return
            [idx = std::move(idx), val = std::move(val), slot, where, name, lanes,
             ks = std::vector<int64_t>(lanes), vs = std::vector<scalar>(lanes)](frame& f) mutable {
              for (int l = 0; l < lanes; ++l) {
                ks[l] = idx(f, l);
                vs[l] = val(f, l);
              }
              const buffer_view& b = f.bufs[slot];
              for (int l = 0; l < lanes; ++l)
                if (static_cast<uint64_t>(ks[l]) >= static_cast<uint64_t>(b.size))
                  fail_bounds(*where, f, "writes", name, ks[l], b.size, l, lanes);
              for (int l = 0; l < lanes; ++l) write_elem<T>(b.data, ks[l], vs[l]);
            };
      });
    });
  }

  expr_fn compile_load(const ir::Load* op) {
    const int slot = buffer_slot(op->buffer.get(), "reads");
    const int lanes = op->index.dtype().lanes;
    site_ptr where = current_site();
    std::string name = op->buffer->name;
    return dispatch_elem(op->buffer->dtype.element_of(), kernel_, name, [&](auto tag) {
      using T = typename decltype(tag)::type;
      return with_index(op->index, [&](auto idx) -> expr_fn {
        return [idx = std::move(idx), slot, where, name, lanes](frame& f, int lane) {
          const int64_t k = idx(f, lane);
          const buffer_view& b = f.bufs[slot];
          if (static_cast<uint64_t>(k) >= static_cast<uint64_t>(b.size))
            fail_bounds(*where, f, "reads", name, k, b.size, lane, lanes);
          return read_elem<T>(b.data, k);
        };
      });
    });
  }

  stmt_fn compile_allocate(const ir::Allocate* op) {
    const ir::BufferNode* b = op->buffer.get();
    for (int64_t extent : b->shape)
      LOOM_USER_CHECK(extent >= 0, "loom.lower.E404")
          << "kernel '" << kernel_ << "' allocates buffer '" << b->name << "' with extent "
          << extent;
    const int64_t n = b->num_elements();
    const int slot = num_bufs_++;
    buf_scope_[b].push_back(slot);
    stmt_fn body = compile(op->body);
    buf_scope_[b].pop_back();
    return dispatch_elem(b->dtype.element_of(), kernel_, b->name, [&](auto tag) -> stmt_fn {
      using T = typename decltype(tag)::type;
      // One storage per Allocate node is enough: the interpreter is serial and an Allocate can
      // not be re-entered while it is active. It is poisoned on every entry, because a fresh
      // allocation in generated code holds whatever the previous iteration left there.
      return
          [body = std::move(body), slot, n, storage = std::vector<std::byte>()](frame& f) mutable {
            if (storage.empty() && n > 0)
              storage.resize(static_cast<size_t>(n) * sizeof(storage_t<T>));
            poison_fill<T>(storage.data(), n);
            f.bufs[slot] = buffer_view{storage.data(), n};
            body(f);
            f.bufs[slot] = buffer_view{};
          };
    });
  }

  expr_fn compile_cast(const ir::Cast* op) {
    expr_fn v = compile(op->value);
    const ir::DType t = op->dtype.element_of(), from = op->value.dtype().element_of();
    const bool f32 = t.bits == 32;
    if (t.is_16bit_float()) {
      // Through float32, as the backends convert (ir/dtype.hpp): int64 -> float -> 16 bits.
      const bool bf = t.is_bfloat(), from_float = from.is_float(), u64 = from.is_uint();
      return [v = std::move(v), bf, from_float, u64](frame& f, int lane) {
        const scalar x = v(f, lane);
        const float g = from_float ? static_cast<float>(x.f)
                        : u64      ? static_cast<float>(static_cast<uint64_t>(x.i))
                                   : static_cast<float>(x.i);
        return fval(::loom::detail::round_to_half(bf, g));
      };
    }
    if (t.is_float() && from.is_float())
      return
          [v = std::move(v), f32](frame& f, int lane) { return fval(round_to(f32, v(f, lane).f)); };
    if (t.is_float()) {
      // Convert straight to the target precision: int64 -> double -> float would round twice.
      const bool u64 = from.is_uint() && from.bits == 64;
      return [v = std::move(v), f32, u64](frame& f, int lane) {
        const int64_t x = v(f, lane).i;
        if (u64) {
          const auto u = static_cast<uint64_t>(x);
          return fval(f32 ? static_cast<double>(static_cast<float>(u)) : static_cast<double>(u));
        }
        return fval(f32 ? static_cast<double>(static_cast<float>(x)) : static_cast<double>(x));
      };
    }
    if (from.is_float())  // float -> int truncates towards zero
      return [v = std::move(v), t](frame& f, int lane) {
        const double x = v(f, lane).f;
        return ival(t.is_bool() ? x != 0 : wrap(t, float_to_int(x)));
      };
    return [v = std::move(v), t](frame& f, int lane) { return ival(wrap(t, v(f, lane).i)); };
  }

  expr_fn compile_binary(const ir::Expr& e) {
    using K = ir::NodeKind;
    using u64 = uint64_t;
    auto [pa, pb] = ir::binary_operands(e);
    expr_fn a = compile(*pa), b = compile(*pb);
    const ir::DType t = pa->dtype().element_of();  // the operand type
    const K k = e.kind();
    // Each helper builds the closure for one family of operators; only one of them runs.
    auto plain = [&](auto op) { return lift(std::move(a), std::move(b), op); };
    if (t.is_float()) {
      const bool f32 = t.bits == 32;
      auto rounded = [&](auto op) {
        return plain([f32, op](scalar x, scalar y) { return fval(round_to(f32, op(x.f, y.f))); });
      };
      auto test = [&](auto op) {
        return plain([op](scalar x, scalar y) { return ival(op(x.f, y.f)); });
      };
      switch (k) {
        case K::Add: return rounded(std::plus<>());
        case K::Sub: return rounded(std::minus<>());
        case K::Mul: return rounded(std::multiplies<>());
        case K::Div: return rounded(std::divides<>());
        case K::Mod: return rounded([](double x, double y) { return std::fmod(x, y); });
        case K::Min: return rounded([](double x, double y) { return std::fmin(x, y); });
        case K::Max: return rounded([](double x, double y) { return std::fmax(x, y); });
        case K::EQ: return test(std::equal_to<>());
        case K::NE: return test(std::not_equal_to<>());
        case K::LT: return test(std::less<>());
        case K::LE: return test(std::less_equal<>());
        case K::GT: return test(std::greater<>());
        case K::GE: return test(std::greater_equal<>());
        default: break;
      }
      LOOM_INTERNAL_CHECK(false) << "float operands for " << ir::node_kind_name(k);
    }
    // Wrapping arithmetic through unsigned: no undefined behaviour on overflow.
    auto wrapped = [&](auto op) {
      return plain([t, op](scalar x, scalar y) {
        return ival(wrap(t, static_cast<int64_t>(op(u64(x.i), u64(y.i)))));
      });
    };
    // Unsigned order is signed order with the top bit flipped. Narrower unsigned values are
    // zero-extended, so only uint64 needs the flip, but it is harmless for the others.
    const int64_t bias = t.is_uint() ? std::numeric_limits<int64_t>::min() : 0;
    auto ordered = [&](auto op) {
      return plain([bias, op](scalar x, scalar y) { return ival(op(x.i ^ bias, y.i ^ bias)); });
    };
    auto checked = [&](auto op) {
      return lift_div(std::move(a), std::move(b), current_site(), op);
    };
    switch (k) {
      case K::Add: return wrapped(std::plus<>());
      case K::Sub: return wrapped(std::minus<>());
      case K::Mul: return wrapped(std::multiplies<>());
      case K::Div:
      case K::FloorDiv:
        if (t.is_uint())
          return checked(
              [](scalar x, scalar y) { return ival(static_cast<int64_t>(u64(x.i) / u64(y.i))); });
        // x / -1 is a negation, spelled so that INT_MIN / -1 wraps instead of trapping.
        if (k == K::Div)
          return checked([t](scalar x, scalar y) {
            return ival(wrap(t, y.i == -1 ? static_cast<int64_t>(0 - u64(x.i)) : x.i / y.i));
          });
        return checked([t](scalar x, scalar y) {
          return ival(
              wrap(t, y.i == -1 ? static_cast<int64_t>(0 - u64(x.i)) : floor_div(x.i, y.i)));
        });
      case K::Mod:
      case K::FloorMod:
        if (t.is_uint())
          return checked(
              [](scalar x, scalar y) { return ival(static_cast<int64_t>(u64(x.i) % u64(y.i))); });
        if (k == K::Mod)
          return checked([](scalar x, scalar y) { return ival(y.i == -1 ? 0 : x.i % y.i); });
        // Adjusting C's remainder, rather than x - floor_div(x, y) * y, cannot overflow.
        return checked([](scalar x, scalar y) {
          const int64_t r = y.i == -1 ? 0 : x.i % y.i;
          return ival(r != 0 && ((r < 0) != (y.i < 0)) ? r + y.i : r);
        });
      case K::Min:
        return plain([bias](scalar x, scalar y) { return (x.i ^ bias) < (y.i ^ bias) ? x : y; });
      case K::Max:
        return plain([bias](scalar x, scalar y) { return (x.i ^ bias) < (y.i ^ bias) ? y : x; });
      case K::EQ: return ordered(std::equal_to<>());
      case K::NE: return ordered(std::not_equal_to<>());
      case K::LT: return ordered(std::less<>());
      case K::LE: return ordered(std::less_equal<>());
      case K::GT: return ordered(std::greater<>());
      case K::GE: return ordered(std::greater_equal<>());
      case K::And: return ordered(std::logical_and<>());
      case K::Or: return ordered(std::logical_or<>());
      case K::BitXor: return plain([](scalar x, scalar y) { return ival(x.i ^ y.i); });
      default: break;
    }
    LOOM_INTERNAL_CHECK(false) << "not a binary node: " << ir::node_kind_name(k);
    return {};
  }

  expr_fn compile_call(const ir::Call* op) {
    using ir::CallOp;
    const ir::DType t = op->dtype.element_of();
    expr_fn a = compile(op->args[0]);
    if (t.is_integral()) {  // only abs takes integers
      return [a = std::move(a), t](frame& f, int lane) {
        const int64_t x = a(f, lane).i;
        if (t.is_uint()) return ival(x);
        return ival(wrap(t, x < 0 ? static_cast<int64_t>(0 - static_cast<uint64_t>(x)) : x));
      };
    }
    const bool f32 = t.bits == 32;
    // Integer literals in these lambdas adopt the argument's precision (1 / float is float).
    auto math = [&](auto g) { return unary_math(std::move(a), f32, g); };
    switch (op->op) {
      case CallOp::exp: return math([](auto x) { return std::exp(x); });
      case CallOp::log: return math([](auto x) { return std::log(x); });
      case CallOp::sqrt: return math([](auto x) { return std::sqrt(x); });
      case CallOp::rsqrt: return math([](auto x) { return 1 / std::sqrt(x); });
      case CallOp::tanh: return math([](auto x) { return std::tanh(x); });
      case CallOp::sigmoid: return math([](auto x) { return 1 / (1 + std::exp(-x)); });
      case CallOp::erf: return math([](auto x) { return std::erf(x); });
      case CallOp::sin: return math([](auto x) { return std::sin(x); });
      case CallOp::cos: return math([](auto x) { return std::cos(x); });
      case CallOp::abs: return math([](auto x) { return std::fabs(x); });
      case CallOp::floor: return math([](auto x) { return std::floor(x); });
      case CallOp::ceil: return math([](auto x) { return std::ceil(x); });
      case CallOp::round: return math([](auto x) { return std::nearbyint(x); });
      case CallOp::pow: {
        expr_fn b = compile(op->args[1]);
        if (f32)
          return [a = std::move(a), b = std::move(b)](frame& f, int lane) {
            const float x = static_cast<float>(a(f, lane).f), y = static_cast<float>(b(f, lane).f);
            return fval(static_cast<double>(std::pow(x, y)));
          };
        return [a = std::move(a), b = std::move(b)](frame& f, int lane) {
          return fval(std::pow(a(f, lane).f, b(f, lane).f));
        };
      }
    }
    LOOM_INTERNAL_CHECK(false) << "unknown intrinsic " << ir::call_op_name(op->op);
    return {};
  }

  std::string kernel_;
  // Scopes: the slots a variable or buffer is bound to, innermost last.
  std::unordered_map<const ir::Variable*, std::vector<int>> var_scope_;
  std::unordered_map<const ir::BufferNode*, std::vector<int>> buf_scope_;
  std::vector<std::pair<std::string, int>> loops_;  ///< enclosing loops, outermost first
  site_ptr site_;
  int num_vars_ = 0;
  int num_bufs_ = 0;
};

}  // namespace detail

LOOM_DECL void interpret(const ir::LoweredFunc& fn, const std::vector<void*>& args) {
  using namespace detail;
  LOOM_USER_CHECK(args.size() == fn.args.size(), "loom.lower.E403")
      << "kernel '" << fn.name << "' takes " << fn.args.size() << " buffers but interpret got "
      << args.size();
  compiler c(fn.name);
  for (size_t k = 0; k < fn.args.size(); ++k) {
    const ir::Buffer& b = fn.args[k];
    LOOM_USER_CHECK(b, "loom.lower.E404")
        << "argument " << k << " of kernel '" << fn.name << "' is an undefined buffer";
    LOOM_USER_CHECK(b->arg_index == static_cast<int>(k), "loom.lower.E404")
        << "argument " << k << " of kernel '" << fn.name << "' is buffer '" << b->name
        << "' with arg_index " << b->arg_index << "; arguments must be in arg_index order";
    LOOM_USER_CHECK(args[k] != nullptr, "loom.lower.E403")
        << "buffer " << k << " ('" << b->name << "') of kernel '" << fn.name << "' is null";
    c.bind_argument(b.get());
  }
  // Everything is compiled before anything runs, so a malformed kernel is reported before it
  // has written to any buffer.
  stmt_fn body = c.compile(fn.body);
  frame f;
  f.vars.assign(static_cast<size_t>(c.num_vars()), 0);
  f.bufs.assign(static_cast<size_t>(c.num_bufs()), buffer_view{});
  // bind_argument gave the arguments the first slots, in order.
  for (size_t k = 0; k < fn.args.size(); ++k)
    f.bufs[k] = buffer_view{static_cast<std::byte*>(args[k]), fn.args[k]->num_elements()};
  body(f);
}

}  // namespace lower
LOOM_END_NAMESPACE
