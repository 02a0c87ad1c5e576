// Bodies of loom/dag/evaluate.hpp.
#include "loom/dag/evaluate.hpp"

#include "loom/ir/printer.hpp"

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <unordered_map>

LOOM_BEGIN_NAMESPACE

namespace detail {

/// One scalar: integers (and bools) in `i`, floats in `f`.
union scalar {
  int64_t i;
  double f;
};

struct frame {
  std::vector<int64_t> vars;
};

using fn = std::function<scalar(frame&)>;

struct buffer {
  void* data = nullptr;
  ir::DType dtype;
  std::vector<int64_t> shape;
};

inline scalar load(const buffer& b, int64_t offset) {
  scalar s;
  switch (b.dtype.code) {
    case ir::DType::Code::Float:
      s.f = b.dtype.bits == 32 ? static_cast<const float*>(b.data)[offset]
                               : static_cast<const double*>(b.data)[offset];
      break;
    default:
      s.i = b.dtype.bits == 32 ? static_cast<const int32_t*>(b.data)[offset]
                               : static_cast<const int64_t*>(b.data)[offset];
  }
  return s;
}

inline void store(const buffer& b, int64_t offset, scalar s) {
  if (b.dtype.is_float()) {
    if (b.dtype.bits == 32)
      static_cast<float*>(b.data)[offset] = static_cast<float>(s.f);
    else
      static_cast<double*>(b.data)[offset] = s.f;
  } else if (b.dtype.bits == 32) {
    static_cast<int32_t*>(b.data)[offset] = static_cast<int32_t>(s.i);
  } else {
    static_cast<int64_t*>(b.data)[offset] = s.i;
  }
}

inline int64_t wrap(ir::DType t, int64_t v) {
  if (t.is_bool()) return v != 0;
  if (t.bits == 32) return static_cast<int32_t>(static_cast<uint32_t>(v));
  return v;
}
inline double round_to(ir::DType t, double v) { return t.bits == 32 ? static_cast<float>(v) : v; }

inline int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Compiles one compute body into closures with variables resolved to frame slots.
class compiler {
 public:
  compiler(const std::string& compute, std::unordered_map<const ir::TensorNode*, buffer>& bufs)
      : compute_(compute), bufs_(bufs) {}

  int slot(const ir::Variable* v) {
    auto it = slots_.find(v);
    if (it != slots_.end()) return it->second;
    int s = static_cast<int>(slots_.size());
    slots_[v] = s;
    return s;
  }
  int num_slots() const { return static_cast<int>(slots_.size()); }

  fn compile(const ir::Expr& e) {
    using K = ir::NodeKind;
    const ir::DType t = e.dtype();
    switch (e.kind()) {
      case K::IntImm: {
        scalar s;
        s.i = e.as<ir::IntImm>()->value;
        return [s](frame&) { return s; };
      }
      case K::FloatImm: {
        scalar s;
        s.f = e.as<ir::FloatImm>()->value;
        return [s](frame&) { return s; };
      }
      case K::Variable: {
        int s = slot(e.as<ir::Variable>());
        return [s](frame& f) {
          scalar r;
          r.i = f.vars[s];
          return r;
        };
      }
      case K::Cast: {
        auto* c = e.as<ir::Cast>();
        fn v = compile(c->value);
        ir::DType from = c->value.dtype();
        if (t.is_float() && from.is_float())
          return [v, t](frame& f) {
            scalar r;
            r.f = round_to(t, v(f).f);
            return r;
          };
        if (t.is_float())
          return [v, t](frame& f) {
            scalar r;
            r.f = round_to(t, static_cast<double>(v(f).i));
            return r;
          };
        if (from.is_float())  // float -> int truncates towards zero
          return [v, t](frame& f) {
            scalar r;
            double x = v(f).f;
            r.i = t.is_bool() ? x != 0 : wrap(t, static_cast<int64_t>(x));
            return r;
          };
        return [v, t](frame& f) {
          scalar r;
          r.i = wrap(t, v(f).i);
          return r;
        };
      }
      case K::Not: {
        fn a = compile(e.as<ir::Not>()->a);
        return [a](frame& f) {
          scalar r;
          r.i = !a(f).i;
          return r;
        };
      }
      case K::Select: {
        auto* s = e.as<ir::Select>();
        fn c = compile(s->condition), x = compile(s->true_value), y = compile(s->false_value);
        return [c, x, y](frame& f) { return c(f).i ? x(f) : y(f); };
      }
      case K::Call: return compile_call(e.as<ir::Call>());
      case K::TensorRead: return compile_read(e.as<ir::TensorRead>());
      case K::Reduce: return compile_reduce(e.as<ir::Reduce>());
      case K::Load:
      case K::Ramp:
      case K::Broadcast:
        LOOM_INTERNAL_CHECK(false)
            << "the DAG interpreter met a lowered node " << ir::node_kind_name(e.kind());
        return {};
      default: return compile_binary(e);
    }
  }

