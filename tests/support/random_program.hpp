// Differential testing of the whole compiler (issue 35): random small computations built from the
// DSL's building blocks, random legal schedules, and the result of every backend compared with
// the DAG interpreter (loom::evaluate).
//
// The generator reads its choices from a byte stream (byte_reader), so the same code runs under
// libFuzzer (tests/fuzz/fuzz_compile.cpp) and from a seed (tests/jit/test_random_programs.cpp:
// the bytes of an mt19937). It builds the runtime IR that the DSL's templates produce
// (placeholder, compute, sum/min/max/prod with an optional condition, if_then_else, cast, the
// math intrinsics), since a random program cannot be a C++ expression type:
//  - 1 to 3 placeholders (float32, int32, sometimes float64, int64, float16, bfloat16) of rank 1
//    to 3, small shapes (dimensions mostly up to 12, sometimes up to 40: vector tails);
//  - 1 to 4 computes, each reading any earlier tensor: element-wise bodies (+, -, *, /, %,
//    floordiv, floormod, min, max, abs, exp, log, sqrt, rsqrt, tanh, sigmoid, erf, sin, cos,
//    floor, ceil, round, casts between the four types, if_then_else on comparisons of values or
//    of indices, index values cast to numbers) or reductions (sum, min, max, prod over 1 or 2
//    axes, sum and integer prod sometimes with a condition), or a 16-bit float stage (a float32
//    value rounded for storage, as the 16-bit types are storage only);
//  - accesses with index arithmetic: transposes and broadcasts (any axis for any dimension,
//    constants), shifts, reversals, strides, window sums (i + k), flattened pairs (i * n + j),
//    floordiv, floormod, / and % of indices; an index that may leave its dimension is wrapped
//    (floormod), clamped (min/max) or guarded by if_then_else with a padding value, as padding is
//    written in the operator library;
//  - a schedule: none, random legal steps (support/random_schedule.hpp: split, reorder, fuse,
//    compute_at, compute_inline, compute_root, cache_read, cache_write, parallel, vectorize,
//    unroll, pragma, storage_align, rfactor), or a program sampled from the search's sketches
//    (search::try_sample_program: multi-level tiling, rfactor, cache stages, fill tile size,
//    compute location, parallel, unroll, vectorize).
//
// Tolerance. Every value carries what is known of it (value_info): a bound on its magnitude and,
// for floats, a power of two it is a multiple of and a bound on its error against exact
// arithmetic. Inputs are multiples of 1/4 in [-4, 4] (integers in [-20, 20]), so +, -, *, min,
// max, select and sums of them stay exact, in any order, while the numbers stay below 2^24 times
// their grain: such outputs must match the interpreter exactly, reassociated reductions included.
// Other float operations add a rounding error (an ulp of the bound; 2^-18 of it for the math
// intrinsics, which the JIT may approximate) and propagate their operands' errors by their
// Lipschitz constants; a float output matches when |got - want| <= 4 * err. Integers always
// match exactly (both sides wrap at their width). Operations whose result is not continuous in
// their operands (comparisons, floor/ceil/round, float -> int casts) are only applied to exact
// values, so a rounding difference can never become a large one; what could become NaN or
// infinite (log of a negative, exp of a large number, division by zero) is not generated.
#ifndef LOOM_TESTS_SUPPORT_RANDOM_PROGRAM_HPP
#define LOOM_TESTS_SUPPORT_RANDOM_PROGRAM_HPP

#include <loom/loom.hpp>
#include <loom/lower/interpret.hpp>
#include <loom/lower/lower.hpp>
#include <loom/sched/record.hpp>
#include <loom/sched/state.hpp>
#include <loom/search/annotate.hpp>
#include <loom/search/mutate.hpp>
#include <loom/search/sketch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/random_schedule.hpp"
#include "support/search_target.hpp"

namespace loom_test::difffuzz {

namespace ir = loom::ir;

/// The choices of the generator: bytes, then zeros once they run out.
class byte_reader {
 public:
  byte_reader(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  uint8_t byte() { return at_ < n_ ? d_[at_++] : 0; }
  /// An integer in [0, n).
  int pick(int n) { return n <= 1 ? 0 : byte() % n; }
  /// An integer in [lo, hi].
  int64_t range(int64_t lo, int64_t hi) { return lo + pick(static_cast<int>(hi - lo + 1)); }
  /// True once in `n` (on average).
  bool one_in(int n) { return pick(n) == 0; }
  uint32_t word() {
    uint32_t w = 0;
    for (int i = 0; i < 4; ++i) w = w << 8 | byte();
    return w;
  }

 private:
  const uint8_t* d_;
  size_t n_, at_ = 0;
};

/// What the checker knows of a value (see the file comment).
struct value_info {
  double bound = 0;  ///< |v| <= bound
  int grain = 0;     ///< float: an exact v is a multiple of 2^grain
  double err = 0;    ///< float: |v - exact| <= err; 0 means exact
};

/// The precision of a float type: 24 bits for float32, 53 for float64.
inline int mantissa_bits(ir::DType t) { return t.bits == 64 ? 53 : 24; }

/// A typed expression and what is known of it.
struct value {
  ir::Expr e;
  value_info info;
  ir::DType dtype() const { return e.dtype(); }
  bool exact() const { return info.err == 0; }
};

/// A loop variable of the compute being built.
struct axis {
  ir::Expr var;
  int64_t extent;
};

/// A generated tensor and what is known of its elements.
struct tensor_info {
  ir::Tensor t;
  value_info info;
};

/// A random program: the DAG and what is known of each output.
struct program {
  std::shared_ptr<const loom::ComputeDAG> dag;
  std::vector<value_info> outputs;  ///< per output of the DAG
  std::string describe() const {
    std::ostringstream os;
    os << *dag;
    return os.str();
  }
};

/// Builds random programs from a byte stream.
class generator {
 public:
  explicit generator(byte_reader& in) : in_(in) {}

