// Bodies of loom/dag/evaluate.hpp.
#include "loom/dag/evaluate.hpp"

#include "loom/detail/int_math.hpp"
#include "loom/ir/printer.hpp"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <unordered_map>
#include <utility>

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
    case ir::DType::Code::BFloat:
      s.f = bfloat16_bits_to_float(static_cast<const uint16_t*>(b.data)[offset]);
      break;
    case ir::DType::Code::Float:
      if (b.dtype.bits == 16)
        s.f = float16_bits_to_float(static_cast<const uint16_t*>(b.data)[offset]);
      else
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
  if (b.dtype.is_bfloat()) {
    static_cast<uint16_t*>(b.data)[offset] = float_to_bfloat16_bits(static_cast<float>(s.f));
  } else if (b.dtype.is_float()) {
    if (b.dtype.bits == 16)
      static_cast<uint16_t*>(b.data)[offset] = float_to_float16_bits(static_cast<float>(s.f));
    else if (b.dtype.bits == 32)
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
inline double round_to(ir::DType t, double v) {
  if (t.is_16bit_float()) return round_to_half(t.is_bfloat(), v);
  return t.bits == 32 ? static_cast<float>(v) : v;
}

/// What `s` becomes once stored in a tensor of type `t` and read back: what evaluate() passes
/// from one op to the next, so that point-wise evaluation rounds the same way.
inline scalar stored(ir::DType t, scalar s) {
  alignas(8) std::byte cell[8];
  const buffer b{cell, t, {}};
  store(b, 0, s);
  return load(b, 0);
}

/// One op's body, compiled, with the frame it runs in.
struct compiled_op {
  fn body;
  std::vector<int> axis_slots;
  frame f;

  /// Points the frame's axis variables at the row-major flat index `flat` of `shape`.
  void set_point(const std::vector<int64_t>& shape, int64_t flat) {
    for (size_t d = shape.size(); d-- > 0;) {
      f.vars[axis_slots[d]] = flat % shape[d];
      flat /= shape[d];
    }
  }
};

/// An intermediate tensor of evaluate_points: each element computed on first read, then kept.
/// Values live in pages allocated on first touch, so memory follows the elements read, not the
/// tensor's size, and a lookup is two array indexings.
struct lazy_tensor {
  static constexpr int page_bits = 10;
  static constexpr int64_t page_size = int64_t{1} << page_bits;
  struct page {
    scalar values[page_size];
    bool done[page_size] = {};
  };

  compiled_op op;
  ir::DType dtype;
  std::vector<int64_t> shape;
  std::vector<std::unique_ptr<page>> pages;
  int64_t* elements_computed = nullptr;

  scalar at(int64_t flat) {
    std::unique_ptr<page>& p = pages[static_cast<size_t>(flat >> page_bits)];
    if (!p) p.reset(new page);
    const int64_t i = flat & (page_size - 1);
    if (p->done[i]) return p->values[i];
    // The body reads only ops before this one, so it never re-enters this op and one frame per
    // op is enough however deep the recursion goes.
    op.set_point(shape, flat);
    const scalar v = stored(dtype, op.body(op.f));
    p->values[i] = v;
    p->done[i] = true;
    ++*elements_computed;
    return v;
  }
};

/// Throws loom.dag.E212 for a read whose index `v` in dimension `d` (of `rank`) is outside
/// `shape`; `coords` holds the indices so far (the first 8).
inline void fail_out_of_bounds(const std::string& where, const std::string& tensor, int64_t v,
                               const int64_t* coords, size_t d, size_t rank,
                               const std::vector<int64_t>& shape) {
  std::ostringstream at;
  for (size_t e = 0; e <= d && e < 8; ++e) at << (e ? ", " : "") << coords[e];
  LOOM_USER_FAIL("loom.dag.E212") << "compute '" << where << "' reads '" << tensor
                                  << "' out of bounds: index " << v << " in dimension " << d
                                  << " (extent " << shape[d] << "), at [" << at.str()
                                  << (d + 1 < rank ? ", ..." : "") << "]";
}

/// The row-major offset that the compiled indices `idx` select in `shape`, bounds-checked.
inline int64_t read_offset(const std::vector<fn>& idx, const std::vector<int64_t>& shape, frame& f,
                           const std::string& where, const std::string& tensor) {
  int64_t offset = 0;
  int64_t coords[8];
  const size_t rank = idx.size();
  for (size_t d = 0; d < rank; ++d) {
    int64_t v = idx[d](f).i;
    if (d < 8) coords[d] = v;
    if (v < 0 || v >= shape[d]) [[unlikely]]
      fail_out_of_bounds(where, tensor, v, coords, d, rank, shape);
    offset = offset * shape[d] + v;
  }
  return offset;
}

using lazy_map = std::unordered_map<const ir::TensorNode*, lazy_tensor*>;

// Compiles one compute body into closures with variables resolved to frame slots.
class compiler {
 public:
  /// Reads of tensors in `bufs` load from memory; reads of tensors in `lazy` ask for the element.
  compiler(const std::string& compute, std::unordered_map<const ir::TensorNode*, buffer>& bufs,
           const lazy_map* lazy = nullptr)
      : compute_(compute), bufs_(bufs), lazy_(lazy) {}

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
        case K::BitXor: r.i = x ^ y; break;  // in range for the type when both operands are
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
    std::vector<fn> idx;
    for (auto& i : r->indices) idx.push_back(compile(i));
    const std::string where = compute_;
    const std::string tensor = r->tensor->name;
    if (auto it = bufs_.find(r->tensor.get()); it != bufs_.end()) {
      const buffer* buf = &it->second;
      return [buf, idx, where, tensor](frame& f) {
        return load(*buf, read_offset(idx, buf->shape, f, where, tensor));
      };
    }
    auto lz = lazy_ ? lazy_->find(r->tensor.get()) : lazy_map::const_iterator();
    LOOM_INTERNAL_CHECK(lazy_ && lz != lazy_->end())
        << "no buffer for tensor '" << r->tensor->name << "'";
    lazy_tensor* t = lz->second;
    return [t, idx, where, tensor](frame& f) {
      return t->at(read_offset(idx, t->shape, f, where, tensor));
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
  const lazy_map* lazy_;
  std::unordered_map<const ir::Variable*, int> slots_;
};

/// `op`'s body compiled against `bufs` (and `lazy`), its frame sized for the body's variables.
inline compiled_op compile_op(const ir::Tensor& op,
                              std::unordered_map<const ir::TensorNode*, buffer>& bufs,
                              const lazy_map* lazy = nullptr) {
  compiler c(op.name(), bufs, lazy);
  compiled_op r;
  for (auto& a : op->axes) r.axis_slots.push_back(c.slot(a.variable()));
  r.body = c.compile(op->body);
  r.f.vars.assign(c.num_slots(), 0);
  return r;
}

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
    compiled_op c = compile_op(op, bufs);
    const buffer& out = bufs.at(op.get());
    const int64_t n = op.num_elements();
    const auto& shape = op.shape();
    for (int64_t flat = 0; flat < n; ++flat) {
      c.set_point(shape, flat);
      store(out, flat, c.body(c.f));
    }
  }
}