 private:
  fn compile_binary(const ir::Expr& e) {
    using K = ir::NodeKind;
    auto [pa, pb] = ir::binary_operands(e);
    fn a = compile(*pa), b = compile(*pb);
    const ir::DType ot = pa->dtype();  // operand type
    const ir::DType t = e.dtype();
    const K k = e.kind();
    const std::string where = compute_;
    if (ot.is_float()) {
      return [a, b, k, t, ot](frame& f) {
        double x = a(f).f, y = b(f).f;
        scalar r;
        switch (k) {
          case K::Add: r.f = round_to(t, x + y); break;
          case K::Sub: r.f = round_to(t, x - y); break;
          case K::Mul: r.f = round_to(t, x * y); break;
          case K::Div: r.f = round_to(t, x / y); break;
          case K::Mod: r.f = round_to(t, std::fmod(x, y)); break;
          case K::Min: r.f = std::fmin(x, y); break;
          case K::Max: r.f = std::fmax(x, y); break;
          case K::EQ: r.i = x == y; break;
          case K::NE: r.i = x != y; break;
          case K::LT: r.i = x < y; break;
          case K::LE: r.i = x <= y; break;
          case K::GT: r.i = x > y; break;
          case K::GE: r.i = x >= y; break;
          default: r.i = 0;
        }
        (void)ot;
        return r;
      };
    }
    return [a, b, k, t, where](frame& f) {
      int64_t x = a(f).i, y = b(f).i;
      scalar r;
      auto check_zero = [&] {
        LOOM_USER_CHECK(y != 0, "loom.dag.E211")
            << "integer division by zero in compute '" << where << "'";
      };
      // Wrapping arithmetic through unsigned: no undefined behaviour on overflow.
      auto ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
      switch (k) {
        case K::Add: r.i = wrap(t, static_cast<int64_t>(ux + uy)); break;
        case K::Sub: r.i = wrap(t, static_cast<int64_t>(ux - uy)); break;
        case K::Mul: r.i = wrap(t, static_cast<int64_t>(ux * uy)); break;
        case K::Div:
          check_zero();
          r.i = wrap(t, y == -1 ? static_cast<int64_t>(0 - ux) : x / y);
          break;
        case K::Mod:
          check_zero();
          r.i = y == -1 ? 0 : x % y;
          break;
        case K::FloorDiv:
          check_zero();
          r.i = wrap(t, y == -1 ? static_cast<int64_t>(0 - ux) : floor_div(x, y));
          break;
        case K::FloorMod: {
          check_zero();
          // C's remainder corrected towards the divisor's sign: no overflow near INT64_MIN.
          int64_t m = y == -1 ? 0 : x % y;
          if (m != 0 && ((m < 0) != (y < 0))) m += y;
          r.i = m;
          break;
        }
        case K::Min: r.i = std::min(x, y); break;
        case K::Max: r.i = std::max(x, y); break;
        case K::EQ: r.i = x == y; break;
        case K::NE: r.i = x != y; break;
        case K::LT: r.i = x < y; break;
        case K::LE: r.i = x <= y; break;
        case K::GT: r.i = x > y; break;
        case K::GE: r.i = x >= y; break;
        case K::And: r.i = x && y; break;
        case K::Or: r.i = x || y; break;
        default: r.i = 0;
      }
      return r;
    };
  }