  program make() {
    const int num_inputs = 1 + in_.pick(3);
    for (int i = 0; i < num_inputs; ++i) {
      static const ir::DType types[] = {ir::DType::f32(), ir::DType::i32(), ir::DType::f32(),
                                        ir::DType::i32(), ir::DType::f64(), ir::DType::i64(),
                                        ir::DType::f16(), ir::DType::bf16()};
      const ir::DType t = types[in_.pick(in_.one_in(4) ? 8 : 4)];
      value_info vi = t.is_float() ? value_info{4, -2, 0} : value_info{20, 0, 0};
      // Sometimes integers of any magnitude, for wrap-around (make_input: the name ends in 'w').
      const bool wide = !t.is_float() && in_.one_in(4);
      if (wide) vi.bound = std::ldexp(1.0, t.bits - 1);
      tensors_.push_back(
          {ir::make_placeholder("in" + std::to_string(i) + (wide ? "w" : ""), t, random_shape(64)),
           vi});
    }
    const int num_stages = 1 + in_.pick(4);
    for (int s = 0; s < num_stages; ++s) add_stage("s" + std::to_string(s));
    // Outputs: the last stage, every stage nothing reads, and sometimes one that is read.
    std::vector<ir::Tensor> outputs;
    std::vector<value_info> infos;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& ti = tensors_[i];
      if (ti.t.is_placeholder()) continue;
      const bool last = i + 1 == tensors_.size();
      if (last || !is_read(ti.t) || in_.one_in(6)) {
        outputs.push_back(ti.t);
        infos.push_back(ti.info);
      }
    }
    std::vector<ir::Tensor> inputs;
    for (const auto& ti : tensors_)
      if (ti.t.is_placeholder() && reaches(outputs, ti.t)) inputs.push_back(ti.t);
    return {std::make_shared<const loom::ComputeDAG>(inputs, outputs), infos};
  }

 private:
  byte_reader& in_;
  std::vector<tensor_info> tensors_;
  std::vector<axis> axes_;  ///< the loop variables visible where an expression is built
  int64_t work_ = 0;        ///< multiply-adds so far

  // --- structure -------------------------------------------------------------------------------

  /// A shape of rank 1 to 3 with at most `max_elements` elements.
  std::vector<int64_t> random_shape(int64_t max_elements) {
    std::vector<int64_t> shape;
    const int rank = 1 + in_.pick(3);
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) {
      const int64_t cap = std::max<int64_t>(1, max_elements / n);
      // Mostly up to 12; sometimes longer (vector tails: 17 is 16 + 1 lanes) or 1.
      const int64_t len = in_.one_in(8) ? 1 : in_.one_in(6) ? in_.range(13, 40) : in_.range(1, 12);
      shape.push_back(std::min(len, cap));
      n *= shape.back();
    }
    return shape;
  }

  /// A stage's shape: a new one, or an earlier tensor's, transposed or with one dimension
  /// changed, so that accesses often line up exactly.
  std::vector<int64_t> stage_shape() {
    if (in_.one_in(3)) return random_shape(256);
    std::vector<int64_t> s = tensors_[in_.pick(static_cast<int>(tensors_.size()))].t.shape();
    switch (in_.pick(4)) {
      case 0: std::reverse(s.begin(), s.end()); break;
      case 1: s[in_.pick(static_cast<int>(s.size()))] = in_.range(1, 12); break;
      case 2:
        if (s.size() > 1) s.erase(s.begin() + in_.pick(static_cast<int>(s.size())));
        break;
      default: break;
    }
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n > 256 ? random_shape(256) : s;
  }

  bool is_read(const ir::Tensor& t) const {
    bool read = false;
    for (const auto& o : tensors_)
      if (!o.t.is_placeholder())
        for (const auto& in : ir::input_tensors(o.t)) read = read || in.same_as(t);
    return read;
  }

  static bool reaches(const std::vector<ir::Tensor>& from, const ir::Tensor& t) {
    for (const auto& f : from) {
      if (f.same_as(t)) return true;
      if (!f.is_placeholder() && reaches(ir::input_tensors(f), t)) return true;
    }
    return false;
  }

