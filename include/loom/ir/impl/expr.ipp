// Bodies of loom/ir/expr.hpp.
#include "loom/ir/expr.hpp"

#include <cmath>
#include <limits>
#include <set>

LOOM_BEGIN_NAMESPACE
namespace ir {

LOOM_DECL Expr::Expr(int v) : Expr(IntImm::make(DType::index(), v)) {}
LOOM_DECL Expr::Expr(int64_t v) : Expr(IntImm::make(DType::index(), v)) {}
LOOM_DECL Expr::Expr(float v) : Expr(FloatImm::make(DType::f32(), v)) {}
LOOM_DECL Expr::Expr(double v) : Expr(FloatImm::make(DType::f64(), v)) {}

LOOM_DECL Expr Variable::make(std::string name, DType t) {
  LOOM_USER_CHECK(!name.empty(), "loom.ir.E001") << "a variable needs a non-empty name";
  return new Variable(std::move(name), t);
}

namespace detail {
inline int64_t wrap_to(DType t, int64_t v) {
  if (t.is_bool()) return v != 0;
  if (t.bits == 64) return v;
  const int bits = t.bits;
  uint64_t mask = (uint64_t{1} << bits) - 1;
  uint64_t u = static_cast<uint64_t>(v) & mask;
  if (t.is_int() && (u >> (bits - 1)) & 1) u |= ~mask;  // sign-extend
  return static_cast<int64_t>(u);
}
}  // namespace detail

LOOM_DECL Expr IntImm::make(DType t, int64_t value) {
  LOOM_USER_CHECK(t.is_integral(), "loom.ir.E002")
      << "IntImm needs an integer or bool type, got " << to_string(t);
  // Small index constants (offsets, strides, extents, coefficients) are made by the thousand
  // while lowering: nodes are immutable, so each thread shares one node per value.
  constexpr int64_t lo = -64, hi = 1024;
  if (t == DType::index() && value >= lo && value < hi) {
    thread_local std::vector<Expr> shared(static_cast<size_t>(hi - lo));
    Expr& e = shared[static_cast<size_t>(value - lo)];
    if (!e.defined()) e = Expr(new IntImm(t, value));
    return e;
  }
  return new IntImm(t, detail::wrap_to(t, value));
}

LOOM_DECL Expr FloatImm::make(DType t, double value) {
  LOOM_USER_CHECK(t.is_float(), "loom.ir.E003")
      << "FloatImm needs a float type, got " << to_string(t);
  if (t.bits == 32) value = static_cast<float>(value);
  if (t.is_16bit_float()) value = ::loom::detail::round_to_half(t.is_bfloat(), value);
  return new FloatImm(t, value);
}

LOOM_DECL Expr Cast::make(DType t, Expr value) {
  LOOM_USER_CHECK(value.defined(), "loom.ir.E004") << "cast of an undefined expression";
  LOOM_USER_CHECK(t.lanes == value.dtype().lanes, "loom.ir.E005")
      << "cast from " << to_string(value.dtype()) << " to " << to_string(t)
      << " changes the lane count";
  if (value.dtype() == t) return value;
  return new Cast(t, std::move(value));
}

template <NodeKind K>
Expr BinaryNode<K>::make(Expr a, Expr b) {
  LOOM_USER_CHECK(a.defined() && b.defined(), "loom.ir.E006")
      << node_kind_name(K) << " of an undefined expression";
  LOOM_USER_CHECK(a.dtype() == b.dtype(), "loom.ir.E007")
      << node_kind_name(K) << " of mismatched types " << to_string(a.dtype()) << " and "
      << to_string(b.dtype()) << "; insert a cast";
  DType t = a.dtype();
  if constexpr (K == NodeKind::And || K == NodeKind::Or) {
    LOOM_USER_CHECK(t.is_bool(), "loom.ir.E008")
        << node_kind_name(K) << " needs bool operands, got " << to_string(t);
  } else if constexpr (K == NodeKind::EQ || K == NodeKind::NE || K == NodeKind::LT ||
                       K == NodeKind::LE || K == NodeKind::GT || K == NodeKind::GE) {
    t = DType::boolean().with_lanes(t.lanes);
  } else {
    LOOM_USER_CHECK(!t.is_bool(), "loom.ir.E009")
        << "arithmetic " << node_kind_name(K) << " on bool operands";
    if constexpr (K == NodeKind::FloorDiv || K == NodeKind::FloorMod || K == NodeKind::BitXor) {
      LOOM_USER_CHECK(t.is_integral(), "loom.ir.E010")
          << node_kind_name(K) << " needs integer operands, got " << to_string(t);
    }
  }
  return new BinaryNode<K>(t, std::move(a), std::move(b));
}

LOOM_DECL std::pair<const Expr*, const Expr*> binary_operands(const Expr& e) {
  switch (e.kind()) {
#define LOOM_X(name)        \
  case NodeKind::name: {    \
    auto* n = e.as<name>(); \
    return {&n->a, &n->b};  \
  }
    LOOM_FOR_EACH_BINARY(LOOM_X)
#undef LOOM_X
    default: break;
  }
  LOOM_INTERNAL_CHECK(false) << "binary_operands of " << node_kind_name(e.kind());
  return {nullptr, nullptr};
}

LOOM_DECL Expr make_binary(NodeKind k, Expr a, Expr b) {
  switch (k) {
#define LOOM_X(name) \
  case NodeKind::name: return name::make(std::move(a), std::move(b));
    LOOM_FOR_EACH_BINARY(LOOM_X)
#undef LOOM_X
    default: break;
  }
  LOOM_INTERNAL_CHECK(false) << "make_binary of " << node_kind_name(k);
  return {};
}

LOOM_DECL Expr Not::make(Expr a) {
  LOOM_USER_CHECK(a.defined() && a.dtype().is_bool(), "loom.ir.E011")
      << "logical not needs a bool operand";
  DType t = a.dtype();
  return new Not(t, std::move(a));
}

LOOM_DECL Expr Select::make(Expr c, Expr t, Expr f) {
  LOOM_USER_CHECK(c.defined() && t.defined() && f.defined(), "loom.ir.E012")
      << "if_then_else of an undefined expression";
  LOOM_USER_CHECK(c.dtype().is_bool(), "loom.ir.E013")
      << "the condition of if_then_else must be bool, got " << to_string(c.dtype());
  LOOM_USER_CHECK(t.dtype() == f.dtype(), "loom.ir.E014")
      << "the branches of if_then_else have different types " << to_string(t.dtype()) << " and "
      << to_string(f.dtype());
  LOOM_USER_CHECK(c.dtype().lanes == 1 || c.dtype().lanes == t.dtype().lanes, "loom.ir.E041")
      << "if_then_else with a " << c.dtype().lanes << "-lane condition and " << t.dtype().lanes
      << "-lane branches";
  DType ty = t.dtype();
  return new Select(ty, std::move(c), std::move(t), std::move(f));
}

LOOM_DECL Expr Call::make(CallOp op, std::vector<Expr> args) {
  LOOM_USER_CHECK(static_cast<int>(args.size()) == call_op_arity(op), "loom.ir.E015")
      << call_op_name(op) << " takes " << call_op_arity(op) << " argument(s), got " << args.size();
  DType t = args[0].dtype();
  for (auto& a : args)
    LOOM_USER_CHECK(a.defined() && a.dtype() == t, "loom.ir.E016")
        << call_op_name(op) << " needs arguments of one type";
  LOOM_USER_CHECK(t.is_float() || (op == CallOp::abs && t.is_integral() && !t.is_bool()),
                  "loom.ir.E017")
      << call_op_name(op) << " needs a float argument, got " << to_string(t)
      << "; cast it to float first";
  return new Call(t, op, std::move(args));
}

LOOM_DECL Expr TensorRead::make(const Tensor& tensor, std::vector<Expr> indices) {
  LOOM_USER_CHECK(tensor.defined(), "loom.ir.E018") << "read of an undefined tensor";
  LOOM_USER_CHECK(static_cast<int>(indices.size()) == tensor.rank(), "loom.ir.E019")
      << "tensor '" << tensor.name() << "' has rank " << tensor.rank() << " but is read with "
      << indices.size() << " indices";
  for (size_t d = 0; d < indices.size(); ++d) {
    LOOM_USER_CHECK(indices[d].defined(), "loom.ir.E020")
        << "index " << d << " of '" << tensor.name() << "' is undefined";
    DType t = indices[d].dtype();
    LOOM_USER_CHECK(t.is_integral() && !t.is_bool(), "loom.ir.E021")
        << "index " << d << " of '" << tensor.name() << "' has type " << to_string(t)
        << "; indices must be integers";
    if (t != DType::index()) indices[d] = Cast::make(DType::index(), indices[d]);
  }
  return new TensorRead(tensor.dtype(), tensor.ptr(), std::move(indices));
}

LOOM_DECL Buffer make_buffer(std::string name, DType dtype, std::vector<int64_t> shape,
                             MemoryScope scope, int arg_index) {
  auto* b = new BufferNode;
  b->name = std::move(name);
  b->dtype = dtype;
  b->shape = std::move(shape);
  b->scope = scope;
  b->arg_index = arg_index;
  return Buffer(b);
}

LOOM_DECL Expr Load::make(Buffer buffer, Expr index) {
  LOOM_INTERNAL_CHECK(buffer && index.defined()) << "Load of an undefined buffer or index";
  LOOM_INTERNAL_CHECK(index.dtype().element_of() == DType::index())
      << "Load index of type " << to_string(index.dtype());
  DType t = buffer->dtype.with_lanes(index.dtype().lanes);
  return new Load(t, std::move(buffer), std::move(index));
}

LOOM_DECL Expr Ramp::make(Expr base, Expr stride, int lanes) {
  LOOM_INTERNAL_CHECK(lanes > 1 && base.dtype().lanes == 1 && stride.dtype() == base.dtype())
      << "Ramp of " << lanes << " lanes over " << to_string(base.dtype());
  DType t = base.dtype().with_lanes(lanes);
  return new Ramp(t, std::move(base), std::move(stride), lanes);
}

LOOM_DECL Expr Broadcast::make(Expr value, int lanes) {
  LOOM_INTERNAL_CHECK(lanes > 1 && value.dtype().lanes == 1)
      << "Broadcast of " << lanes << " lanes over " << to_string(value.dtype());
  DType t = value.dtype().with_lanes(lanes);
  return new Broadcast(t, std::move(value), lanes);
}

LOOM_DECL Expr reduce_identity(ReduceOp op, DType t) {
  switch (op) {
    case ReduceOp::Sum: return make_const(t, 0);
    case ReduceOp::Prod: return make_const(t, 1);
    case ReduceOp::Min:
      if (t.is_float()) return FloatImm::make(t, std::numeric_limits<double>::infinity());
      return IntImm::make(t, t.bits == 64 ? std::numeric_limits<int64_t>::max()
                                          : std::numeric_limits<int32_t>::max());
    case ReduceOp::Max:
      if (t.is_float()) return FloatImm::make(t, -std::numeric_limits<double>::infinity());
      return IntImm::make(t, t.bits == 64 ? std::numeric_limits<int64_t>::min()
                                          : std::numeric_limits<int32_t>::min());
  }
  return {};
}

LOOM_DECL Expr reduce_combine(ReduceOp op, const Expr& acc, const Expr& value) {
  const bool fp = acc.dtype().is_float();
  switch (op) {
    case ReduceOp::Sum: return Add::make(acc, value);
    case ReduceOp::Prod: return Mul::make(acc, value);
    case ReduceOp::Min:
      return fp ? Select::make(LT::make(value, acc), value, acc) : Min::make(acc, value);
    case ReduceOp::Max:
      return fp ? Select::make(GT::make(value, acc), value, acc) : Max::make(acc, value);
  }
  return {};
}

LOOM_DECL Expr Reduce::make(ReduceOp op, Expr source, std::vector<IterVar> axes, Expr condition) {
  LOOM_USER_CHECK(source.defined(), "loom.ir.E022") << "reduction of an undefined expression";
  LOOM_USER_CHECK(!axes.empty(), "loom.ir.E023")
      << reduce_op_name(op) << " needs at least one reduce axis";
  LOOM_USER_CHECK(!source.dtype().is_bool(), "loom.ir.E024")
      << reduce_op_name(op) << " over bool values; cast them to int32 first";
  for (auto& a : axes) {
    LOOM_USER_CHECK(a.kind == IterKind::Reduce && a.variable(), "loom.ir.E025")
        << reduce_op_name(op) << " over a spatial axis; create it with reduce_axis()";
    LOOM_USER_CHECK(a.extent > 0, "loom.ir.E026")
        << "reduce axis '" << a.name() << "' has extent " << a.extent << "; it must be positive";
  }
  if (condition.defined()) {
    LOOM_USER_CHECK(condition.dtype().is_bool(), "loom.ir.E027")
        << "the condition of a reduction must be bool, got " << to_string(condition.dtype());
  }
  DType t = source.dtype();
  return new Reduce(t, op, std::move(source), std::move(axes), std::move(condition));
}

LOOM_DECL int64_t Tensor::num_elements() const {
  int64_t n = 1;
  for (int64_t s : node_->shape) n *= s;
  return n;
}

namespace detail {
inline void check_shape(const std::string& name, const std::vector<int64_t>& shape) {
  LOOM_USER_CHECK(!name.empty(), "loom.ir.E028") << "a tensor needs a non-empty name";
  for (size_t d = 0; d < shape.size(); ++d)
    LOOM_USER_CHECK(shape[d] > 0, "loom.ir.E029")
        << "tensor '" << name << "' has extent " << shape[d] << " in dimension " << d
        << "; extents must be positive";
}
}  // namespace detail

LOOM_DECL Tensor make_placeholder(std::string name, DType dtype, std::vector<int64_t> shape) {
  detail::check_shape(name, shape);
  LOOM_USER_CHECK(!dtype.is_bool() && dtype.lanes == 1, "loom.ir.E030")
      << "tensor '" << name << "' has element type " << to_string(dtype)
      << "; use float32, float64, int32 or int64";
  auto* n = new TensorNode;
  n->name = std::move(name);
  n->dtype = dtype;
  n->shape = std::move(shape);
  n->op = OpKind::Placeholder;
  return Tensor(::loom::detail::intrusive_ptr<const TensorNode>(n));
}

namespace detail {

// Walks a compute body to check the structural rules that make() of single nodes cannot see:
// a Reduce only at the top and every variable bound by an axis or an enclosing Reduce.
struct body_checker {
  const std::string& compute_name;
  std::set<const Variable*> bound;
  std::set<const Variable*> reduce_vars_seen;

