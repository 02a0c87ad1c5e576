// Part of the ONNX importer (loom/onnx/impl/import.ipp includes it after importer.ipp): the
// element-wise operators. Math and activations, Pow, the variadic Max/Min/Sum/Mean, Clip, PRelu,
// Cast, and Identity and Dropout, whose output is their input.
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

LOOM_BEGIN_NAMESPACE
namespace detail {

inline void Importer::unary(const ::onnx::NodeProto& n) {
  const Value& x = in(0);
  const std::string& op = n.op_type();
  const ir::DType t = x.t.dtype();
  const bool is_float = t.code == ir::DType::Code::Float;
  auto c = [&](double v) { return ir::make_const(t, v); };
  auto call = [](ir::CallOp o, ir::Expr a) { return ir::Call::make(o, {std::move(a)}); };
  std::function<ir::Expr(const std::vector<ir::Expr>&)> f;
  const double alpha = attr_float("alpha", op == "LeakyRelu"     ? 0.01f
                                           : op == "HardSigmoid" ? 0.2f
                                           : op == "Selu"        ? 1.67326319217681884765625f
                                                                 : 1.0f);
  const double beta = attr_float("beta", 0.5f);
  const double gamma = attr_float("gamma", 1.05070102214813232421875f);
  static const std::map<std::string, ir::CallOp> calls = {
      {"Exp", ir::CallOp::exp},   {"Log", ir::CallOp::log},         {"Sqrt", ir::CallOp::sqrt},
      {"Tanh", ir::CallOp::tanh}, {"Sigmoid", ir::CallOp::sigmoid}, {"Erf", ir::CallOp::erf},
      {"Abs", ir::CallOp::abs},   {"Floor", ir::CallOp::floor},     {"Ceil", ir::CallOp::ceil},
      {"Sin", ir::CallOp::sin},   {"Cos", ir::CallOp::cos}};
  if (auto it = calls.find(op); it != calls.end()) {
    LOOM_USER_CHECK(is_float || op == "Abs", "loom.onnx.E1104")
        << what_ << ": " << where() << ": " << op << " of " << ir::to_string(t)
        << " (loom computes it on float tensors)";
    f = [&, o = it->second](const std::vector<ir::Expr>& v) {
      if (o == ir::CallOp::abs && !is_float)
        return ir::Select::make(ir::LT::make(v[0], c(0)), ir::Sub::make(c(0), v[0]), v[0]);
      return call(o, v[0]);
    };
  } else if (op == "Relu") {
    f = [&](const std::vector<ir::Expr>& v) { return ir::Max::make(v[0], c(0)); };
  } else if (op == "Neg") {
    f = [&](const std::vector<ir::Expr>& v) { return ir::Sub::make(c(0), v[0]); };
  } else {
    LOOM_USER_CHECK(is_float, "loom.onnx.E1104")
        << what_ << ": " << where() << ": " << op << " of " << ir::to_string(t)
        << " (loom computes it on float tensors)";
    if (op == "Reciprocal") {
      f = [&](const std::vector<ir::Expr>& v) { return ir::Div::make(c(1), v[0]); };
    } else if (op == "LeakyRelu") {
      f = [&](const std::vector<ir::Expr>& v) {
        return ir::Select::make(ir::LT::make(v[0], c(0)), ir::Mul::make(v[0], c(alpha)), v[0]);
      };
    } else if (op == "Elu") {
      f = [&](const std::vector<ir::Expr>& v) {
        return ir::Select::make(
            ir::LT::make(v[0], c(0)),
            ir::Mul::make(c(alpha), ir::Sub::make(call(ir::CallOp::exp, v[0]), c(1))), v[0]);
      };
    } else if (op == "Selu") {
      f = [&](const std::vector<ir::Expr>& v) {
        return ir::Mul::make(
            c(gamma),
            ir::Select::make(
                ir::LE::make(v[0], c(0)),
                ir::Sub::make(ir::Mul::make(c(alpha), call(ir::CallOp::exp, v[0])), c(alpha)),
                v[0]));
      };
    } else if (op == "HardSigmoid") {
      f = [&](const std::vector<ir::Expr>& v) {
        return ir::Max::make(
            c(0), ir::Min::make(c(1), ir::Add::make(ir::Mul::make(c(alpha), v[0]), c(beta))));
      };
    } else if (op == "HardSwish") {
      f = [&](const std::vector<ir::Expr>& v) {
        return ir::Mul::make(
            v[0],
            ir::Max::make(
                c(0), ir::Min::make(c(1), ir::Add::make(ir::Mul::make(c(1.0 / 6), v[0]), c(0.5)))));
      };
    } else if (op == "Softplus") {
      f = [&](const std::vector<ir::Expr>& v) {
        return call(ir::CallOp::log, ir::Add::make(call(ir::CallOp::exp, v[0]), c(1)));
      };
    } else if (op == "Softsign") {
      f = [&](const std::vector<ir::Expr>& v) {
        return ir::Div::make(v[0], ir::Add::make(c(1), call(ir::CallOp::abs, v[0])));
      };
    } else if (op == "Mish") {
      f = [&](const std::vector<ir::Expr>& v) {
        return ir::Mul::make(
            v[0], call(ir::CallOp::tanh,
                       call(ir::CallOp::log, ir::Add::make(call(ir::CallOp::exp, v[0]), c(1)))));
      };
    } else {  // Gelu (opset 20), listed for models exported by newer exporters
      const std::string approximate = attr_string("approximate", "none");
      if (approximate != "none")
        unsupported_attribute("approximate", "is '" + approximate + "' (only 'none')");
      f = [&](const std::vector<ir::Expr>& v) {
        return ir::Mul::make(
            ir::Mul::make(c(0.5), v[0]),
            ir::Add::make(c(1), call(ir::CallOp::erf, ir::Mul::make(v[0], c(M_SQRT1_2)))));
      };
    }
  }
  emit(elementwise({x}, f,
                   [&] {
                     std::string tag;
                     for (char ch : op)
                       tag += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
                     return tag;
                   }()),
       {x});
}

inline void Importer::binary(const ::onnx::NodeProto& n) {
  const Value& a = in(0);
  const Value& b = in(1);
  const std::string& op = n.op_type();
  if (op == "Pow") {
    // x^2 and x^0.5 (variance, norms, GELU's tanh form) as a product and a square root: exact,
    // vectorizable, and what the exporters mean.
    LOOM_USER_CHECK(a.t.dtype().code == ir::DType::Code::Float, "loom.onnx.E1104")
        << what_ << ": " << where() << ": Pow of " << ir::to_string(a.t.dtype());
    if (b.constant() && b.t.num_elements() == 1 && !a.constant() && b.rank() <= a.rank()) {
      const double e = as_doubles(b)[0];
      std::function<ir::Expr(const std::vector<ir::Expr>&)> f;
      if (e == 1)
        f = [](const std::vector<ir::Expr>& v) { return v[0]; };
      else if (e == 2)
        f = [](const std::vector<ir::Expr>& v) { return ir::Mul::make(v[0], v[0]); };
      else if (e == 3)
        f = [](const std::vector<ir::Expr>& v) {
          return ir::Mul::make(ir::Mul::make(v[0], v[0]), v[0]);
        };
      else if (e == 0.5)
        f = [](const std::vector<ir::Expr>& v) { return ir::Call::make(ir::CallOp::sqrt, {v[0]}); };
      if (f) {
        emit(elementwise({a}, f, "pow"), {a});
        return;
      }
    }
    Value bb = b;
    if (b.t.dtype() != a.t.dtype()) {
      LOOM_USER_CHECK(b.constant(), "loom.onnx.E1104")
          << what_ << ": " << where() << ": an exponent of type " << ir::to_string(b.t.dtype())
          << " computed at run time (loom takes it in the base's type)";
      bb = fold(untyped::cast(b.t, a.t.dtype(), fresh_name(node_->input(1) + "_cast")));
    }
    emit(elementwise(
             {a, bb},
             [](const std::vector<ir::Expr>& v) {
               return ir::Call::make(ir::CallOp::pow, {v[0], v[1]});
             },
             "pow"),
         {a, b});
    return;
  }
  if (op == "Add" && layer_norm_pattern(n)) return;
  static const std::map<std::string, ir::NodeKind> kinds = {{"Add", ir::NodeKind::Add},
                                                            {"Sub", ir::NodeKind::Sub},
                                                            {"Mul", ir::NodeKind::Mul},
                                                            {"Div", ir::NodeKind::Div}};
  const ir::NodeKind k = kinds.at(op);
  std::string tag = op == "Add"   ? "add"
                    : op == "Sub" ? "subtract"
                    : op == "Mul" ? "multiply"
                                  : "divide";
  emit(elementwise(
           {a, b}, [k](const std::vector<ir::Expr>& v) { return ir::make_binary(k, v[0], v[1]); },
           tag),
       {a, b});
}

inline void Importer::variadic(const ::onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  std::vector<Value> xs;
  for (int i = 0; i < n.input_size(); ++i)
    if (has_input(i)) xs.push_back(in(i));
  LOOM_USER_CHECK(!xs.empty(), "loom.onnx.E1105") << what_ << ": " << where() << " has no inputs";
  const ir::DType t = xs[0].t.dtype();
  const size_t count = xs.size();
  emit(elementwise(
           xs,
           [&](const std::vector<ir::Expr>& v) {
             ir::Expr r = v[0];
             for (size_t i = 1; i < v.size(); ++i)
               r = op == "Max"   ? ir::Max::make(r, v[i])
                   : op == "Min" ? ir::Min::make(r, v[i])
                                 : ir::Add::make(r, v[i]);
             if (op == "Mean") r = ir::Div::make(r, ir::make_const(t, static_cast<double>(count)));
             return r;
           },
           op == "Max"    ? "maximum"
           : op == "Min"  ? "minimum"
           : op == "Mean" ? "mean"
                          : "add"),
       xs);
}

inline void Importer::clip(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  const ir::DType t = x.t.dtype();
  double lo = -std::numeric_limits<double>::infinity(),
         hi = std::numeric_limits<double>::infinity();
  if (opset_ < 11) {
    lo = attr_float("min", -std::numeric_limits<float>::infinity());
    hi = attr_float("max", std::numeric_limits<float>::infinity());
  } else {
    if (has_input(1)) lo = as_doubles(constant_in(1, "min"))[0];
    if (has_input(2)) hi = as_doubles(constant_in(2, "max"))[0];
  }
  emit(elementwise(
           {x},
           [&](const std::vector<ir::Expr>& v) {
             ir::Expr r = v[0];
             if (std::isfinite(lo)) r = ir::Max::make(r, ir::make_const(t, lo));
             if (std::isfinite(hi)) r = ir::Min::make(r, ir::make_const(t, hi));
             return r;
           },
           "clip"),
       {x});
}

inline void Importer::prelu(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  Value slope = in(1);
  // A per-channel slope exported as [C] broadcasts against the last axis under numpy's rule;
  // ONNX's own models give [C, 1, 1]. Both mean the channel axis when x is [N, C, ...].
  if (slope.rank() == 1 && x.rank() > 2 && slope.shape()[0] == x.shape()[1] &&
      slope.shape()[0] != x.shape().back()) {
    Shape s(static_cast<size_t>(x.rank() - 1), 1);
    s[0] = slope.shape()[0];
    slope = reshaped(slope, s, node_->input(1) + "_channels");
  }
  const ir::DType t = x.t.dtype();
  emit(elementwise(
           {x, slope},
           [&](const std::vector<ir::Expr>& v) {
             return ir::Select::make(ir::LT::make(v[0], ir::make_const(t, 0)),
                                     ir::Mul::make(v[0], v[1]), v[0]);
           },
           "prelu"),
       {x, in(1)});
}

inline void Importer::cast(const ::onnx::NodeProto&) {
  const Value& x = in(0);
  ir::DType t;
  const int to = static_cast<int>(attr_int("to", 0));
  LOOM_USER_CHECK(dtype_of(to, &t), "loom.onnx.E1104")
      << what_ << ": " << where() << ": cast to " << elem_type_name(to)
      << " (loom has FLOAT, DOUBLE, INT32 and INT64 tensors)";
  if (t == x.t.dtype()) {
    set_output(0, x);
    return;
  }
  emit(untyped::cast(x.t, t, out_name()), {x});
}

inline void Importer::identity(const ::onnx::NodeProto& n) {
  // Dropout at inference, Identity: the output is the input. Dropout's mask output is not.
  if (n.op_type() == "Dropout") {
    LOOM_USER_CHECK(n.output_size() < 2 || n.output(1).empty(), "loom.onnx.E1103")
        << what_ << ": " << where()
        << ": the mask output is requested (loom imports inference-mode Dropout)";
    if (has_input(2)) {
      const Value& training = constant_in(2, "training_mode");
      LOOM_USER_CHECK(as_ints(training)[0] == 0, "loom.onnx.E1103")
          << what_ << ": " << where() << ": training_mode is true";
    }
  }
  ++stats_.dropped;
  set_output(0, in(0));
}

}  // namespace detail
LOOM_END_NAMESPACE