  void add_stage(const std::string& name) {
    const std::vector<int64_t> shape = stage_shape();
    int64_t points = 1;
    for (int64_t d : shape) points *= d;
    std::vector<ir::IterVar> iter_vars;
    axes_.clear();
    for (size_t d = 0; d < shape.size(); ++d) {
      auto v = ir::Variable::make(name + "_i" + std::to_string(d));
      iter_vars.push_back({v, shape[d], ir::IterKind::Spatial});
      axes_.push_back({v, shape[d]});
    }
    const ir::DType t = random_type();
    value body;
    if (in_.one_in(8))  // a 16-bit float stage: storage only, a float32 value rounded
      body = convert(expression(ir::DType::f32(), 2 + in_.pick(2)),
                     in_.one_in(2) ? ir::DType::f16() : ir::DType::bf16());
    else if (in_.one_in(2) && work_ + points < 60000)
      body = reduction(name, t, points);
    else
      body = expression(t, 2 + in_.pick(2));
    work_ += points;
    tensors_.push_back({ir::make_compute(name, iter_vars, body.e), body.info});
  }

  ir::DType random_type() {
    static const ir::DType types[] = {ir::DType::f32(), ir::DType::i32(), ir::DType::f32(),
                                      ir::DType::i32(), ir::DType::f64(), ir::DType::i64()};
    return types[in_.pick(in_.one_in(5) ? 6 : 4)];
  }

  /// sum, min, max or prod over one or two new axes, sometimes with a condition.
  value reduction(const std::string& name, ir::DType t, int64_t points) {
    const int n_axes = 1 + in_.pick(2);
    std::vector<ir::IterVar> raxes;
    int64_t length = 1;
    for (int a = 0; a < n_axes; ++a) {
      int64_t extent = in_.one_in(6) ? in_.range(13, 40) : in_.range(1, 12);
      if ((work_ + points * length * extent) > 60000) extent = 1;
      auto v = ir::Variable::make(name + "_k" + std::to_string(a));
      raxes.push_back({v, extent, ir::IterKind::Reduce});
      length *= extent;
    }
    const size_t spatial = axes_.size();
    for (const auto& r : raxes) axes_.push_back({r.var, r.extent});
    value src = expression(t, 1 + in_.pick(3));
    ir::ReduceOp op = static_cast<ir::ReduceOp>(in_.pick(4));
    // A float product grows too fast to say much about; sum instead.
    if (op == ir::ReduceOp::Prod && t.is_float() &&
        (src.info.bound > 2 || !src.exact() ||
         std::pow(std::max(1.0, src.info.bound), static_cast<double>(length)) > kMaxBound))
      op = ir::ReduceOp::Sum;
    ir::Expr cond;
    // Only sums and products: a min or max over an empty condition is +-inf.
    if ((op == ir::ReduceOp::Sum || (op == ir::ReduceOp::Prod && !t.is_float())) && in_.one_in(3))
      cond = condition(2);
    axes_.resize(spatial);
    work_ += points * length;
    value_info vi = src.info;
    const double n = static_cast<double>(length);
    if (op == ir::ReduceOp::Sum) {
      vi.bound = n * src.info.bound;
      if (t.is_float()) {
        if (src.exact() && vi.bound < std::ldexp(1.0, vi.grain + mantissa_bits(t)))
          vi.err = 0;
        else
          vi.err = n * src.info.err + n * vi.bound * std::ldexp(1.0, 1 - mantissa_bits(t));
      }
    } else if (op == ir::ReduceOp::Prod) {
      vi.bound =
          t.is_float() ? std::pow(std::max(1.0, src.info.bound), n) : std::ldexp(1.0, t.bits - 1);
      vi.grain = src.info.grain * length;
      if (t.is_float() && !(vi.bound < std::ldexp(1.0, vi.grain + mantissa_bits(t))))
        vi.err = vi.bound * n * std::ldexp(1.0, 1 - mantissa_bits(t));
    }
    return {ir::Reduce::make(op, src.e, raxes, cond), vi};
  }

  // --- values ----------------------------------------------------------------------------------

  /// A float result of an operation: exact while it stays below 2^(grain + mantissa), otherwise
  /// `propagated` plus an ulp of the bound.
  static value_info rounded(ir::DType t, double bound, int grain, double propagated) {
    value_info vi{bound, grain, propagated};
    if (!t.is_float()) return {std::min(bound, std::ldexp(1.0, t.bits - 1)), 0, 0};  // wraps
    if (propagated == 0 && bound < std::ldexp(1.0, grain + mantissa_bits(t))) return vi;
    vi.err = propagated + bound * std::ldexp(1.0, 1 - mantissa_bits(t));
    return vi;
  }

  /// The bound beyond which a float value is not built (it could overflow to infinity later).
  static constexpr double kMaxBound = 1e18;

  value constant(ir::DType t) {
    if (t.is_16bit_float()) return convert(constant(ir::DType::f32()), t);
    if (t.is_float()) {
      static const double c[] = {0, 0.5, 1, 2, -1.5, 3, 0.25, -4, 7, -0.75};
      const double v = c[in_.pick(10)];
      return {ir::FloatImm::make(t, v), {std::abs(v), -2, 0}};
    }
    const int64_t v = in_.range(-8, 8);
    return {ir::IntImm::make(t, v), {static_cast<double>(std::abs(v)), 0, 0}};
  }

  /// An integer index value over the visible axes, and its range.
  struct index {
    ir::Expr e;
    int64_t lo, hi;
  };