  void walk(const Expr& e, bool top) {
    switch (e.kind()) {
      case NodeKind::IntImm:
      case NodeKind::FloatImm: return;
      case NodeKind::Variable: {
        auto* v = e.as<Variable>();
        if (bound.count(v)) return;
        LOOM_USER_CHECK(!reduce_vars_seen.count(v), "loom.dsl.E104")
            << "reduce axis '" << v->name << "' is used outside a reduction in compute '"
            << compute_name << "'; use it only inside sum/min/max/prod over '" << v->name << "'";
        LOOM_USER_FAIL("loom.ir.E031") << "variable '" << v->name << "' in compute '"
                                       << compute_name << "' is neither an axis of it nor a "
                                       << "reduce axis of an enclosing reduction";
        return;
      }
      case NodeKind::Reduce: {
        auto* r = e.as<Reduce>();
        LOOM_USER_CHECK(top, "loom.dsl.E105")
            << "a reduction must be the whole body of compute '" << compute_name
            << "'; compute the reduction in its own tensor and use that tensor here";
        for (auto& a : r->axes) {
          LOOM_USER_CHECK(!bound.count(a.variable()), "loom.ir.E032")
              << "axis '" << a.name() << "' is bound twice in compute '" << compute_name << "'";
          bound.insert(a.variable());
        }
        walk(r->source, false);
        if (r->condition.defined()) walk(r->condition, false);
        return;
      }
      case NodeKind::Cast: return walk(e.as<Cast>()->value, false);
      case NodeKind::Not: return walk(e.as<Not>()->a, false);
      case NodeKind::Select: {
        auto* s = e.as<Select>();
        walk(s->condition, false);
        walk(s->true_value, false);
        walk(s->false_value, false);
        return;
      }
      case NodeKind::Call:
        for (auto& a : e.as<Call>()->args) walk(a, false);
        return;
      case NodeKind::TensorRead:
        for (auto& i : e.as<TensorRead>()->indices) walk(i, false);
        return;
      case NodeKind::Load:
      case NodeKind::Ramp:
      case NodeKind::Broadcast:
        LOOM_USER_FAIL("loom.ir.E036")
            << "compute '" << compute_name << "' contains a " << node_kind_name(e.kind())
            << ", which only lowered loop nests may contain";
        return;
      default: {
        auto [a, b] = binary_operands(e);
        walk(*a, false);
        walk(*b, false);
      }
    }
  }
};

inline void collect_reduce_vars(const Expr& e, std::set<const Variable*>& out) {
  if (auto* r = e.as<Reduce>())
    for (auto& a : r->axes) out.insert(a.variable());
}

}  // namespace detail

LOOM_DECL Tensor make_compute(std::string name, std::vector<IterVar> axes, Expr body,
                              std::string tag) {
  std::vector<int64_t> shape;
  for (auto& a : axes) {
    LOOM_USER_CHECK(a.variable() && a.kind == IterKind::Spatial, "loom.ir.E033")
        << "the axes of compute '" << name << "' must be spatial variables";
    shape.push_back(a.extent);
  }
  detail::check_shape(name, shape);
  LOOM_USER_CHECK(body.defined(), "loom.ir.E034") << "compute '" << name << "' has no body";
  LOOM_USER_CHECK(!body.dtype().is_bool() && body.dtype().lanes == 1, "loom.ir.E035")
      << "compute '" << name << "' produces " << to_string(body.dtype())
      << "; cast a condition to a number type with cast<T>()";
  detail::body_checker checker{name, {}, {}};
  for (auto& a : axes) checker.bound.insert(a.variable());
  detail::collect_reduce_vars(body, checker.reduce_vars_seen);
  checker.walk(body, true);
  auto* n = new TensorNode;
  n->name = std::move(name);
  n->dtype = body.dtype();
  n->shape = std::move(shape);
  n->op = OpKind::Compute;
  n->axes = std::move(axes);
  n->body = std::move(body);
  n->tag = std::move(tag);
  return Tensor(::loom::detail::intrusive_ptr<const TensorNode>(n));
}

namespace detail {
inline void collect_reads(const Expr& e, std::vector<Tensor>& out) {
  switch (e.kind()) {
    case NodeKind::IntImm:
    case NodeKind::FloatImm:
    case NodeKind::Variable: return;
    case NodeKind::Reduce: {
      auto* r = e.as<Reduce>();
      collect_reads(r->source, out);
      if (r->condition.defined()) collect_reads(r->condition, out);
      return;
    }
    case NodeKind::Cast: return collect_reads(e.as<Cast>()->value, out);
    case NodeKind::Not: return collect_reads(e.as<Not>()->a, out);
    case NodeKind::Select: {
      auto* s = e.as<Select>();
      collect_reads(s->condition, out);
      collect_reads(s->true_value, out);
      collect_reads(s->false_value, out);
      return;
    }
    case NodeKind::Call:
      for (auto& a : e.as<Call>()->args) collect_reads(a, out);
      return;
    case NodeKind::TensorRead: {
      auto* r = e.as<TensorRead>();
      Tensor t(r->tensor);
      bool seen = false;
      for (auto& o : out) seen = seen || o.same_as(t);
      if (!seen) out.push_back(t);
      for (auto& i : r->indices) collect_reads(i, out);
      return;
    }
    case NodeKind::Load:
    case NodeKind::Ramp:
    case NodeKind::Broadcast: return;
    default: {
      auto [a, b] = binary_operands(e);
      collect_reads(*a, out);
      collect_reads(*b, out);
    }
  }
}

// Literals in hand-written IR: an integer or float constant adopts the other operand's type.
inline void match_types(Expr& a, Expr& b) {
  if (a.dtype() == b.dtype()) return;
  auto adopt = [](Expr& c, DType t) {
    if (auto* i = c.as<IntImm>()) {
      c = make_const(t, static_cast<double>(i->value));
      if (t.is_integral()) c = IntImm::make(t, i->value);
      return true;
    }
    if (auto* f = c.as<FloatImm>(); f && t.is_float()) {
      c = FloatImm::make(t, f->value);
      return true;
    }
    return false;
  };
  if (adopt(b, a.dtype())) return;
  adopt(a, b.dtype());
}
}  // namespace detail

LOOM_DECL std::vector<Tensor> input_tensors(const Tensor& t) {
  std::vector<Tensor> out;
  if (t->op == OpKind::Compute) detail::collect_reads(t->body, out);
  return out;
}

LOOM_DECL Expr make_const(DType t, double value) {
  if (t.is_float()) return FloatImm::make(t, value);
  return IntImm::make(t, static_cast<int64_t>(value));
}

LOOM_DECL const int64_t* as_const_int(const Expr& e) {
  if (!e.defined()) return nullptr;
  if (auto* i = e.as<IntImm>()) return &i->value;
  return nullptr;
}

LOOM_DECL bool is_const_int(const Expr& e, int64_t v) {
  auto* c = as_const_int(e);
  return c && *c == v;
}

#define LOOM_IR_OPERATOR(op, Node)                 \
  LOOM_DECL Expr op(Expr a, Expr b) {              \
    detail::match_types(a, b);                     \
    return Node::make(std::move(a), std::move(b)); \
  }
LOOM_IR_OPERATOR(operator+, Add)
LOOM_IR_OPERATOR(operator-, Sub)
LOOM_IR_OPERATOR(operator*, Mul)
LOOM_IR_OPERATOR(operator<, LT)
LOOM_IR_OPERATOR(operator<=, LE)
LOOM_IR_OPERATOR(operator>, GT)
LOOM_IR_OPERATOR(operator>=, GE)
LOOM_IR_OPERATOR(operator&&, And)
LOOM_IR_OPERATOR(operator||, Or)
LOOM_IR_OPERATOR(floordiv, FloorDiv)
LOOM_IR_OPERATOR(floormod, FloorMod)
LOOM_IR_OPERATOR(bitxor, BitXor)
LOOM_IR_OPERATOR(min, Min)
LOOM_IR_OPERATOR(max, Max)
#undef LOOM_IR_OPERATOR

}  // namespace ir
LOOM_END_NAMESPACE