namespace detail {

LOOM_DECL std::vector<double> evaluate_points_counted(const ComputeDAG& dag,
                                                      const std::vector<const void*>& inputs,
                                                      size_t output,
                                                      const std::vector<int64_t>& points,
                                                      int64_t& elements_computed) {
  const auto& ins = dag.inputs();
  LOOM_USER_CHECK(inputs.size() == ins.size(), "loom.dag.E214")
      << "evaluate_points got " << inputs.size() << " inputs but the DAG has " << ins.size()
      << " inputs";
  std::unordered_map<const ir::TensorNode*, buffer> bufs;
  for (size_t i = 0; i < ins.size(); ++i) {
    LOOM_USER_CHECK(inputs[i] != nullptr, "loom.dag.E215")
        << "input " << i << " (tensor '" << ins[i].name() << "') is null";
    // Inputs are only ever loaded from.
    bufs[ins[i].get()] = buffer{const_cast<void*>(inputs[i]), ins[i].dtype(), ins[i].shape()};
  }
  LOOM_USER_CHECK(output < dag.outputs().size(), "loom.dag.E216")
      << "evaluate_points: output " << output << " is out of range (the DAG has "
      << dag.outputs().size() << " outputs)";
  const ir::Tensor& out = dag.outputs()[output];
  const int64_t n = out.num_elements();
  for (size_t k = 0; k < points.size(); ++k)
    LOOM_USER_CHECK(points[k] >= 0 && points[k] < n, "loom.dag.E217")
        << "evaluate_points: point " << k << " (flat index " << points[k]
        << ") is out of range for output '" << out.name() << "' of " << n << " elements";

  // Only the ops the output depends on; ops() is topological, so one backward sweep finds them.
  const int out_index = dag.op_index(out);
  std::vector<bool> needed(static_cast<size_t>(out_index) + 1, false);
  needed[static_cast<size_t>(out_index)] = true;
  for (int i = out_index; i >= 0; --i)
    if (needed[static_cast<size_t>(i)])
      for (int p : dag.info(i).producers) needed[static_cast<size_t>(p)] = true;

  std::vector<std::pair<const ir::Tensor*, std::unique_ptr<lazy_tensor>>> tensors;
  lazy_map lazy;
  for (int i = 0; i <= out_index; ++i) {
    const ir::Tensor& op = dag.ops()[static_cast<size_t>(i)];
    if (!needed[static_cast<size_t>(i)] || op.is_placeholder()) continue;
    auto t = std::make_unique<lazy_tensor>();
    t->dtype = op.dtype();
    t->shape = op.shape();
    t->pages.resize(static_cast<size_t>((op.num_elements() + lazy_tensor::page_size - 1) >>
                                        lazy_tensor::page_bits));
    t->elements_computed = &elements_computed;
    lazy[op.get()] = t.get();
    tensors.emplace_back(&op, std::move(t));
  }
  // Compiled once all exist: a body's reads point at its producers' tables.
  for (auto& [op, t] : tensors) t->op = compile_op(*op, bufs, &lazy);

  lazy_tensor& result = *lazy.at(out.get());
  const ir::DType type = out.dtype();
  std::vector<double> values;
  values.reserve(points.size());
  for (int64_t p : points) {
    const scalar v = result.at(p);
    if (type.is_float())
      values.push_back(v.f);
    else if (type.code == ir::DType::Code::UInt)  // the bits evaluate() stores, read as unsigned
      values.push_back(type.bits == 32 ? static_cast<double>(static_cast<uint32_t>(v.i))
                                       : static_cast<double>(static_cast<uint64_t>(v.i)));
    else
      values.push_back(static_cast<double>(v.i));
  }
  return values;
}

}  // namespace detail

LOOM_DECL std::vector<double> evaluate_points(const ComputeDAG& dag,
                                              const std::vector<const void*>& inputs, size_t output,
                                              const std::vector<int64_t>& points) {
  int64_t elements_computed = 0;
  return detail::evaluate_points_counted(dag, inputs, output, points, elements_computed);
}

LOOM_END_NAMESPACE