  index axis_index() {
    if (axes_.empty()) return {ir::Expr(int64_t{0}), 0, 0};
    const axis& a = axes_[in_.pick(static_cast<int>(axes_.size()))];
    return {a.var, 0, a.extent - 1};
  }

  /// A random index expression: an axis, a constant, or arithmetic on them.
  index index_expr(int64_t extent) {
    index x = axis_index();
    switch (in_.pick(11)) {
      case 0: {  // a constant
        const int64_t c = in_.range(0, std::max<int64_t>(0, extent - 1));
        return {ir::Expr(c), c, c};
      }
      case 1: {  // a shift
        const int64_t c = in_.range(-3, 3);
        return {x.e + ir::Expr(c), x.lo + c, x.hi + c};
      }
      case 2:  // a reversal
        return {ir::Expr(extent - 1) - x.e, extent - 1 - x.hi, extent - 1 - x.lo};
      case 3: {  // a stride
        const int64_t s = in_.range(2, 3), c = in_.range(0, 1);
        return {x.e * ir::Expr(s) + ir::Expr(c), x.lo * s + c, x.hi * s + c};
      }
      case 4: {  // a window: two axes added
        index y = axis_index();
        return {x.e + y.e, x.lo + y.lo, x.hi + y.hi};
      }
      case 5: {  // floordiv by a constant
        const int64_t s = in_.range(2, 4);
        return {ir::FloorDiv::make(x.e, ir::Expr(s)), x.lo / s, x.hi / s};
      }
      case 6: {  // floormod by a constant
        const int64_t s = in_.range(2, 5);
        return {ir::FloorMod::make(x.e, ir::Expr(s)), 0, std::min(s - 1, x.hi)};
      }
      case 8: {  // truncating division or modulo of a non-negative index (C semantics)
        const int64_t s = in_.range(2, 4);
        if (in_.one_in(2)) return {ir::Div::make(x.e, ir::Expr(s)), x.lo / s, x.hi / s};
        return {ir::Mod::make(x.e, ir::Expr(s)), 0, std::min(s - 1, x.hi)};
      }
      case 7: {  // a flattened pair: x * n + y
        index y = axis_index();
        const int64_t n = y.hi + 1;
        return {x.e * ir::Expr(n) + y.e, x.lo * n + y.lo, x.hi * n + y.hi};
      }
      default: return x;
    }
  }

  /// A read of tensor `ti` with random indices, each kept in bounds by construction, by a
  /// floormod, by a clamp, or by an if_then_else with a padding value.
  value read(const tensor_info& ti, ir::DType want) {
    std::vector<ir::Expr> idx;
    ir::Expr guard;
    for (int64_t extent : ti.t.shape()) {
      index x = index_expr(extent);
      if (x.lo < 0 || x.hi >= extent) {
        switch (in_.pick(3)) {
          case 0: x.e = ir::FloorMod::make(x.e, ir::Expr(extent)); break;
          case 1:
            x.e = ir::Min::make(ir::Max::make(x.e, ir::Expr(int64_t{0})), ir::Expr(extent - 1));
            break;
          default: {
            ir::Expr in =
                ir::GE::make(x.e, ir::Expr(int64_t{0})) && ir::LT::make(x.e, ir::Expr(extent));
            guard = guard.defined() ? ir::And::make(guard, in) : in;
          }
        }
      }
      idx.push_back(x.e);
    }
    value v{ir::TensorRead::make(ti.t, idx), ti.info};
    // 16-bit floats are storage only: read, then converted before anything else.
    if (v.dtype().is_16bit_float()) v = convert(v, ir::DType::f32());
    if (guard.defined()) {
      value pad = constant(v.dtype());
      v = {ir::Select::make(guard, v.e, pad.e), merge(v.info, pad.info)};
    }
    return convert(v, want);
  }

  static value_info merge(const value_info& a, const value_info& b) {
    return {std::max(a.bound, b.bound), std::min(a.grain, b.grain), std::max(a.err, b.err)};
  }

  /// `v` cast to `t` when needed (a float -> int cast only of an exact value that fits).
  value convert(value v, ir::DType t) {
    const ir::DType from = v.dtype();
    if (from == t) return v;
    const ir::DType f32 = ir::DType::f32();
    if (from.is_16bit_float() && t != f32)  // through float32, where arithmetic starts
      return convert(convert(v, f32), t);
    if (t.is_16bit_float()) {
      if (from != f32) return convert(convert(v, f32), t);
      // Rounding to 16 bits: an exact value rounds the same on both sides and keeps its grain
      // (rounding never makes a value finer); an error grows by an ulp of the bound. Too large
      // a value for float16 (65504) is clamped first.
      const bool half = !t.is_bfloat();
      if (half && v.info.bound > 60000) {
        ir::Expr c = ir::FloatImm::make(f32, 60000.0);
        v = {ir::Min::make(ir::Max::make(v.e, ir::FloatImm::make(f32, -60000.0)), c),
             {60000, v.info.grain, v.info.err}};
      }
      const double ulp16 = std::ldexp(1.0, half ? -10 : -7);
      return {ir::Cast::make(t, v.e),
              {v.info.bound * (1 + ulp16), v.info.grain,
               v.exact() ? 0 : v.info.err + v.info.bound * ulp16}};
    }
    if (from.is_16bit_float()) return {ir::Cast::make(t, v.e), v.info};  // to float32: exact
    ir::Expr e = ir::Cast::make(t, v.e);
    if (t.is_float()) {
      if (from.is_float())  // float64 -> float32 rounds; float32 -> float64 is exact
        return {e, rounded(t, v.info.bound, v.info.grain, v.info.err)};
      return {e, rounded(t, v.info.bound, 0, 0)};
    }
    const double limit = std::ldexp(1.0, t.bits - 1);
    if (from.is_float()) {
      if (!v.exact() || v.info.bound >= std::ldexp(1.0, 31)) return constant(t);
      // truncation towards zero: bounded like the value
      return {e, {v.info.bound, 0, 0}};
    }
    return {e, {std::min(v.info.bound, limit), 0, 0}};  // a narrowing cast wraps
  }