  fn compile_call(const ir::Call* c) {
    using ir::CallOp;
    const ir::DType t = c->dtype;
    std::vector<fn> args;
    for (auto& a : c->args) args.push_back(compile(a));
    const CallOp op = c->op;
    if (t.is_integral()) {  // only abs
      fn a = args[0];
      return [a, t](frame& f) {
        scalar r;
        int64_t x = a(f).i;
        r.i = wrap(t, x < 0 ? static_cast<int64_t>(0 - static_cast<uint64_t>(x)) : x);
        return r;
      };
    }
    const bool f32 = t.bits == 32;
    fn a = args[0];
    fn b = args.size() > 1 ? args[1] : fn();
    return [a, b, op, f32](frame& f) {
      double x = a(f).f;
      scalar r{};
      // float32 math calls the float overloads so that results match what generated code does.
      auto un = [&](float (*ff)(float), double (*fd)(double)) {
        return f32 ? static_cast<double>(ff(static_cast<float>(x))) : fd(x);
      };
      switch (op) {
        case CallOp::exp: r.f = un(std::exp, std::exp); break;
        case CallOp::log: r.f = un(std::log, std::log); break;
        case CallOp::sqrt: r.f = un(std::sqrt, std::sqrt); break;
        case CallOp::rsqrt:
          r.f = f32 ? static_cast<double>(1.0f / std::sqrt(static_cast<float>(x)))
                    : 1.0 / std::sqrt(x);
          break;
        case CallOp::tanh: r.f = un(std::tanh, std::tanh); break;
        case CallOp::sigmoid:
          r.f = f32 ? static_cast<double>(1.0f / (1.0f + std::exp(-static_cast<float>(x))))
                    : 1.0 / (1.0 + std::exp(-x));
          break;
        case CallOp::erf: r.f = un(std::erf, std::erf); break;
        case CallOp::pow: {
          double y = b(f).f;
          r.f = f32 ? static_cast<double>(std::pow(static_cast<float>(x), static_cast<float>(y)))
                    : std::pow(x, y);
          break;
        }
        case CallOp::abs: r.f = std::fabs(x); break;
        case CallOp::floor: r.f = std::floor(x); break;
        case CallOp::ceil: r.f = std::ceil(x); break;
        case CallOp::round: r.f = std::nearbyint(x); break;
        case CallOp::sin: r.f = un(std::sin, std::sin); break;
        case CallOp::cos: r.f = un(std::cos, std::cos); break;
      }
      return r;
    };
  }

  fn compile_read(const ir::TensorRead* r) {
    auto it = bufs_.find(r->tensor.get());
    LOOM_INTERNAL_CHECK(it != bufs_.end()) << "no buffer for tensor '" << r->tensor->name << "'";
    const buffer* buf = &it->second;
    std::vector<fn> idx;
    for (auto& i : r->indices) idx.push_back(compile(i));
    const std::string where = compute_;
    const std::string tensor = r->tensor->name;
    return [buf, idx, where, tensor](frame& f) {
      int64_t offset = 0;
      int64_t coords[8];
      const size_t rank = idx.size();
      for (size_t d = 0; d < rank; ++d) {
        int64_t v = idx[d](f).i;
        if (d < 8) coords[d] = v;
        if (v < 0 || v >= buf->shape[d]) {
          std::ostringstream at;
          for (size_t e = 0; e <= d && e < 8; ++e) at << (e ? ", " : "") << coords[e];
          LOOM_USER_FAIL("loom.dag.E212")
              << "compute '" << where << "' reads '" << tensor << "' out of bounds: index " << v
              << " in dimension " << d << " (extent " << buf->shape[d] << "), at [" << at.str()
              << (d + 1 < rank ? ", ..." : "") << "]";
        }
        offset = offset * buf->shape[d] + v;
      }
      return load(*buf, offset);
    };
  }