  /// A leaf: a read, a constant, or an index cast to a number.
  value leaf(ir::DType t) {
    switch (in_.pick(6)) {
      case 0: return constant(t);
      case 1: {
        index x = index_expr(16);
        const double b = static_cast<double>(std::max(std::abs(x.lo), std::abs(x.hi)));
        return {ir::Cast::make(t, x.e), rounded(t, b, 0, 0)};
      }
      default: return read(tensors_[in_.pick(static_cast<int>(tensors_.size()))], t);
    }
  }

  /// A condition: a comparison of two exact values or of two indices, sometimes combined.
  ir::Expr condition(int depth) {
    if (depth > 0 && in_.one_in(4)) {
      ir::Expr a = condition(depth - 1), b = condition(depth - 1);
      switch (in_.pick(3)) {
        case 0: return ir::And::make(a, b);
        case 1: return ir::Or::make(a, b);
        default: return ir::Not::make(a);
      }
    }
    ir::Expr a, b;
    if (in_.one_in(2)) {
      const ir::DType t = random_type();
      value x = expression(t, depth), y = expression(t, depth - 1);
      if (x.exact() && y.exact()) a = x.e, b = y.e;
    }
    if (!a.defined()) {
      a = axis_index().e;
      b = in_.one_in(2) ? axis_index().e : ir::Expr(in_.range(0, 6));
    }
    static const ir::NodeKind cmp[] = {ir::NodeKind::LT, ir::NodeKind::LE, ir::NodeKind::GT,
                                       ir::NodeKind::GE, ir::NodeKind::EQ, ir::NodeKind::NE};
    return ir::make_binary(cmp[in_.pick(6)], a, b);
  }

  /// A value of type `t`, at most `depth` operations deep.
  value expression(ir::DType t, int depth) {
    if (depth <= 0 || in_.one_in(4)) return leaf(t);
    if (in_.one_in(8)) {  // computed in another type, then converted
      const ir::DType u = random_type();
      if (u != t) return convert(expression(u, depth - 1), t);
    }
    const int op = in_.pick(t.is_float() ? 12 : 10);
    if (op == 0) {  // if_then_else
      ir::Expr c = condition(depth - 1);
      value a = expression(t, depth - 1), b = expression(t, depth - 1);
      return {ir::Select::make(c, a.e, b.e), merge(a.info, b.info)};
    }
    if (op == 1) return unary(t, expression(t, depth - 1));
    value a = expression(t, depth - 1), b = expression(t, depth - 1);
    const value_info &x = a.info, &y = b.info;
    switch (op) {
      case 2:
        return {a.e + b.e,
                rounded(t, x.bound + y.bound, std::min(x.grain, y.grain), x.err + y.err)};
      case 3:
        return {a.e - b.e,
                rounded(t, x.bound + y.bound, std::min(x.grain, y.grain), x.err + y.err)};
      case 4: {
        const double bound = x.bound * y.bound;
        if (t.is_float() && bound > kMaxBound) return a;
        return {a.e * b.e, rounded(t, bound, x.grain + y.grain,
                                   x.err * y.bound + y.err * x.bound + x.err * y.err)};
      }
      case 5: return {ir::Min::make(a.e, b.e), merge(x, y)};
      case 6: return {ir::Max::make(a.e, b.e), merge(x, y)};
      default: break;
    }
    if (!t.is_float()) {
      // Integer division: by a constant other than 0 and -1 (INT_MIN / -1 traps), or by
      // max(b, 1).
      ir::Expr d;
      double dmin = 1;
      if (in_.one_in(3)) {
        d = ir::Max::make(b.e, ir::IntImm::make(t, 1));
      } else {
        static const int64_t c[] = {2, 3, 4, 5, 7, -2, -3, -5};
        const int64_t v = c[in_.pick(8)];
        d = ir::IntImm::make(t, v);
        dmin = static_cast<double>(std::abs(v));
      }
      const double bound = x.bound / dmin + 1;
      const double mbound =
          std::min(x.bound, static_cast<double>(std::numeric_limits<int32_t>::max()));
      switch (op) {
        case 7: return {ir::Div::make(a.e, d), {bound, 0, 0}};
        case 8: return {ir::FloorDiv::make(a.e, d), {bound, 0, 0}};
        case 9:
          return in_.one_in(2) ? value{ir::Mod::make(a.e, d), {mbound, 0, 0}}
                               : value{ir::FloorMod::make(a.e, d), {mbound, 0, 0}};
        default: return a;
      }
    }
    // Float division, by |b| + 1 >= 1; a / b may be a * (1 / b) in generated code.
    ir::Expr one = ir::FloatImm::make(t, 1.0);
    ir::Expr den = ir::Call::make(ir::CallOp::abs, {b.e}) + one;
    const double ulp = std::ldexp(1.0, 1 - mantissa_bits(t));
    const double bound = x.bound;
    return {ir::Div::make(a.e, den),
            {bound, x.grain,
             x.err + y.err * x.bound + 4 * bound * ulp + (y.bound + 1) * ulp * x.bound}};
  }

  /// A unary operation on `a`.
  value unary(ir::DType t, value a) {
    const value_info& x = a.info;
    if (!t.is_float()) {
      if (in_.one_in(2)) return {ir::Call::make(ir::CallOp::abs, {a.e}), x};
      return {ir::IntImm::make(t, 0) - a.e, x};
    }
    const double ulp = std::ldexp(1.0, 1 - mantissa_bits(t));
    const double approx = std::ldexp(1.0, -18);  // the math intrinsics' allowance
    ir::Expr one = ir::FloatImm::make(t, 1.0);
    auto call = [&](ir::CallOp op, ir::Expr e) { return ir::Call::make(op, {std::move(e)}); };
    // |a| + 1, the argument of log, sqrt and rsqrt
    ir::Expr pos = call(ir::CallOp::abs, a.e) + one;
    const double pos_err = x.err + (x.bound + 1) * ulp;
    switch (in_.pick(12)) {
      case 0: return {call(ir::CallOp::abs, a.e), x};
      case 1: return {ir::FloatImm::make(t, 0.0) - a.e, x};
      case 2:
        if (x.bound > 20) break;
        {
          const double m = std::exp(x.bound);
          return {call(ir::CallOp::exp, a.e), {m, 0, m * x.err + m * approx + m * ulp}};
        }
      case 3: return {call(ir::CallOp::tanh, a.e), {1, 0, x.err + approx}};
      case 4: return {call(ir::CallOp::sigmoid, a.e), {1, 0, 0.25 * x.err + approx}};
      case 5: return {call(ir::CallOp::erf, a.e), {1, 0, 1.2 * x.err + approx}};
      case 6: {
        const double m = std::log(x.bound + 1);
        return {call(ir::CallOp::log, pos), {m, 0, pos_err + (m + 1) * approx}};
      }
      case 7: {
        const double m = std::sqrt(x.bound + 1);
        return {call(ir::CallOp::sqrt, pos), {m, 0, 0.5 * pos_err + m * approx}};
      }
      case 8: return {call(ir::CallOp::rsqrt, pos), {1, 0, 0.5 * pos_err + approx}};
      case 9:
        if (x.bound > 100) break;
        return {call(in_.one_in(2) ? ir::CallOp::sin : ir::CallOp::cos, a.e),
                {1, 0, x.err + approx}};
      default: {
        if (!a.exact()) break;
        static const ir::CallOp r[] = {ir::CallOp::floor, ir::CallOp::ceil, ir::CallOp::round};
        return {call(r[in_.pick(3)], a.e), {x.bound + 1, std::max(x.grain, 0), 0}};
      }
    }
    return {call(ir::CallOp::abs, a.e), x};
  }
};

// --- running a program ---------------------------------------------------------------------------

/// The inputs of a program and the outputs the DAG interpreter computes from them.
struct program_data {
  std::vector<tensor_data> inputs, outputs;
};

inline tensor_data make_input(const ir::Tensor& t, std::mt19937& rng) {
  tensor_data d{t.dtype(), t.num_elements(), {}};
  d.bytes.resize(static_cast<size_t>(d.elements) * t.dtype().bytes());
  const bool wide = !t.name().empty() && t.name().back() == 'w';
  for (int64_t i = 0; i < d.elements; ++i) {
    int64_t k = static_cast<int64_t>(rng() % 41) - 20;  // [-20, 20]
    if (wide)                                           // any value of the type, extremes often
      switch (rng() % 4) {
        case 0: k = t.dtype().bits == 32 ? std::numeric_limits<int32_t>::min() : INT64_MIN; break;
        case 1: k = t.dtype().bits == 32 ? std::numeric_limits<int32_t>::max() : INT64_MAX; break;
        default:
          k = static_cast<int64_t>(uint64_t{rng()} << 32 | rng());
          if (t.dtype().bits == 32) k = static_cast<int32_t>(k);
      }
    if (t.dtype() == ir::DType::f32())
      reinterpret_cast<float*>(d.data())[i] = static_cast<float>(k % 17) / 4;  // [-4, 4]
    else if (t.dtype() == ir::DType::f16())
      reinterpret_cast<uint16_t*>(d.data())[i] = loom::float16(static_cast<float>(k % 17) / 4).bits;
    else if (t.dtype() == ir::DType::bf16())
      reinterpret_cast<uint16_t*>(d.data())[i] =
          loom::bfloat16(static_cast<float>(k % 17) / 4).bits;
    else if (t.dtype() == ir::DType::f64())
      reinterpret_cast<double*>(d.data())[i] = static_cast<double>(k % 17) / 4;
    else if (t.dtype() == ir::DType::i32())
      reinterpret_cast<int32_t*>(d.data())[i] = static_cast<int32_t>(k);
    else
      reinterpret_cast<int64_t*>(d.data())[i] = k;
  }
  return d;
}