  fn compile_reduce(const ir::Reduce* r) {
    std::vector<int> slots;
    std::vector<int64_t> extents;
    for (auto& a : r->axes) {
      slots.push_back(slot(a.variable()));
      extents.push_back(a.extent);
    }
    fn src = compile(r->source);
    fn cond = r->condition.defined() ? compile(r->condition) : fn();
    fn init = compile(ir::reduce_identity(r->op, r->dtype));
    const ir::ReduceOp op = r->op;
    const ir::DType t = r->dtype;
    return [=](frame& f) {
      scalar acc = init(f);
      const size_t n = slots.size();
      for (size_t d = 0; d < n; ++d) f.vars[slots[d]] = 0;
      while (true) {
        if (!cond || cond(f).i) {
          scalar v = src(f);
          if (t.is_float()) {
            switch (op) {
              case ir::ReduceOp::Sum: acc.f = round_to(t, acc.f + v.f); break;
              case ir::ReduceOp::Prod: acc.f = round_to(t, acc.f * v.f); break;
              case ir::ReduceOp::Min: acc.f = std::fmin(acc.f, v.f); break;
              case ir::ReduceOp::Max: acc.f = std::fmax(acc.f, v.f); break;
            }
          } else {
            auto ua = static_cast<uint64_t>(acc.i), uv = static_cast<uint64_t>(v.i);
            switch (op) {
              case ir::ReduceOp::Sum: acc.i = wrap(t, static_cast<int64_t>(ua + uv)); break;
              case ir::ReduceOp::Prod: acc.i = wrap(t, static_cast<int64_t>(ua * uv)); break;
              case ir::ReduceOp::Min: acc.i = std::min(acc.i, v.i); break;
              case ir::ReduceOp::Max: acc.i = std::max(acc.i, v.i); break;
            }
          }
        }
        // Odometer over the reduce axes, last axis fastest.
        size_t d = n;
        while (d > 0) {
          --d;
          if (++f.vars[slots[d]] < extents[d]) break;
          f.vars[slots[d]] = 0;
          if (d == 0) return acc;
        }
        if (n == 0) return acc;
      }
    };
  }

  std::string compute_;
  std::unordered_map<const ir::TensorNode*, buffer>& bufs_;
  std::unordered_map<const ir::Variable*, int> slots_;
};

}  // namespace detail

LOOM_DECL void evaluate(const ComputeDAG& dag, const std::vector<void*>& buffers) {
  using namespace detail;
  const auto args = dag.arguments();
  LOOM_USER_CHECK(buffers.size() == args.size(), "loom.dag.E210")
      << "evaluate got " << buffers.size() << " buffers but the DAG has " << args.size()
      << " arguments (" << dag.inputs().size() << " inputs, then " << dag.outputs().size()
      << " outputs)";
  std::unordered_map<const ir::TensorNode*, buffer> bufs;
  for (size_t i = 0; i < args.size(); ++i) {
    LOOM_USER_CHECK(buffers[i] != nullptr, "loom.dag.E213")
        << "buffer " << i << " (tensor '" << args[i].name() << "') is null";
    bufs[args[i].get()] = buffer{buffers[i], args[i].dtype(), args[i].shape()};
  }
  std::vector<std::unique_ptr<std::byte[]>> scratch;
  for (auto& op : dag.ops()) {
    if (bufs.count(op.get())) continue;
    scratch.emplace_back(new std::byte[op.num_elements() * op.dtype().bytes()]);
    bufs[op.get()] = buffer{scratch.back().get(), op.dtype(), op.shape()};
  }
  for (auto& op : dag.ops()) {
    if (op.is_placeholder()) continue;
    compiler c(op.name(), bufs);
    std::vector<int> axis_slots;
    for (auto& a : op->axes) axis_slots.push_back(c.slot(a.variable()));
    fn body = c.compile(op->body);
    frame f;
    f.vars.assign(c.num_slots(), 0);
    const buffer& out = bufs.at(op.get());
    const int64_t n = op.num_elements();
    const auto& shape = op.shape();
    for (int64_t flat = 0; flat < n; ++flat) {
      int64_t rest = flat;
      for (size_t d = shape.size(); d-- > 0;) {
        f.vars[axis_slots[d]] = rest % shape[d];
        rest /= shape[d];
      }
      store(out, flat, body(f));
    }
  }
}

LOOM_END_NAMESPACE