inline tensor_data zeros(const ir::Tensor& t) {
  tensor_data d{t.dtype(), t.num_elements(), {}};
  d.bytes.assign(static_cast<size_t>(d.elements) * t.dtype().bytes(), 0);
  return d;
}

/// Fills an output with poison: NaN for floats, 0x5A bytes for integers, so that an element a
/// kernel never writes shows.
inline void poison(tensor_data& d) {
  if (d.dtype == ir::DType::f32())
    std::fill_n(reinterpret_cast<float*>(d.data()), d.elements, NAN);
  else if (d.dtype == ir::DType::f64())
    std::fill_n(reinterpret_cast<double*>(d.data()), d.elements, NAN);
  else if (d.dtype.is_16bit_float())
    std::fill_n(reinterpret_cast<uint16_t*>(d.data()), d.elements, uint16_t{0x7fff});
  else
    std::fill(d.bytes.begin(), d.bytes.end(), 0x5A);
}

/// Compares one output with the reference under `info` (see the file comment); "" when it
/// matches, else the first difference.
inline std::string compare(const tensor_data& got, const tensor_data& want,
                           const value_info& info) {
  auto at = [&](int64_t i) -> std::pair<double, double> {
    if (want.dtype == ir::DType::f32())
      return {reinterpret_cast<const float*>(got.bytes.data())[i],
              reinterpret_cast<const float*>(want.bytes.data())[i]};
    if (want.dtype == ir::DType::f64())
      return {reinterpret_cast<const double*>(got.bytes.data())[i],
              reinterpret_cast<const double*>(want.bytes.data())[i]};
    if (want.dtype.is_16bit_float()) {
      const uint16_t g = reinterpret_cast<const uint16_t*>(got.bytes.data())[i];
      const uint16_t w = reinterpret_cast<const uint16_t*>(want.bytes.data())[i];
      if (want.dtype.is_bfloat())
        return {static_cast<float>(loom::bfloat16::from_bits(g)),
                static_cast<float>(loom::bfloat16::from_bits(w))};
      return {static_cast<float>(loom::float16::from_bits(g)),
              static_cast<float>(loom::float16::from_bits(w))};
    }
    if (want.dtype == ir::DType::i32())
      return {static_cast<double>(reinterpret_cast<const int32_t*>(got.bytes.data())[i]),
              static_cast<double>(reinterpret_cast<const int32_t*>(want.bytes.data())[i])};
    return {0, 0};
  };
  for (int64_t i = 0; i < want.elements; ++i) {
    bool ok;
    double g, w;
    if (want.dtype == ir::DType::i64()) {
      const int64_t gi = reinterpret_cast<const int64_t*>(got.bytes.data())[i];
      const int64_t wi = reinterpret_cast<const int64_t*>(want.bytes.data())[i];
      ok = gi == wi;
      g = static_cast<double>(gi), w = static_cast<double>(wi);
      if (!ok) {
        std::ostringstream os;
        os << "element " << i << ": got " << gi << ", expected " << wi << " (int64, exact)";
        return os.str();
      }
      continue;
    }
    std::tie(g, w) = at(i);
    if (!want.dtype.is_float() || info.err == 0)
      ok = g == w || (std::isnan(g) && std::isnan(w));
    else
      ok = g == w || std::abs(g - w) <= 4 * info.err;  // NaN fails
    if (!ok) {
      std::ostringstream os;
      os.precision(17);
      os << "element " << i << ": got " << g << ", expected " << w;
      if (want.dtype.is_float() && info.err > 0)
        os << " (tolerance " << 4 * info.err << ")";
      else
        os << " (exact)";
      return os.str();
    }
  }
  return "";
}

/// What one program's check came to.
struct check_result {
  std::string refused;  ///< a loom::user_error that refused the program or its schedule
  std::string finding;  ///< a wrong result, an internal error, an unexpected exception: a bug
  int compared = 0;     ///< backends whose outputs were compared with the interpreter's
  int schedule = -1;    ///< 0 none, 1 random steps, 2 a sampled search program
  std::string program, record;  ///< the DAG and the schedule's record, for the report
};

/// How a lowered kernel is run on its arguments (the JIT, in tests/jit and the fuzz target).
using kernel_runner = std::function<void(const ir::LoweredFunc&, std::vector<void*>&)>;

namespace detail {

/// Runs `f` with `run` on copies of the inputs and poisoned outputs and compares every output
/// with the reference; "" when all match.
inline std::string run_backend(const program& p, const program_data& ref, const ir::LoweredFunc& f,
                               const kernel_runner& run) {
  std::vector<tensor_data> ins = ref.inputs, outs = ref.outputs;
  std::vector<void*> ptrs;
  for (auto& i : ins) ptrs.push_back(i.data());
  for (auto& o : outs) {
    poison(o);
    ptrs.push_back(o.data());
  }
  try {
    run(f, ptrs);
  } catch (const std::exception& e) {
    return std::string("running the kernel threw: ") + e.what();
  }
  for (size_t o = 0; o < outs.size(); ++o) {
    const std::string m = compare(outs[o], ref.outputs[o], p.outputs[o]);
    if (!m.empty()) return "output '" + p.dag->outputs()[o].name() + "' " + m;
  }
  return "";
}

/// The schedule the bytes choose for `dag` (see the file comment).
inline loom::sched::State random_state(const std::shared_ptr<const loom::ComputeDAG>& dag,
                                       byte_reader& in, int& mode) {
  mode = in.pick(3);
  if (mode == 1) {
    std::mt19937 rng(in.word());
    random_schedule_stats stats;
    return random_schedule(dag, rng, 2 + in.pick(14), stats);
  }
  if (mode == 2) {
    const loom::Task task(dag, test_target());
    loom::search::SearchOptions options;
    options.allow_non_divisible_tiles = in.one_in(2);
    options.non_divisible_probability = 0.5;
    const auto sketches = loom::search::generate_sketches(task, options);
    if (!sketches.empty()) {
      const auto& sketch = sketches[in.pick(static_cast<int>(sketches.size()))];
      std::mt19937_64 rng(in.word());
      for (int attempt = 0; attempt < 8; ++attempt) {
        auto s = loom::search::try_sample_program(sketch, task, options, rng);
        if (!s) continue;
        // Sometimes the evolutionary search's mutations, and random steps on top.
        if (in.one_in(2)) {
          const loom::search::SketchContext ctx(task, options);
          for (int m = 1 + in.pick(3); m-- > 0;)
            if (auto t = loom::search::mutate(ctx, *s, loom::search::cpu_mutation_rules(), rng))
              s = std::move(t);
        }
        if (in.one_in(3)) {
          std::mt19937 steps(in.word());
          for (int c = 1 + in.pick(6); c-- > 0;)
            if (auto step = random_step(*s, steps)) try {
                s->apply(*step);
              } catch (const loom::user_error&) {
              }
        }
        return *s;
      }
    }
  }
  mode = 0;
  return loom::sched::State(dag);
}

}  // namespace detail

/// Lowers `state` (a schedule of `p`) and runs the loop nest with the loop-nest interpreter and
/// with `jit` (when given), comparing each with the DAG interpreter on inputs drawn from
/// `data_seed`. Fills `r`: a loom::user_error while evaluating or lowering is a refusal,
/// anything else that goes wrong a finding.
inline void check_schedule(const program& p, const loom::sched::State& state, uint32_t data_seed,
                           const kernel_runner* jit, check_result& r) {
  const auto guard = [&](const char* what, auto&& body) -> bool {
    try {
      body();
      return true;
    } catch (const loom::user_error& e) {
      r.refused = std::string(what) + ": " + e.what();
    } catch (const std::exception& e) {
      r.finding = std::string(what) + " threw: " + e.what();
    }
    return false;
  };
  r.program = p.describe();
  r.record = loom::sched::to_record(state.steps());
  program_data ref;
  if (!guard("the DAG interpreter", [&] {
        std::mt19937 rng(data_seed);
        std::vector<void*> ptrs;
        for (const auto& t : p.dag->inputs()) ref.inputs.push_back(make_input(t, rng));
        for (const auto& t : p.dag->outputs()) ref.outputs.push_back(zeros(t));
        for (auto& i : ref.inputs) ptrs.push_back(i.data());
        for (auto& o : ref.outputs) ptrs.push_back(o.data());
        loom::evaluate(*p.dag, ptrs);
      }))
    return;
  ir::LoweredFunc f;
  if (!guard("lowering", [&] { f = loom::lower::lower(state, "difffuzz"); })) return;
  std::string m = detail::run_backend(
      p, ref, f,
      [](const ir::LoweredFunc& g, std::vector<void*>& ptrs) { loom::lower::interpret(g, ptrs); });
  ++r.compared;
  if (!m.empty()) {
    r.finding = "loop-nest interpreter: " + m;
    return;
  }
  if (jit) {
    m = detail::run_backend(p, ref, f, *jit);
    ++r.compared;
    if (!m.empty()) r.finding = "JIT: " + m;
  }
}

/// Builds the program the bytes describe, schedules it and checks it (check_schedule).
inline check_result check_program(const uint8_t* data, size_t size, const kernel_runner* jit) {
  check_result r;
  byte_reader in(data, size);
  program p;
  std::optional<loom::sched::State> state;
  try {
    p = generator(in).make();
    r.program = p.describe();
    state = detail::random_state(p.dag, in, r.schedule);
  } catch (const loom::user_error& e) {
    r.refused = std::string("generating or scheduling: ") + e.what();
    return r;
  } catch (const std::exception& e) {
    r.finding = std::string("generating or scheduling threw: ") + e.what();
    return r;
  }
  check_schedule(p, *state, in.word(), jit, r);
  return r;
}

/// The report of a finding: what went wrong, the program and the schedule.
inline std::string report(const check_result& r) {
  return r.finding + "\nprogram:\n" + r.program + "schedule (" + std::to_string(r.schedule) +
         "): " + r.record;
}

}  // namespace loom_test::difffuzz

#endif  // LOOM_TESTS_SUPPORT_RANDOM_PROGRAM_HPP
